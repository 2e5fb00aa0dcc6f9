"""``--model`` names → a :class:`~envgym.policy.Policy` and a content fingerprint.

* ``smollm2`` — the embedded SmolLM2-135M-Instruct (local torch engine, no network);
* ``http://…`` / ``https://…`` — an OpenAI-compatible server (``URL#model`` picks the served model);
* a local directory — a Hugging Face causal LM (local torch engine);
* ``gold`` / ``random`` — the scripted gold-replay and random agents (baselines: ceiling, floor).

The fingerprint goes into the evaluation key: for local weights it hashes their bytes, so a
changed checkpoint under the same path is a new evaluation.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from envgym.policy import Policy

AGENTS = ("gold", "random")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


class ModelSpecError(ValueError):
    """An unknown or unusable ``--model``."""


@dataclass(frozen=True)
class ModelRef:
    spec: str
    kind: str  # "embedded" | "http" | "hf" | "agent"
    fingerprint: str


def model_ref(spec: str) -> ModelRef:
    """Classify ``spec`` (envgym.models.resolve: the one reading of ``--model``) and
    fingerprint it, without loading anything heavy."""
    from envgym.models.resolve import ModelFormError, resolve_model

    try:
        model = resolve_model(spec)
    except ModelFormError as exc:
        raise ModelSpecError(str(exc)) from None
    if model.kind == "agent":
        return ModelRef(spec, "agent", f"agent:{spec}:v1")
    if model.kind == "embedded":
        from envgym.embedded import GGUF_NAME, gguf_dir

        return ModelRef(spec, "embedded", _hash_files((gguf_dir() / GGUF_NAME,)))
    if model.kind in ("http", "vllm"):
        digest = hashlib.sha256(spec.encode()).hexdigest()[:32]
        return ModelRef(spec, model.kind, f"{model.kind}:{digest}")
    files = sorted(
        p
        for p in Path(model.spec).iterdir()
        if p.suffix in WEIGHT_SUFFIXES or p.name == "config.json"
    )
    return ModelRef(model.spec, "hf", _hash_files(tuple(files)))


@cache
def _hash_files(files: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}\0{f.stat().st_size}\0".encode())
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def load_policy(
    ref: ModelRef,
    *,
    bundle_dir: Path | None = None,
    sandbox: str = "bwrap",
    env_factory: Callable[[], Any] | None = None,
) -> Policy:
    """Build the policy ``ref`` names (the model backends live in ``envgym.models``).

    ``env_factory``: how the evaluation builds its envs; the gold agent replays through one."""
    if ref.kind == "agent":
        from envgym.rollout.agent_policy import AgentPolicy

        if ref.spec == "gold":
            if bundle_dir is None:
                raise ModelSpecError(
                    "--model gold replays a bundle's gold solutions: it needs the bundle"
                )
            return AgentPolicy.gold(bundle_dir, sandbox=sandbox, env_factory=env_factory)
        return AgentPolicy.random()
    from envgym.models.resolve import ModelFormError, open_policy

    try:
        return open_policy(ref.spec)
    except ModelFormError as exc:
        raise ModelSpecError(str(exc)) from None


def load_language_model(spec: str, purpose: str) -> Policy:
    """The model ``spec`` names (``--model`` syntax) for a job only a language model can do —
    ``purpose`` says which, e.g. "play τ²'s user"; a scripted agent baseline is refused."""
    ref = model_ref(spec)
    if ref.kind == "agent":
        raise ModelSpecError(
            f"{spec!r} is a scripted agent, not a language model that can {purpose}"
        )
    return load_policy(ref)


WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def model_window(ref: ModelRef) -> int | None:
    """The model's context window in tokens, read without loading it; None when unknown.

    Local weights: their ``config.json``; a server: the ``max_model_len`` vLLM lists at
    ``/models`` for the served model; the scripted agents have no window.
    """
    if ref.kind == "embedded":
        from envgym.embedded import hf_dir

        return _config_window(hf_dir() / "config.json")
    if ref.kind == "hf":
        return _config_window(Path(ref.spec) / "config.json")
    if ref.kind in ("http", "vllm"):
        return _served_window(ref.spec.removeprefix("vllm+"))
    return None


def model_tokenizer(ref: ModelRef) -> str | None:
    """What the env counts prompt tokens with (``BundleEnv(tokenizer=…)``): the model's own
    tokenizer for local weights; None (the approximate counter) for servers and agents."""
    if ref.kind == "embedded":
        return "smollm2"
    if ref.kind == "hf":
        return ref.spec
    return None


def model_decoder(ref: ModelRef) -> Callable[[list[int]], str] | None:
    """Token ids → text with the model's own tokenizer (special tokens kept), for the report's
    exact prompt text; None for chat servers and agents (their turns carry no token ids)."""
    if ref.kind not in ("embedded", "hf", "vllm"):
        return None
    from envgym.models.resolve import resolve_model
    from envgym.models.tool_support import local_tokenizer

    tokenizer = local_tokenizer(resolve_model(ref.spec))  # vllm+: the served model's own

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    return decode


def _config_window(path: Path) -> int | None:
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for key in WINDOW_KEYS:
        value = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _served_window(spec: str) -> int | None:
    """``max_model_len`` of the served model; None when the server does not state one.

    A server without ``/models`` (404, 405, 501) states none.  One that cannot be asked (down,
    timing out, failing) raises: the window is part of the evaluation's key, so a
    transient failure must not silently start a differently keyed (unresumable) evaluation."""
    import httpx

    url, _, served = spec.partition("#")
    try:
        response = httpx.get(url.rstrip("/") + "/models", timeout=5.0)
        if response.status_code in (404, 405, 501):  # a server without /models: a stable answer
            return None
        response.raise_for_status()
        models = response.json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ModelSpecError(
            f"cannot read the context window of {url} from its /models ({type(exc).__name__}: {exc}); "
            "start the server first, or state the window with --context-window N"
        ) from None
    entry = (
        next(
            (m for m in models if isinstance(m, dict) and (not served or m.get("id") == served)),
            None,
        )
        if isinstance(models, list)
        else None
    )
    value = entry.get("max_model_len") if entry is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def served_model(base_url: str) -> str:
    """The first model an OpenAI-compatible server lists at ``/models``."""
    import httpx

    try:
        response = httpx.get(base_url.rstrip("/") + "/models", timeout=10.0)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ModelSpecError(
            f"cannot learn which model {base_url} serves ({type(exc).__name__}: {exc}); "
            "name it as URL#model, e.g. http://127.0.0.1:8000/v1#SmolLM2-135M-Instruct"
        ) from None


def _backend(module: str, name: str) -> Any:  # a policy class, imported by name
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ModelSpecError(f"the model backend {module}.{name} is not available: {exc}") from None
