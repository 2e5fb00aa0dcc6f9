"""The one reading of a ``--model`` string (docs/MODELS.md, "Model strings").

Every command that takes ``--model`` (``eval``, ``synth``'s ``--model``/``--filter-model``/
``--answer-models``, the search-QA pipeline) goes through :func:`resolve_model`, via
``envgym.evaluate.models.model_ref``, so a form one command accepts every command accepts:

* ``smollm2`` — the embedded SmolLM2-135M-Instruct on the local engine;
* a local directory holding a Hugging Face causal LM (weights + ``config.json``);
* ``http(s)://host/v1[#model]`` — an OpenAI-compatible chat-completions server (it renders
  the prompt itself);
* ``vllm+http(s)://host/v1[#model]`` — a vLLM server driven token-in/token-out: envgym renders
  and tokenizes, so records are exact (envgym.models.vllm_server);
* ``gold`` / ``random`` — the scripted agents (baselines, not language models).

Hub ids (``org/name``) are refused: loading one would download weights at run time, and the
evaluation key fingerprints local bytes.  ``huggingface-cli download org/name --local-dir DIR``
and ``--model DIR`` do the same, reproducibly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.models.served import ServerReplyError
from envgym.policy import Policy

AGENTS = ("gold", "random")
EMBEDDED = "smollm2"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
VLLM_SCHEME = "vllm+"
MAX_SPEC = 2048  # a model string is a name, a path or a URL: anything longer is a mistake
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
FORMS = (
    "'smollm2' (the embedded model), a local Hugging Face model directory, "
    "http(s)://host/v1[#model] (an OpenAI-compatible server), "
    "vllm+http(s)://host/v1[#model] (a vLLM server, token-in/token-out) or 'gold'/'random' (agents)"
)


class ModelFormError(ValueError):
    """A ``--model`` string that names no model envgym can use (the message says why)."""


@dataclass(frozen=True)
class ResolvedModel:
    """What a ``--model`` string names.

    ``kind``: ``"embedded"`` | ``"hf"`` | ``"http"`` | ``"vllm"`` | ``"agent"``; ``spec``: the
    canonical string (a directory made absolute); ``url``: a server's base URL (``…/v1``,
    without ``vllm+`` and ``#model``); ``served``: the ``#model`` part, "" when not given;
    ``path``: a local directory."""

    kind: str
    spec: str
    url: str = ""
    served: str = ""
    path: Path | None = None

    @property
    def is_server(self) -> bool:
        return self.kind in ("http", "vllm")


def resolve_model(spec: str) -> ResolvedModel:
    """Classify ``spec`` without loading anything heavy; :class:`ModelFormError` if unusable."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelFormError(f"--model must not be empty; expected {FORMS}")
    if len(spec) > MAX_SPEC or _CONTROL.search(spec):
        raise ModelFormError(
            f"--model {spec[:80]!r}…: longer than {MAX_SPEC} characters or holding control "
            "characters; expected " + FORMS
        )
    if spec in AGENTS:
        return ResolvedModel("agent", spec)
    if spec == EMBEDDED:
        return ResolvedModel("embedded", spec)
    if spec.startswith(VLLM_SCHEME):
        url, served = _server(spec.removeprefix(VLLM_SCHEME), spec)
        return ResolvedModel("vllm", spec, url, served)
    if spec.startswith(("http://", "https://")):
        url, served = _server(spec, spec)
        return ResolvedModel("http", spec, url, served)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir() if p.is_file()):
            raise ModelFormError(
                f"--model {spec!r}: the directory holds no weights ({', '.join(WEIGHT_SUFFIXES)})"
            )
        resolved = path.resolve()
        return ResolvedModel("hf", str(resolved), path=resolved)
    if path.exists():
        raise ModelFormError(f"--model {spec!r} is a file; give its directory")
    if re.fullmatch(r"[\w.-]+/[\w.-]+", spec):
        raise ModelFormError(
            f"cannot load the model {spec!r}: no such directory, and envgym loads no weights "
            f"from the network (a Hugging Face hub id? `huggingface-cli download {spec} "
            "--local-dir DIR`, then --model DIR)"
        )
    if "/" in spec or spec.startswith(("~", ".")):
        raise ModelFormError(f"cannot load the model {spec!r}: no such directory")
    raise ModelFormError(f"unknown --model {spec!r}; expected {FORMS}")


def _server(url_part: str, spec: str) -> tuple[str, str]:
    url, _, served = url_part.partition("#")
    if not url.startswith(("http://", "https://")):
        raise ModelFormError(f"--model {spec!r}: after 'vllm+' must come an http(s):// URL")
    host = url.split("://", 1)[1].split("/", 1)[0]
    if not host or any(c.isspace() for c in url):
        raise ModelFormError(f"--model {spec!r}: {url!r} is not a server URL")
    return url.rstrip("/"), served


def open_policy(model: ResolvedModel | str, **kwargs: Any) -> Policy:
    """The policy a (non-agent) model string names; ``kwargs`` go to its backend.

    ``tools_in_prompt=True`` (servers only) sends no native ``tools``: the env has put them in
    the system prompt (``BundleEnv(native_tools=False)``) and the reply is read as text."""
    ref = resolve_model(model) if isinstance(model, str) else model
    try:
        return _open(ref, kwargs)
    except ServerReplyError as err:  # what the server said about itself was unusable
        raise ModelFormError(str(err)) from None


def _open(ref: ResolvedModel, kwargs: dict[str, Any]) -> Policy:
    if ref.kind == "agent":
        raise ModelFormError(f"{ref.spec!r} is a scripted agent, not a language model")
    if ref.kind == "vllm":
        from envgym.models.served import served_model_name, served_tokenizer
        from envgym.models.vllm_policy import VLLMPolicy

        served = ref.served or served_model_name(ref.url)
        kwargs.pop("tools_in_prompt", None)  # envgym renders the prompt: ChatFormat decides
        kwargs.setdefault("tokenizer", served_tokenizer(ref.url, served))
        return VLLMPolicy(ref.url, served, **kwargs)
    if ref.kind == "http":
        from envgym.models.openai_http import OpenAIPolicy
        from envgym.models.served import served_model_name

        served = ref.served or served_model_name(ref.url, kwargs.get("api_key"))
        kwargs.setdefault("check_template", True)  # no command's tools silently dropped
        return OpenAIPolicy(ref.url, served, **kwargs)
    from envgym.models.local import LocalPolicy

    kwargs.pop("tools_in_prompt", None)
    return LocalPolicy.from_pretrained(ref.path or ref.spec, **kwargs)
