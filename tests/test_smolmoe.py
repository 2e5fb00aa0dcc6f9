"""SmolMoE (envgym/trainer/smolmoe.py): a dense Llama sparse-upcycled into a standard HF Mixtral."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralForCausalLM,
    PreTrainedTokenizerFast,
)

from envgym.trainer.smolmoe import upcycle, upcycle_model

VOCAB = 64
TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"


def tiny_llama(seed: int = 0, **overrides: object) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        **overrides,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # HF's 0.02 init makes the MLP nearly silent; make it matter
        for layer in model.model.layers:
            for lin in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                lin.weight.normal_(0.0, 0.3)
    return model


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
    )
    tok.chat_template = TEMPLATE
    return tok


@pytest.fixture
def dense_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "dense"
    tiny_llama().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def ids(seed: int = 1, batch: int = 2, seq: int = 11) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def test_upcycle_equals_dense_at_noise_zero_fp32() -> None:
    dense = tiny_llama()
    moe = upcycle_model(dense, n_experts=4, top_k=2)
    x = ids()
    with torch.no_grad():
        want = dense(x).logits
        got = moe(x, output_router_logits=True)
    routers = got.router_logits
    # Identical experts + renormalized top-k gates: Σ g_j · MLP(x) = MLP(x) up to fp32 rounding
    # of Σ g_j (measured max |Δ| ≈ 6e-8 on logits of size ~1).
    torch.testing.assert_close(got.logits, want, rtol=0, atol=1e-5)
    # ... and not because routing is degenerate: the random router spreads tokens over experts.
    used = {int(e) for layer in routers for e in layer.topk(2, dim=-1).indices.flatten()}
    assert used == {0, 1, 2, 3}


def test_upcycle_float64_differs_only_by_fp32_gate_rounding() -> None:
    dense = tiny_llama().double()
    x = ids()
    with torch.no_grad():
        want = dense(x).logits
        # top-1: the gate is p/p = 1 exactly, so identical experts give the dense model bit for bit
        top1 = upcycle_model(dense, top_k=1)
        assert next(top1.parameters()).dtype == torch.float64
        assert torch.equal(top1(x).logits, want)
        # top-2: Mixtral computes gates in fp32 (softmax(logits.float())), so Σ g_j = 1 only to
        # fp32 rounding (~6e-8), whatever the model's dtype
        top2 = upcycle_model(dense, top_k=2)(x).logits
    assert not torch.equal(top2, want)
    torch.testing.assert_close(top2, want, rtol=0, atol=1e-6)


def test_upcycle_weights_are_copies_and_router_is_seeded() -> None:
    dense = tiny_llama()
    moe = upcycle_model(dense, n_experts=3, top_k=1, router_std=0.5, seed=7)
    mlp = dense.model.layers[1].mlp
    block = moe.model.layers[1].mlp
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
    for e in range(3):
        assert torch.equal(block.experts.gate_up_proj[e], gate_up)
        assert torch.equal(block.experts.down_proj[e], mlp.down_proj.weight)
    assert block.gate.weight.shape == (3, 32)
    assert 0.3 < float(block.gate.weight.detach().std()) < 0.7  # ~ N(0, 0.5²), 96 draws
    again = upcycle_model(dense, n_experts=3, top_k=1, router_std=0.5, seed=7)
    assert torch.equal(again.model.layers[1].mlp.gate.weight, block.gate.weight)
    other = upcycle_model(dense, n_experts=3, top_k=1, router_std=0.5, seed=8)
    assert not torch.equal(other.model.layers[1].mlp.gate.weight, block.gate.weight)
    # untied head, exact copy of the (tied) dense head; attention copied exactly
    assert moe.config.tie_word_embeddings is False
    assert moe.lm_head.weight.data_ptr() != moe.model.embed_tokens.weight.data_ptr()
    assert torch.equal(moe.lm_head.weight, dense.lm_head.weight)
    assert torch.equal(
        moe.model.layers[0].self_attn.q_proj.weight, dense.model.layers[0].self_attn.q_proj.weight
    )
    assert dense.config.model_type == "llama"  # the source is untouched


def test_noise_lets_experts_diverge() -> None:
    dense = tiny_llama()
    moe = upcycle_model(dense, noise=0.1, seed=3)
    experts = moe.model.layers[0].mlp.experts.gate_up_proj  # [E, 2I, H]
    assert not torch.equal(experts[0], experts[1])
    mlp = dense.model.layers[0].mlp
    w = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
    rel = float((experts[0] - w).detach().std() / w.detach().std())
    assert 0.05 < rel < 0.2  # noise · std(W) per entry
    with torch.no_grad():
        diff = (moe(ids()).logits - dense(ids()).logits).abs().max()
    assert diff > 1e-4  # the upcycle now only approximates the dense model


def test_saved_folder_loads_unchanged(dense_dir: Path, tmp_path: Path) -> None:
    out = upcycle(dense_dir, tmp_path / "moe", n_experts=4, top_k=2)
    assert out == tmp_path / "moe"
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["MixtralForCausalLM"]
    assert config["model_type"] == "mixtral"
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (4, 2)
    # The checkpoint uses Mixtral's canonical tensor names (what vLLM's Mixtral loader reads).
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.block_sparse_moe.experts.3.w1.weight" in names
    assert "model.layers.1.block_sparse_moe.experts.0.w2.weight" in names
    assert "model.layers.1.block_sparse_moe.gate.weight" in names
    assert "lm_head.weight" in names

    loaded = AutoModelForCausalLM.from_pretrained(str(out))
    assert isinstance(loaded, MixtralForCausalLM)
    dense = AutoModelForCausalLM.from_pretrained(str(dense_dir))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids()).logits, dense(ids()).logits, rtol=0, atol=1e-5)
    tok = AutoTokenizer.from_pretrained(str(out))
    text = tok.apply_chat_template([{"role": "user", "content": "w5 w6"}], tokenize=False)
    assert text == "<user>w5 w6\n"


def test_upcycle_bad_input(dense_dir: Path, tmp_path: Path) -> None:
    dense = tiny_llama()
    with pytest.raises(ValueError, match="n_experts"):
        upcycle_model(dense, n_experts=0)
    with pytest.raises(ValueError, match="top_k"):
        upcycle_model(dense, n_experts=2, top_k=3)
    with pytest.raises(ValueError, match="top_k"):
        upcycle_model(dense, top_k=0)
    with pytest.raises(TypeError, match="n_experts"):
        upcycle_model(dense, n_experts=True)
    with pytest.raises(TypeError, match="top_k"):
        upcycle_model(dense, top_k=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="noise"):
        upcycle_model(dense, noise=-0.1)
    with pytest.raises(ValueError, match="noise"):
        upcycle_model(dense, noise=float("nan"))
    with pytest.raises(TypeError, match="noise"):
        upcycle_model(dense, noise="0.1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="router_std"):
        upcycle_model(dense, router_std=float("inf"))
    with pytest.raises(ValueError, match="attention_bias"):
        upcycle_model(tiny_llama(attention_bias=True))
    with pytest.raises(ValueError, match="hidden_act"):
        upcycle_model(tiny_llama(hidden_act="gelu"))
    with pytest.raises(ValueError, match="model_type='gpt2'"):
        from transformers import GPT2LMHeadModel

        upcycle_model(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB)))
    with pytest.raises(FileNotFoundError, match="config.json"):
        upcycle(tmp_path / "nowhere", tmp_path / "out")
    (dense_dir / "tokenizer.json").unlink()
    (dense_dir / "tokenizer_config.json").unlink()
    with pytest.raises(ValueError, match="tokenizer"):
        upcycle(dense_dir, tmp_path / "out2")


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_embedded_smollm2_upcycle_generates_like_dense(tmp_path: Path) -> None:
    from envgym.embedded import hf_dir

    src = hf_dir()
    out = upcycle(src, tmp_path / "smolmoe")
    tok = AutoTokenizer.from_pretrained(str(out))
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    greedy = {"max_new_tokens": 8, "do_sample": False}
    with torch.no_grad():
        moe = AutoModelForCausalLM.from_pretrained(str(out))
        assert isinstance(moe, MixtralForCausalLM)
        got = moe.generate(**prompt, **greedy)
        del moe
        dense = AutoModelForCausalLM.from_pretrained(str(src))
        want = dense.generate(**prompt, **greedy)
    assert got.shape[1] > prompt["input_ids"].shape[1]
    assert got.tolist() == want.tolist()


def test_the_cli_upcycles_and_refuses_bad_input(dense_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app

    runner = CliRunner()
    out = tmp_path / "moe"
    res = runner.invoke(
        app, ["upcycle", str(dense_dir), str(out), "--experts", "3", "--top-k", "1"]
    )
    assert res.exit_code == 0, res.output
    config = json.loads((out / "config.json").read_text())
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (3, 1)
    before = (out / "model.safetensors").read_bytes()
    again = runner.invoke(app, ["upcycle", str(dense_dir), str(out)])
    assert again.exit_code == 2 and "--force" in again.output  # nothing overwritten
    assert (out / "model.safetensors").read_bytes() == before
    forced = runner.invoke(app, ["upcycle", str(dense_dir), str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    bad = runner.invoke(app, ["upcycle", str(dense_dir), str(tmp_path / "o2"), "--top-k", "5"])
    assert bad.exit_code == 2 and "top_k" in bad.output
    missing = runner.invoke(app, ["upcycle", str(tmp_path / "nowhere"), str(tmp_path / "o3")])
    assert missing.exit_code == 2 and "config.json" in missing.output
