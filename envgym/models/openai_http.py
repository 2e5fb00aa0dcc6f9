"""OpenAI-compatible chat completions over HTTP: vLLM's and llama.cpp's servers, hosted APIs.

Native tool calling: the tool schemas go in ``tools`` and the reply's ``tool_calls`` and
``reasoning_content`` come back in :attr:`Turn.message` (the env takes it as the action; a text
parser is not needed).  Token log-probs are requested (``logprobs: true``) and recorded when the
server returns them; token ids only when the server sends them (vLLM's ``return_token_ids``, via
``extra_body``).  The server renders the chat itself, so ``Turn.prompt_ids`` is None: for exact
training records use the local engine or the vLLM token-in backend (envgym.models.vllm_server).

Every bad outcome — server down, timeouts, HTTP 5xx/429, truncated JSON, a reply with no choices
or nothing in its message — is retried with backoff (envgym.models.http_client) and then raised
as :class:`PolicyError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from envgym.models.http_client import BadReply, HttpClient, RateLimit, RetryPolicy
from envgym.models.served import vllm_template_drops_tools
from envgym.parsers import ToolCallParser, available_parsers, format_message, get_parser
from envgym.policy import PolicyError, SamplingParams, Turn, Usage

FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
}


class OpenAIPolicy:
    """A chat-completions endpoint as an envgym :class:`Policy`.

    Args:
        base_url: up to and including ``/v1`` (``http://127.0.0.1:8000/v1``).
        model: the ``model`` field of requests.
        send_reasoning: send earlier turns' ``reasoning_content`` back (some APIs reject it).
        extra_body: more request fields (``{"top_k": 20}``, vLLM's ``return_token_ids``...).
        tools_in_prompt: True: the tools are in the system prompt as text (the env's
            ``native_tools=False``) — no ``tools`` are sent, earlier tool calls are written
            back as text in the parser's format, and the reply is returned as raw text for the
            env's parser.  None (default): True exactly when the first message is a system
            prompt holding a known parser's rendering of the turn's tools.
        check_template: before the first turn with tools, ask a vLLM server (once per server)
            whether its chat template drops tools (envgym.models.served); if it does, write the
            tools into the system prompt in ``parser``'s format and read replies as text, so
            no command's tools are silently lost.  On for every model opened through
            ``envgym.models.resolve.open_policy`` (``--model``); off for direct construction.
        parser: the tool-call format of that fallback (``"hermes"``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        limit: RateLimit | None = None,
        send_reasoning: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        version: int = 0,
        tools_in_prompt: bool | None = None,
        check_template: bool = False,
        parser: str = "hermes",
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.name = name or f"openai:{model}@{base_url.rstrip('/')}"
        self.version = version
        self.model = model
        self.send_reasoning = send_reasoning
        self.extra_body = dict(extra_body or {})
        self.client = HttpClient(base_url, api_key=api_key, retry=retry, limit=limit)
        self.tools_in_prompt = tools_in_prompt
        self.check_template = check_template
        self.fallback_parser = get_parser(parser)
        self._drops: bool | None = None  # the server's answer, once asked

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        parser = self._prompt_parser(messages, tools)
        if parser is None and tools and self.tools_in_prompt is None and self.check_template:
            if self._drops is None:
                self._drops = await asyncio.to_thread(
                    vllm_template_drops_tools, self.client.base_url, self.model
                )
            if self._drops:
                parser = self.fallback_parser
                messages = with_tools_in_system(messages, parser.render_tools(tools))
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [self._outgoing(m, parser) for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "logprobs": True,
        }
        if tools and parser is None:
            body["tools"] = list(tools)
        if params.top_k:
            body["top_k"] = params.top_k  # not OpenAI's; vLLM and llama.cpp read it
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        body.update(self.extra_body)
        turn = await self.client.post_json("/chat/completions", body, _read_chat)
        if parser is not None and turn.message is not None:
            # the model wrote its calls as text: the env's parser reads them (whatever the server
            # split off as reasoning or calls is written back in the parser's format)
            turn = replace(turn, text=format_message(parser, turn.message), message=None)
        return turn

    def _prompt_parser(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ToolCallParser | None:
        """The parser whose tool text the system prompt holds (tools-in-prompt mode), or None
        when the tools go natively."""
        if self.tools_in_prompt is False or not tools:
            return None
        first = messages[0] if messages else {}
        system = first.get("content") if first.get("role") == "system" else None
        for name in available_parsers():
            parser = get_parser(name)
            if isinstance(system, str) and parser.render_tools(tools) in system:
                return parser
        if self.tools_in_prompt:
            raise PolicyError(
                "tools_in_prompt is set but the system prompt does not describe the tools "
                "(build the env with native_tools=False)"
            )
        return None

    def _outgoing(
        self, message: Mapping[str, Any], parser: ToolCallParser | None = None
    ) -> dict[str, Any]:
        out = dict(message)
        if parser is not None and out.get("role") == "assistant":
            # no native tools were declared, so no native tool calls may be sent back either
            out["content"] = format_message(parser, out)
            out.pop("tool_calls", None)
            out.pop("reasoning_content", None)
        if not self.send_reasoning:
            out.pop("reasoning_content", None)
        return out

    async def end_session(self, session: str) -> None:
        """Stateless: the server keeps no per-episode state (its prefix cache is its own)."""

    async def aclose(self) -> None:
        await self.client.aclose()


def with_tools_in_system(messages: list[dict[str, Any]], section: str) -> list[dict[str, Any]]:
    """``messages`` with ``section`` (the tools as text) at the end of the system prompt, or as
    a system prompt of its own when there is none."""
    first = messages[0] if messages else {}
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        return [{**first, "content": f"{first['content']}\n\n{section}"}, *messages[1:]]
    return [{"role": "system", "content": section}, *messages]


def _read_chat(data: Any) -> Turn:
    if not isinstance(data, dict):
        raise BadReply(f"the reply is not a JSON object but {type(data).__name__}")
    if "error" in data and not data.get("choices"):
        raise BadReply(f"the server answered with an error: {str(data['error'])[:200]}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadReply("the reply has no choices")
    choice = choices[0]
    raw = choice.get("message")
    if not isinstance(raw, dict):
        raise BadReply("the reply's choice has no message")
    content = raw.get("content") if isinstance(raw.get("content"), str) else None
    reasoning = raw.get("reasoning_content") or raw.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
    calls = (
        raw.get("tool_calls")
        if isinstance(raw.get("tool_calls"), list) and raw["tool_calls"]
        else None
    )
    if not content and not calls and not reasoning:
        raise BadReply("the reply's message has no content, reasoning or tool calls")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    logprobs = _logprobs(choice.get("logprobs"))
    token_ids = choice.get("token_ids")
    token_ids = [int(t) for t in token_ids] if isinstance(token_ids, list) else []
    return Turn(
        text=content or "",
        message=message,
        prompt_ids=None,
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=FINISH.get(str(choice.get("finish_reason")), "stop"),
        usage=_usage(data.get("usage")),
    )


def _logprobs(block: Any) -> list[float]:
    if not isinstance(block, dict) or not isinstance(block.get("content"), list):
        return []
    return [
        float(item["logprob"])
        for item in block["content"]
        if isinstance(item, dict) and "logprob" in item
    ]


def _usage(block: Any) -> Usage:
    if not isinstance(block, dict):
        return Usage()
    details = block.get("prompt_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
    return Usage(
        int(block.get("prompt_tokens") or 0),
        int(block.get("completion_tokens") or 0),
        int(cached or 0),
    )
