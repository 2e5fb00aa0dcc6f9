"""Does the model see the tool schemas?  Checked once per model before an evaluation.

A chat template that has no tool support renders the same prompt whether or not ``tools`` are
passed (SmolLM2's does).  Locally envgym notices that itself (``ChatFormat`` writes the tools
into the system prompt).  A server renders its prompt out of sight, so it is asked: vLLM's
``/tokenize`` renders a chat through the served template, once with the probe tools and once
without; equal token ids mean the template dropped the tools.

The decision (docs/MODELS.md, "Which tools the model sees"): when the server's template drops
them, envgym **falls back** to writing the tools into the system prompt in the tool-call
parser's format (``BundleEnv(native_tools=False)``; the server gets no ``tools`` and its reply
is read as text), rather than refusing: that is exactly what the local engine does with the
same template, so a local and a served run of one model see the same prompt.  The fallback is
printed and recorded (``view``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envgym.models.resolve import ResolvedModel
from envgym.models.served import server_drops_tools

# What the model saw: the template rendered the schemas it was passed (native), envgym wrote
# them into the system prompt as text (prompt), or the server was not asked and it is unknown.
NATIVE, PROMPT, UNVERIFIED = "native", "prompt", "native-unverified"


@dataclass(frozen=True)
class ToolsDecision:
    """``native_tools``: what the env is built with; ``view``: what the model sees
    (:data:`NATIVE`, :data:`PROMPT` or :data:`UNVERIFIED`); ``reason``: one line for people."""

    native_tools: bool
    view: str
    reason: str


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether a local chat template renders the tool schemas it is passed."""
    from envgym.tokens import HFTokenCounter

    return bool(HFTokenCounter(tokenizer).support.tools)


def decide_tools(
    model: ResolvedModel, *, tools_in_prompt: bool, parser: str = "hermes", tokenizer: Any = None
) -> ToolsDecision:
    """How the tools reach ``model``.  ``tools_in_prompt``: the user asked for the system
    prompt (``--tools-in-prompt``).  ``tokenizer``: the local template to check (loaded from
    the model when None; unused for servers and agents)."""
    in_prompt = f"in the system prompt ({parser} format)"
    if model.kind == "agent":
        return ToolsDecision(True, NATIVE, "a scripted agent reads the tool list as data")
    if tools_in_prompt:
        return ToolsDecision(False, PROMPT, f"tools {in_prompt}: --tools-in-prompt")
    if model.kind == "http":
        served = model.served
        if not served:
            from envgym.models.served import served_model_name

            served = served_model_name(model.url)
        drops = server_drops_tools(model.url, served)
        if drops is None:
            return ToolsDecision(
                True,
                UNVERIFIED,
                f"tools sent natively; not verified: {model.url} has no /tokenize to show whether "
                "its chat template renders them (--tools-in-prompt writes them into the prompt)",
            )
        if drops:
            return ToolsDecision(
                False,
                PROMPT,
                f"the chat template of {served!r} drops tool schemas (its /tokenize gives the same "
                f"tokens with and without tools): tools {in_prompt} instead",
            )
        return ToolsDecision(True, NATIVE, f"tools rendered by the chat template of {served!r}")
    if tokenizer is None:
        tokenizer = local_tokenizer(model)
    if template_renders_tools(tokenizer):
        return ToolsDecision(True, NATIVE, "tools rendered by the model's chat template")
    return ToolsDecision(
        True, PROMPT, f"the chat template has no tool support: envgym writes the tools {in_prompt}"
    )


def local_tokenizer(model: ResolvedModel) -> Any:
    """The tokenizer envgym renders prompts with for a local or token-in model."""
    if model.kind == "embedded":
        from envgym.embedded import hf_dir

        folder = str(hf_dir())
    elif model.kind == "vllm":
        from envgym.models.served import served_model_name, served_tokenizer

        return served_tokenizer(model.url, model.served or served_model_name(model.url))
    else:
        folder = str(model.path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)
