"""Rendering chats to token ids with the model's own chat template, for text-in/text-out models.

:class:`ChatFormat` renders OpenAI-shaped messages + tool schemas with the tokenizer's chat
template.  What the template cannot show is written as text the model reads and writes:

* tools: when the template has no tool support (SmolLM2's has none) they go into the system
  prompt as the tool-call parser describes them (``parser.render_tools``, the seed's Appendix B
  Tables 7-8 layout), unless the system prompt already holds that text (``BundleEnv`` with
  ``native_tools=False`` puts it there itself);
* assistant tool calls and reasoning: written back in the parser's format
  (``<think>…</think>`` + content + ``<tool_call>…</tool_call>`` blocks for Hermes).

:meth:`ChatFormat.continuation` renders only what follows an assistant turn (token-in/token-out
across turns, envgym.policy): the full conversation is rendered, checked to start with the
rendering up to and including that assistant turn, and only the suffix is tokenized.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envgym.parsers import ToolCallParser, format_message, get_parser
from envgym.parsers._common import THINK_OPEN
from envgym.tokens import HFTokenCounter, Messages, Tools

# The text a parser's call block ends with: a turn may stop right after it (see ChatFormat).
CALL_CLOSE = {
    "hermes": "</tool_call>",
    "deepseek-v3": "<\uff5ctool\u2581calls\u2581end\uff5c>",
    "deepseek-v3.1": "<\uff5ctool\u2581calls\u2581end\uff5c>",
}
_PROBE = "envgymprobeassistantcontent"


class ChatFormat:
    """How one tokenizer turns conversations into ids, and where assistant turns end.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        parser: the tool-call format the model writes (``"hermes"`` by default).
        thinking: start every assistant turn with ``<think>\\n`` in the prompt (as reasoning
            models' templates do), so the model reasons first; the env's parser then sees the
            reasoning because :class:`Turn` text is given with that prefix.
    """

    def __init__(
        self, tokenizer: Any, parser: str | ToolCallParser = "hermes", *, thinking: bool = False
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; give a chat model's tokenizer")
        self.tokenizer = tokenizer
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        self.support = HFTokenCounter(tokenizer).support
        self.generation_prefix = THINK_OPEN + "\n" if thinking else ""
        self.closing = self._closing()
        self.call_close = CALL_CLOSE.get(self.parser.name)

    # -- rendering ---------------------------------------------------------------------
    def render(self, messages: Messages, tools: Tools, *, generation: bool) -> str:
        prepared = self.prepare(messages, tools)
        native = bool(tools) and self.support.tools and not self.tools_in_system(messages, tools)
        text = self.tokenizer.apply_chat_template(
            prepared,
            tools=[dict(t) for t in tools] if native else None,
            tokenize=False,
            add_generation_prompt=generation,
        )
        if not isinstance(text, str):
            raise TypeError("apply_chat_template(tokenize=False) did not return text")
        return text + self.generation_prefix if generation else text

    def encode(self, text: str) -> list[int]:
        # Special tokens are spelled out in the rendered text; nothing may be added around it.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: Messages, tools: Tools) -> list[int]:
        return self.encode(self.render(messages, tools, generation=True))

    def continuation(self, messages: Messages, tools: Tools, assistant_index: int) -> str | None:
        """The prompt text after the assistant turn ``messages[assistant_index]`` and its
        :attr:`closing`, or None when the template does not render the conversation as an
        extension of that prefix (then the caller renders the whole prompt afresh)."""
        head = self.render(messages[: assistant_index + 1], tools, generation=False)
        full = self.render(messages, tools, generation=True)
        if not full.startswith(head) or not head.endswith(self.closing):
            return None
        return full[len(head) :]

    def tools_in_system(self, messages: Messages, tools: Tools) -> bool:
        """Whether the system prompt already describes ``tools`` in the parser's format (the env
        put them there: ``BundleEnv(native_tools=False)``); then the template is not passed
        them again, so a template with tool support does not show them twice."""
        first = messages[0] if messages else None
        content = first.get("content") if isinstance(first, Mapping) else None
        return (
            bool(tools)
            and first is not None
            and first.get("role") == "system"
            and isinstance(content, str)
            and self.parser.render_tools(tools) in content
        )

    def prepare(self, messages: Messages, tools: Tools) -> list[dict[str, Any]]:
        out = [self._message(m) for m in messages]
        if tools and not self.support.tools:
            section = self.parser.render_tools(tools)
            if out and out[0]["role"] == "system":
                if section not in out[0]["content"]:
                    out[0]["content"] = f"{out[0]['content']}\n\n{section}"
            else:
                out.insert(0, {"role": "system", "content": section})
        return out

    def _message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"a message must be an object with a 'role', not {message!r:.120}")
        out = dict(message)
        content = out.get("content")
        out["content"] = content if isinstance(content, str) else _text(content)
        if out["role"] == "assistant":
            calls_shown = self.support.tool_calls
            reasoning_shown = self.support.reasoning
            if (out.get("tool_calls") and not calls_shown) or (
                out.get("reasoning_content") and not reasoning_shown
            ):
                shown = {
                    "content": out["content"],
                    "reasoning_content": None if reasoning_shown else out.get("reasoning_content"),
                    "tool_calls": None if calls_shown else out.get("tool_calls"),
                }
                out["content"] = format_message(self.parser, shown)
                if not calls_shown:
                    out.pop("tool_calls", None)
                if not reasoning_shown:
                    out.pop("reasoning_content", None)
        return out

    def _closing(self) -> str:
        """What the template writes after an assistant turn's content (``<|im_end|>\\n``)."""
        probe = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
        text = self.tokenizer.apply_chat_template(
            probe, tokenize=False, add_generation_prompt=False
        )
        if _PROBE not in text:
            raise ValueError("the chat template does not render assistant content")
        return text.split(_PROBE, 1)[1]


def _text(value: Any) -> str:
    if value is None:
        return ""  # many templates concatenate content and fail on None
    if isinstance(value, list) and all(
        isinstance(p, Mapping) and p.get("type") == "text" for p in value
    ):
        return "".join(str(p.get("text", "")) for p in value)
    return json.dumps(value, ensure_ascii=False, default=str)


def end_tokens(tokenizer: Any, generation_config: Any = None) -> frozenset[int]:
    """The ids that end an assistant turn: the tokenizer's and the generation config's EOS."""
    ids: set[int] = set()
    for source in (generation_config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the model and tokenizer define no end-of-sequence token")
    return frozenset(ids)
