"""Which vLLM tool-call parser a model needs (``envgym serve``, docs/MODELS.md).

vLLM answers chat completions that carry ``tools`` only when started with
``--enable-auto-tool-choice --tool-call-parser NAME`` (else every such request is HTTP 400), and
``NAME`` must match the format the model writes its calls in.  The format shows in the chat
template (its call markers) more reliably than in ``config.json``: SmolLM2 is a ``llama``
model but writes ChatML, the Hermes/Qwen layout.  So the template's markers are read first,
then the model family; a model matching neither must be named with ``--tool-call-parser``.
"""

from __future__ import annotations

import json
from pathlib import Path

# Call markers in a chat template → vLLM parser (checked in this order: the most specific
# marker first, since a template may also contain ChatML's generic ``<|im_start|>``).
TEMPLATE_MARKERS: tuple[tuple[str, str], ...] = (
    ("<|python_tag|>", "llama3_json"),  # Llama 3.1+ JSON tool calls
    ("[TOOL_CALLS]", "mistral"),
    ("<\uff5ctool\u2581calls\u2581begin\uff5c>", "deepseek_v3"),
    ("<tool_call>", "hermes"),  # Hermes 2/3, Qwen 2.5/3
    ("<|im_start|>", "hermes"),  # ChatML without tool markup (SmolLM2): Hermes is its layout
)
# config.json ``model_type`` → vLLM parser, for templates without a known marker.
FAMILY_PARSERS: dict[str, str] = {
    "qwen2": "hermes",
    "qwen2_moe": "hermes",
    "qwen3": "hermes",
    "qwen3_moe": "hermes",
    "smollm3": "hermes",
    "mistral": "mistral",
    "mixtral": "mistral",
    "deepseek_v3": "deepseek_v3",
    "granite": "granite",
    "internlm2": "internlm",
}
MAX_FILE = 8 << 20  # bytes of config.json / tokenizer_config.json read


class ParserChoiceError(ValueError):
    """No parser could be chosen for a model (the message says what to pass)."""


def chat_template(folder: Path) -> str:
    """The folder's chat template: ``chat_template.jinja`` or ``tokenizer_config.json``'s."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file() and not jinja.is_symlink():
        return _read(jinja)
    config = _json(folder / "tokenizer_config.json")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else ""


def choose_parser(folder: Path, override: str | None = None) -> tuple[str, str]:
    """(vLLM tool-call parser, why) for the model in ``folder``."""
    if override:
        return override, "--tool-call-parser"
    template = chat_template(folder)
    for marker, parser in TEMPLATE_MARKERS:
        if marker in template:
            return parser, f"its chat template uses {marker!r}"
    family = _json(folder / "config.json").get("model_type")
    if isinstance(family, str) and family in FAMILY_PARSERS:
        return FAMILY_PARSERS[family], f"model_type {family!r}"
    raise ParserChoiceError(
        f"cannot tell which tool-call parser the model in {folder} needs (no known call markers "
        f"in its chat template, model_type {family!r}); pass --tool-call-parser NAME "
        "(vLLM's names: hermes, llama3_json, mistral, deepseek_v3, ...)"
    )


def _read(path: Path) -> str:
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise ParserChoiceError(f"{path} is larger than {MAX_FILE} bytes")
    return data.decode("utf-8", errors="replace")


def _json(path: Path) -> dict[str, object]:
    if not path.is_file() or path.is_symlink():
        return {}
    try:
        data = json.loads(_read(path))
    except ValueError as err:
        raise ParserChoiceError(f"{path} is not JSON ({err})") from None
    return data if isinstance(data, dict) else {}
