"""Cold-start SFT: rendering and mask round trip, the held-out split, the loss on
policy tokens only, bad config, and (heavy) the embedded model learning to call a tool."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch
from bundle_factory import TASK, make_notes_bundle

from envgym.bundle import write_manifest
from envgym.trainer.sft import SFTConfig, batch_logprobs, lr_at, save_policy, sft_loss, train_sft
from envgym.trainer.sft_data import HeldOut, SFTExample
from envgym.trainer.sft_gold import EnvOptions, gold_examples
from envgym.trainer.sft_run import SFTConfigError, load_run_config, override, run_config_from_dict

pytestmark = pytest.mark.timeout(300)  # the gold replays start envs; generous under load
INPROCESS = EnvOptions(sandbox="inprocess")  # the notes bundle is trusted test code
NOTES = {
    "secret": "tangerine",
    "other": "plum",
    "k1": "apricot",
    "k2": "quince",
    "k3": "lime",
    "k4": "melon",
    "k5": "cherry",
    "k6": "grape",
    "k7": "mango",
    "k8": "olive",
}


def _task(key: str, task_id: str | None = None) -> dict[str, Any]:
    return {
        **TASK,
        "id": task_id or f"note-{key}",
        "metadata": {"key": key},
        "prompt": f"Find the note called '{key}' and submit its value with submit_result.",
    }


def notes_bundle(root: Path, keys: list[str], *, ids: list[str] | None = None) -> Path:
    """A notes bundle (tests/bundle_factory.py) with one task per key and every NOTES row."""
    tasks = [_task(k, i) for k, i in zip(keys, ids or [None] * len(keys))]
    make_notes_bundle(root, tasks=tasks)
    db = sqlite3.connect(root / "state" / "db.sqlite")
    db.executemany("INSERT OR REPLACE INTO notes VALUES (?, ?)", list(NOTES.items()))
    db.commit()
    db.close()
    write_manifest(root, name=root.name, category="test", provenance={"agent": "test", "seed": 0})
    return root


@pytest.fixture(scope="module")
def fmt() -> Any:
    from transformers import AutoTokenizer

    from envgym import embedded
    from envgym.models.chat import ChatFormat

    return ChatFormat(AutoTokenizer.from_pretrained(str(embedded.hf_dir())), "hermes")


def _spans(mask: tuple[int, ...]) -> list[tuple[int, int]]:
    """Maximal runs of 1 in ``mask``: the policy's turns."""
    out, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


# -- rendering and the mask: exactly the tokens the env parses ------------------------------------


def test_gold_replay_tokens_are_the_engines_and_the_parser_reads_them_back(
    tmp_path: Path, fmt: Any
) -> None:
    import envgym

    bundle = notes_bundle(tmp_path / "b", ["secret"])
    examples, report = gold_examples(bundle, fmt, HeldOut(), env=INPROCESS)
    assert report.to_dict()["dropped"] == {} and len(examples) == 1
    ex = examples[0]
    # Written by hand: the Hermes text SmolLM2 must write for the gold calls.
    want_texts = [
        '<tool_call>\n{"name": "get_note", "arguments": {"key": "secret"}}\n</tool_call>',
        '<tool_call>\n{"name": "submit_result", "arguments": {"answer_text": "tangerine"}}\n'
        "</tool_call>",
    ]
    spans = _spans(ex.loss_mask)
    assert len(spans) == 2
    for (s, e), text in zip(spans, want_texts):
        assert list(ex.token_ids[s:e]) == fmt.encode(text)  # exact ids, mask 1 exactly there
        parsed = fmt.parser.parse(fmt.tokenizer.decode(list(ex.token_ids[s:e])))
        assert not parsed.problems and len(parsed.tool_calls) == 1
    calls = [
        fmt.parser.parse(fmt.tokenizer.decode(list(ex.token_ids[s:e]))).tool_calls[0]
        for s, e in spans
    ]
    assert [(c.name, c.arguments) for c in calls] == [
        ("get_note", {"key": "secret"}),
        ("submit_result", {"answer_text": "tangerine"}),
    ]
    # Before the first policy token: the prompt the local engine builds from the env's reset.
    env = envgym.make(str(bundle), sandbox="inprocess")
    try:
        obs, _ = env.reset(options={"task": "note-secret"})
        prompt = fmt.prompt_ids(obs["messages"], obs["tools"])
    finally:
        env.close()
    assert list(ex.token_ids[: spans[0][0]]) == prompt
    # Between the turns: template glue and the tool's answer, none of it trained on.
    glue = fmt.tokenizer.decode(list(ex.token_ids[spans[0][1] : spans[1][0]]))
    assert glue == "<|im_end|>\n<|im_start|>tool\ntangerine<|im_end|>\n<|im_start|>assistant\n"
    assert spans[1][1] == len(ex.token_ids)  # the episode ends with the submit call


def test_a_turn_the_env_parses_differently_is_dropped(tmp_path: Path, fmt: Any) -> None:
    """The replay keeps an episode only when the env read back exactly the gold calls."""

    class Garbling:  # writes the call with a broken JSON body
        name = "hermes"

        def format_calls(self, calls: Any) -> str:
            return '<tool_call>\n{"name": "get_note", "arguments": {\n</tool_call>'

        def __getattr__(self, item: str) -> Any:
            return getattr(fmt.parser, item)

    from envgym.models.chat import ChatFormat

    broken = ChatFormat(fmt.tokenizer, "hermes")
    broken.parser = Garbling()  # type: ignore[assignment]
    bundle = notes_bundle(tmp_path / "b", ["secret"])
    examples, report = gold_examples(bundle, broken, HeldOut(), env=INPROCESS)
    assert examples == []
    assert sum(report.dropped.values()) == 1 and report.episodes == 0


# -- the split ---------------------------------------------------------------------------------


def test_held_out_tasks_bundles_and_prompts_never_become_examples(tmp_path: Path, fmt: Any) -> None:
    train = notes_bundle(tmp_path / "train", ["k1", "k2", "k3", "k4"])
    # A separate held-out bundle whose one task has k2's prompt under another id.
    held_bundle = notes_bundle(tmp_path / "held", ["k2"], ids=["renamed"])
    held = HeldOut.resolve([held_bundle], ["note-k3"])
    examples, report = gold_examples(train, fmt, held, env=INPROCESS)
    used = {e.task_id for e in examples}
    assert used == {"note-k1", "note-k4"}
    assert report.dropped == {"held_out_task": 1, "held_out_prompt": 1}
    for e in examples:  # no held-out value ever appears in a training sequence
        text = fmt.tokenizer.decode(list(e.token_ids))
        assert "quince" not in text and "lime" not in text
    # A held-out bundle as a training source is a configuration error, not a silent filter.
    with pytest.raises(ValueError, match="held out"):
        gold_examples(held_bundle, fmt, held, env=INPROCESS)
    record = held.to_dict()
    assert record["tasks"] == ["note-k3"] and len(record["bundles"]) == 1


def test_the_run_records_its_split_and_what_it_trained_on(tmp_path: Path, fmt: Any) -> None:
    from envgym.trainer.sft_run import build_examples

    train = notes_bundle(tmp_path / "train", ["k1", "k2"])
    held = notes_bundle(tmp_path / "held", ["k5"])
    cfg = run_config_from_dict(
        {
            "train": [str(train)],
            "out": str(tmp_path / "out"),
            "held_out": {"bundles": [str(held)], "tasks": ["note-k2"]},
            "data": {"sandbox": "inprocess"},
        }
    )
    run = build_examples(cfg, fmt, vocab_size=len(fmt.tokenizer))
    assert {e.task_id for e in run.examples} == {"note-k1"}
    assert run.held_out.to_dict()["bundle_specs"] == [str(held)]


def test_golds_beyond_the_turn_budget_and_examples_beyond_the_batch_bound_are_dropped(
    tmp_path: Path, fmt: Any
) -> None:
    """A two-call gold is dropped under ``max_turns`` 1 and kept under 2; an example longer than
    ``sft.batch_tokens`` (the memory bound) is dropped and uncounted in the kept totals."""
    from envgym.trainer.sft_run import build_examples

    bundle = notes_bundle(tmp_path / "b", ["k1", "k2"])
    _, report = gold_examples(bundle, fmt, HeldOut(), env=INPROCESS, max_turns=1)
    assert report.to_dict()["dropped"] == {"too_many_turns": 2} and report.episodes == 0
    kept, report = gold_examples(bundle, fmt, HeldOut(), env=INPROCESS, max_turns=2)
    assert len(kept) == 2 and report.to_dict()["dropped"] == {}
    short, long = sorted(len(e.token_ids) for e in kept)
    assert short < long
    base = {"train": [str(bundle)], "out": str(tmp_path / "out"), "data": {"sandbox": "inprocess"}}
    for bound, left in ((long, 2), (short, 1), (short - 1, 0)):
        cfg = run_config_from_dict({**base, "sft": {"batch_tokens": bound}})
        run = build_examples(cfg, fmt, vocab_size=len(fmt.tokenizer))
        assert len(run.examples) == left
        assert run.report.examples == left
        assert run.report.tokens == sum(len(e.token_ids) for e in run.examples)
        assert run.report.dropped.get("longer_than_batch_tokens", 0) == 2 - left
    with pytest.raises(SFTConfigError, match="data.max_turns must be ≥ 1"):
        run_config_from_dict({**base, "data": {"max_turns": 0}})


def test_a_suite_trains_on_its_train_split_and_holds_out_the_rest(tmp_path: Path, fmt: Any) -> None:
    """A suite as ``train`` means its training categories' bundles, as a held-out entry its
    held-out categories' bundles: no held-out category's task becomes an example.  A damaged
    suite is a config error before anything runs."""
    from test_suite import config, factory

    from envgym.suite_manifest import load_suite
    from envgym.synth_agents.suite import build_suite
    from envgym.trainer.sft_run import build_examples

    suite = tmp_path / "suite"
    build_suite(config(("alpha", "beta", "gamma"), held_out_share=0.34), suite, None,
                agent_factory=factory())  # fmt: skip
    loaded = load_suite(suite)
    prompts = {
        split: {json.loads((d / "tasks.jsonl").read_text())["prompt"]
                for d in loaded.bundle_dirs(split)}
        for split in ("train", "held_out")
    }  # fmt: skip
    assert len(prompts["train"]) == 4 and len(prompts["held_out"]) == 2
    cfg = run_config_from_dict(
        {
            "train": [str(suite)],
            "out": str(tmp_path / "out"),
            "held_out": {"bundles": [str(suite)]},
            "data": {"sandbox": "inprocess"},
        }
    )
    run = build_examples(cfg, fmt, vocab_size=len(fmt.tokenizer))
    assert len(run.examples) == 4 and run.report.dropped == {}
    assert len(run.held_out.to_dict()["bundles"]) == 2
    for example in run.examples:  # each a training category's task, none held out
        text = fmt.tokenizer.decode(list(example.token_ids))
        assert sum(p in text for p in prompts["train"]) == 1
        assert not any(p in text for p in prompts["held_out"])
    (suite / "suite.json").write_text("{")
    with pytest.raises(SFTConfigError, match="truncated or not JSON"):
        run_config_from_dict({"train": [str(suite)], "out": str(tmp_path / "o2")})


def test_store_episodes_with_reward_1_of_the_named_model_only(tmp_path: Path, fmt: Any) -> None:
    """Rejection sampling: passed episodes of the named model, minus held-out tasks."""
    import dataclasses

    from envgym.bundle import load_bundle
    from envgym.store import Store
    from envgym.trainer.sft_data import store_examples
    from envgym.trainer.sft_gold import _replay

    train = notes_bundle(tmp_path / "train", ["k1", "k2", "k3"])
    bundle = load_bundle(train)
    tasks = ["note-k1", "note-k2", "note-k3"]
    results = [
        r for r, _ in asyncio.run(_replay(train, bundle, fmt, INPROCESS, tasks, True, 1, None))
    ]
    assert all(r.passed for r in results)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    h = store.add_bundle(bundle)
    for key, model in (("ev-m", "m"), ("ev-other", "other")):
        store.open_evaluation(
            key, bundle_hash=h, model=model, model_hash=model, config_hash="c", config={}
        )
    failed = dataclasses.replace(results[2], reward=0.0)
    for r in (results[0], results[1], failed):
        store.add_episode("ev-m", r)
    store.add_episode("ev-other", results[2])  # passed, but another model's
    held = HeldOut.resolve([], ["note-k2"])
    examples, report = store_examples(store, held, models=["m"], vocab_size=len(fmt.tokenizer))
    assert [e.task_id for e in examples] == ["note-k1"]
    assert report.dropped == {"held_out_task": 1, "not_passed": 1}
    assert examples[0].source == "store"
    assert examples[0].token_ids == tuple(results[0].record.segments[0].token_ids)
    assert examples[0].loss_mask == tuple(results[0].record.segments[0].loss_mask)
    with pytest.raises(ValueError, match="another tokenizer"):
        store_examples(store, held, models=["m"], vocab_size=10)
    with pytest.raises(ValueError, match="name the model"):
        store_examples(store, held, models=[], vocab_size=10)
    store.close()


# -- the loss: policy tokens only ----------------------------------------------------------------


def test_sft_loss_is_the_token_mean_over_policy_tokens_by_hand() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 1], [0, 1, 0]])
    assert sft_loss(logp, mask).item() == pytest.approx((1 + 3 + 5) / 3, abs=1e-15)
    # Masked positions contribute nothing, whatever they hold (even inf).
    logp2 = logp.clone()
    logp2[0, 1] = -math.inf
    logp2[1, 2] = 1e9
    assert sft_loss(logp2, mask).item() == pytest.approx(3.0, abs=1e-15)
    g = logp.clone().requires_grad_(True)
    sft_loss(g, mask).backward()
    assert torch.equal(g.grad, -mask.double() / 3)


def _tiny_model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).double().eval()


def _example(ids: list[int], mask: list[int], task: str = "t") -> SFTExample:
    return SFTExample(tuple(ids), tuple(mask), "gold", "sha256:x", task)


@pytest.mark.parametrize("share", [True, False])
def test_batch_logprobs_score_exactly_the_policy_tokens(share: bool) -> None:
    """Against full forwards of each row, computed here: log_softmax(logits)[t, ids[t+1]]
    summed over the positions whose next token has mask 1, divided by their count."""
    model = _tiny_model()
    prefix = list(range(1, 41))  # 40 shared tokens (≥ MIN_SHARED): the prefix path runs
    rows = [
        _example([*prefix, 50, 51, 52, 53], [0] * 40 + [0, 1, 1, 0]),
        _example([*prefix, 60, 61, 62], [0] * 40 + [1, 0, 1]),
        _example([*prefix, 7, 8, 9, 10, 11], [0] * 40 + [0, 0, 1, 1, 1]),
    ]
    logp, mask = batch_logprobs(model, rows, share_prefix=share)
    loss = sft_loss(logp, mask)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row.token_ids])
            lp = torch.log_softmax(model(input_ids=ids).logits[0], -1)
            for t in range(len(row.token_ids) - 1):
                if row.loss_mask[t + 1]:
                    total -= float(lp[t, row.token_ids[t + 1]])
                    count += 1
    assert count == 7 and int(mask.sum()) == 7
    assert loss.item() == pytest.approx(total / count, rel=1e-10)
    # Changing a non-policy token after the last policy token changes nothing.
    rows[0] = _example([*prefix, 50, 51, 52, 3], [0] * 40 + [0, 1, 1, 0])
    assert sft_loss(*batch_logprobs(model, rows, share_prefix=share)).item() == pytest.approx(
        total / count, rel=1e-10
    )


def test_lr_warms_up_then_decays_by_cosine() -> None:
    cfg = SFTConfig(lr=1.0, warmup_ratio=0.2, min_lr_ratio=0.1)
    got = [lr_at(s, 10, cfg) for s in range(10)]
    # warmup = ceil(0.2 * 10) = 2 steps: 1/2, 2/2; then 0.1 + 0.9 * (1 + cos(pi * k / 8)) / 2
    want = [0.5, 1.0] + [0.1 + 0.45 * (1 + math.cos(math.pi * k / 8)) for k in range(8)]
    assert got == pytest.approx(want, abs=1e-12)


def test_train_sft_lowers_the_loss_and_saves_a_folder_load_policy_loads(
    tmp_path: Path, fmt: Any
) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from envgym.models import load_policy

    torch.manual_seed(0)
    tok = fmt.tokenizer
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
    )
    rows = [
        _example([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 1, 1], "a"),
        _example([1, 2, 9, 8, 7], [0, 0, 1, 1, 1], "b"),
    ]
    # The rows share 2 < MIN_SHARED tokens: two length buckets, two steps per epoch.
    result = train_sft(model, rows, SFTConfig(epochs=10, lr=1e-2, warmup_ratio=0.0))
    assert len(result.steps) == 20 and result.skipped == 0
    assert result.steps[-1].loss < 0.8 * result.steps[0].loss
    out = save_policy(model, tok, tmp_path / "model", {"note": "test"})
    policy = load_policy(str(out))
    try:
        assert policy.format.tokenizer.chat_template == tok.chat_template
        assert json.loads((out / "sft_run.json").read_text()) == {"note": "test"}
    finally:
        asyncio.run(policy.aclose())
    with pytest.raises(FileExistsError, match="not empty"):
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "x").write_text("")
        save_policy(model, tok, tmp_path / "busy", {})


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"out": "o"}, "needs 'train'"),
        ({"train": ["x"]}, "needs 'out'"),
        ({"train": [], "out": "o"}, "at least one"),
        ({"train": ["x"], "out": "o", "epochs": 3}, "unknown config key 'epochs'"),
        ({"train": ["x"], "out": "o", "sft": {"lrr": 1}}, "unknown config key 'sft.lrr'"),
        ({"train": ["x"], "out": "o", "sft": {"lr": -1.0}}, "sft.lr = -1.0"),
        ({"train": ["x"], "out": "o", "sft": {"epochs": 0}}, "sft.epochs = 0"),
        ({"train": ["x"], "out": "o", "sft": {"epochs": True}}, "sft.epochs must be int"),
        ({"train": ["x"], "out": "o", "sft": {"lr": "fast"}}, "sft.lr must be int or float"),
        ({"train": "x", "out": "o"}, "train must be list"),
        ({"train": [""], "out": "o"}, "non-empty strings"),
        ({"train": ["x"], "out": "o", "data": {"limit": 0}}, "data.limit must be ≥ 1"),
        ({"train": ["x"], "out": "o", "held_out": {"bundles": "h"}}, "held_out.bundles must be"),
        ({"train": ["x"], "out": "o", "store": {"db": "sqlite://"}}, "store.models"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_bad_config_is_one_clear_error(data: Any, match: str) -> None:
    with pytest.raises(SFTConfigError, match=match):
        run_config_from_dict(data)


def test_the_shipped_config_loads_and_overrides_are_checked(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    cfg = load_run_config(repo / "configs" / "sft_smollm2.yaml")
    assert cfg.model == "smollm2" and cfg.held_out_bundles and cfg.train
    assert override(cfg, sft_epochs=1, limit=4).sft.epochs == 1
    with pytest.raises(SFTConfigError, match="sft.lr"):
        override(cfg, sft_lr=0.0)
    with pytest.raises(SFTConfigError, match="unknown override"):
        override(cfg, colour="red")
    (tmp_path / "bad.yaml").write_text("train: [x\n")
    with pytest.raises(SFTConfigError, match="not valid YAML"):
        load_run_config(tmp_path / "bad.yaml")
    with pytest.raises(SFTConfigError, match="cannot read"):
        load_run_config(tmp_path / "missing.yaml")


def test_bad_examples_and_inputs_are_refused(tmp_path: Path, fmt: Any) -> None:
    with pytest.raises(ValueError, match="3 ids but 2 mask"):
        _example([1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match="only 0 and 1"):
        _example([1, 2], [0, 2])
    with pytest.raises(ValueError, match="no policy token"):
        _example([1, 2], [1, 0])
    with pytest.raises(ValueError, match=r"must both be \[B, T\]"):
        sft_loss(torch.zeros(2, 3), torch.ones(2, 2))
    with pytest.raises(ValueError, match="no policy token"):
        sft_loss(torch.zeros(1, 3), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="SFTConfig.batch_tokens"):
        SFTConfig(batch_tokens=4)
    with pytest.raises(ValueError, match="no SFT examples"):
        train_sft(_tiny_model(), [], SFTConfig())
    with pytest.raises(ValueError, match="held-out bundle '/nowhere'"):
        HeldOut.resolve(["/nowhere"])
    with pytest.raises(ValueError, match="non-empty task id"):
        HeldOut.resolve([], [" "])
    bundle = notes_bundle(tmp_path / "b", ["k1"])
    with pytest.raises(ValueError, match="the env parses 'json'"):
        gold_examples(bundle, fmt, HeldOut(), env=EnvOptions(sandbox="inprocess", parser="json"))
    with pytest.raises(ValueError, match="limit must be ≥ 1"):
        gold_examples(bundle, fmt, HeldOut(), env=INPROCESS, limit=0)


def test_the_cli_refuses_bad_input_before_running(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envgym.cli import app

    runner = CliRunner()
    no_target = runner.invoke(app, ["sft"])
    assert no_target.exit_code == 2 and "--env and --out" in no_target.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [x]\nout: o\nsft: {warmup: 1}\n")
    res = runner.invoke(app, ["sft", str(bad)])
    assert res.exit_code == 2 and "sft.warmup" in res.output
    res = runner.invoke(app, ["sft", "--env", "x", "--out", str(tmp_path / "o"), "--epochs", "0"])
    assert res.exit_code == 2 and "sft.epochs = 0" in res.output


# -- heavy: the embedded model learns to call a tool ---------------------------------------------


def _first_turn(policy: Any, bundle: Path, task: str) -> Any:
    import envgym
    from envgym.policy import SamplingParams

    env = envgym.make(str(bundle), sandbox="inprocess")
    try:
        obs, _ = env.reset(options={"task": task})
    finally:
        env.close()
    params = SamplingParams(temperature=0.0, max_tokens=64)
    turn = asyncio.run(policy.act(f"{task}#0", obs["messages"], obs["tools"], params))
    return policy.format.parser.parse(turn.text)


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_sft_makes_the_embedded_model_call_a_tool_on_a_held_out_task(
    tmp_path: Path, fmt: Any
) -> None:
    from envgym.models.local import LocalPolicy
    from envgym.trainer.sft import load_trainable

    torch.set_num_threads(2)
    train = notes_bundle(tmp_path / "train", ["k1", "k2", "k3", "k4", "k5", "k6"])
    held = notes_bundle(tmp_path / "held", ["k8"])
    examples, report = gold_examples(train, fmt, HeldOut.resolve([held]), env=INPROCESS)
    assert report.episodes == 6 and len(examples) == 6
    model, tok = load_trainable("smollm2")
    before = LocalPolicy(model, tok, name="before")
    parsed = _first_turn(before, held, "note-k8")
    assert parsed.tool_calls == ()  # the embedded model cannot act yet
    result = train_sft(model, examples, SFTConfig(epochs=3, lr=2e-4, batch_tokens=4096))
    assert result.skipped == 0 and result.steps[-1].loss < result.steps[0].loss
    after = LocalPolicy(model, tok, name="after")
    parsed = _first_turn(after, held, "note-k8")
    assert len(parsed.tool_calls) >= 1 and not parsed.problems
    assert parsed.tool_calls[0].name in {"get_note", "list_keys", "submit_result"}
