"""What a model server says about itself: its bounded JSON replies, the model it serves, and —
for vLLM's token-in backend — that model's tokenizer.

Replies are server input: read in chunks up to :data:`MAX_REPLY` bytes and refused past it, so
a hostile or broken server cannot make envgym buffer without bound.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

MAX_REPLY = 4 << 20  # bytes: a model list or a probe's token ids are far smaller
MAX_NAME = 2048  # characters of a served model's name or root kept


class ServerReplyError(ValueError):
    """A server reply that could not be used (status, size or JSON); the message says which."""


def get_json(
    url: str, *, body: Any = None, timeout: float = 10.0, api_key: str | None = None
) -> Any:
    """GET ``url`` (POST ``body`` as JSON when given) and decode a JSON reply of at most
    :data:`MAX_REPLY` bytes.  :class:`ServerReplyError` carries the HTTP status (``.status``)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    method = "GET" if body is None else "POST"
    try:
        with (
            httpx.Client(timeout=timeout, headers=headers) as client,
            client.stream(method, url, json=body) as reply,
        ):
            data = bytearray()
            for chunk in reply.iter_bytes():
                data += chunk
                if len(data) > MAX_REPLY:
                    raise _error(f"{url} sent more than {MAX_REPLY} bytes", reply.status_code)
            if reply.status_code != 200:
                snippet = bytes(data[:200]).decode(errors="replace")
                raise _error(
                    f"{url} answered HTTP {reply.status_code}: {snippet}", reply.status_code
                )
    except httpx.HTTPError as err:
        raise _error(f"{url} could not be reached ({type(err).__name__}: {err})", None) from None
    try:
        return json.loads(bytes(data))
    except ValueError as err:
        raise _error(f"{url} sent a reply that is not JSON ({err})", 200) from None


def _error(message: str, status: int | None) -> ServerReplyError:
    exc = ServerReplyError(message)
    exc.status = status  # type: ignore[attr-defined]
    return exc


def model_entries(url: str, api_key: str | None = None) -> list[dict[str, Any]]:
    """The ``data`` list of ``GET {url}/models`` (entries that are objects)."""
    try:
        data = get_json(f"{url.rstrip('/')}/models", api_key=api_key)
    except ServerReplyError as err:
        raise ServerReplyError(
            f"cannot learn which model {url} serves (cannot list the models: {err}); name it "
            "as URL#model, e.g. http://127.0.0.1:8000/v1#smollm2"
        ) from None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ServerReplyError(f"{url}/models has no 'data' list: is this an OpenAI-style server?")
    return [e for e in entries if isinstance(e, dict)]


def served_model_name(url: str, api_key: str | None = None) -> str:
    """The first model a server lists at ``/models`` (for a URL given without ``#model``)."""
    for entry in model_entries(url, api_key):
        if isinstance(entry.get("id"), str) and entry["id"]:
            return str(entry["id"])[:MAX_NAME]
    raise ServerReplyError(
        f"{url}/models lists no model; name it as URL#model, e.g. http://127.0.0.1:8000/v1#smollm2"
    )


def served_tokenizer(url: str, served: str) -> Any:
    """The tokenizer of the model ``served`` at ``url``, for token-id prompts.

    vLLM lists each model's ``root`` (the folder or hub id it was started with); envgym loads
    the tokenizer from that folder when it exists on this machine.  The embedded model's folder
    is found the same way, since ``envgym serve smollm2`` serves it from there."""
    entry = next((e for e in model_entries(url) if e.get("id") == served), None)
    if entry is None:
        raise ServerReplyError(f"{url} does not serve a model named {served!r}")
    root = entry.get("root")
    folder = Path(root) if isinstance(root, str) and 0 < len(root) <= MAX_NAME else None
    if folder is None or not (folder / "tokenizer_config.json").is_file():
        raise ServerReplyError(
            f"vllm+ (token-in) needs the served model's tokenizer on this machine: {url} serves "
            f"{served!r} from {root!r}, which is not a local model folder; use the http(s):// "
            "form instead (the server renders the prompt)"
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


# -- does the served chat template render tools? (envgym.models.tool_support) ----------

_NO_TOKENIZE = (404, 405, 501)  # a server without /tokenize: a stable "cannot tell"

_PROBE_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Hangzhou?"},
]
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "envgym_probe_weather",
            "description": "Look up the weather in a city (envgym tool-rendering probe).",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "the city"}},
                "required": ["city"],
            },
        },
    }
]


_checked: dict[tuple[str, str], bool | None] = {}
_lock = threading.Lock()


def server_drops_tools(url: str, served: str, *, timeout: float = 10.0) -> bool | None:
    """True when the server's chat template renders the same tokens with and without tools,
    False when the tools change the prompt, None when the server has no ``/tokenize`` (not
    vLLM).  Asked once per (server, model) in a process; a failing server raises
    :class:`ServerReplyError`."""
    key = (url.rstrip("/"), served)
    with _lock:
        if key in _checked:
            return _checked[key]
    root = key[0].removesuffix("/v1")

    def tokens(tools: list[dict[str, Any]] | None) -> list[int]:
        body: dict[str, Any] = {
            "model": served,
            "messages": _PROBE_MESSAGES,
            "add_generation_prompt": True,
        }
        if tools:
            body["tools"] = tools
        data = get_json(f"{root}/tokenize", body=body, timeout=timeout)
        ids = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ServerReplyError(f"{root}/tokenize sent no 'tokens' list of ints")
        return ids

    try:
        without = tokens(None)
    except ServerReplyError as err:
        if getattr(err, "status", None) not in _NO_TOKENIZE:
            raise
        result: bool | None = None
    else:
        result = tokens(_PROBE_TOOLS) == without
    with _lock:
        _checked[key] = result
    return result


def forget_checks() -> None:
    """Forget every server's answer (a test restarts its server on another template)."""
    with _lock:
        _checked.clear()


def vllm_template_drops_tools(url: str, served: str) -> bool:
    """True when ``url`` is a vLLM server (its ``/models`` entries are ``owned_by: vllm``) whose
    chat template drops tools.  Anything else — another kind of server, one that cannot be
    asked — is False: only vLLM is known to answer ``/tokenize``, and other servers must not be
    sent requests they do not expect."""
    try:
        if not any(e.get("owned_by") == "vllm" for e in model_entries(url)):
            return False
        return server_drops_tools(url, served) is True
    except ServerReplyError:
        return False
