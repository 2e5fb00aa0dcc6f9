"""Resilient JSON POSTs for model servers: timeouts, retries with backoff, client rate limits.

:class:`HttpClient.post_json` retries connect errors, timeouts, HTTP 429 and 5xx, and replies
the caller's ``check`` rejects (empty choices, truncated JSON...), with exponential backoff and
full jitter (``delay = uniform(0, min(max_backoff, base * 2**attempt))``), honouring a server's
``Retry-After``.  Other 4xx replies are the request's fault and fail at once.  After the last
try it raises :class:`envgym.policy.PolicyError` naming what went wrong, so the rollout engine
marks the episode errored instead of crashing or scoring it 0.

:class:`RateLimit` bounds requests per second (a token bucket) and requests in flight.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from envgym.context.window import ContextWindowExceeded
from envgym.policy import PolicyError

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# How servers refuse a prompt over the window.  Only the *prompt alone* reaching the window is
# the episode's outcome; a prompt that fits but leaves no room for max_tokens is a request error
# (the old behaviour), since the policy did not run out of window.  vLLM: "The decoder prompt
# (length P) is longer than the maximum model length of W" (prompt alone), or "maximum context
# length is W tokens. However, you requested T tokens (P in the messages, C in the completion)";
# OpenAI: "maximum context length is W tokens. However, your messages resulted in P tokens".
_PROMPT_OVER_MODEL_LENGTH = re.compile(
    r"prompt \(length \d+\) is longer than the maximum model length"
)
_WINDOW = re.compile(r"maximum context length is (\d+)")
_PROMPT_TOKENS = re.compile(r"(\d+) in the messages|messages resulted in (\d+)")


def prompt_over_window(text: str) -> bool:
    """Whether a server's refusal says the prompt by itself does not fit the model's window."""
    if _PROMPT_OVER_MODEL_LENGTH.search(text):
        return True
    window, prompt = _WINDOW.search(text), _PROMPT_TOKENS.search(text)
    if window is None or prompt is None:
        return False
    return int(prompt[1] or prompt[2]) >= int(window[1])


class BadReply(ValueError):
    """A 200 reply that cannot be used (retried like a server error)."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # tries in all (1 = no retry)
    base_delay: float = 0.5  # seconds
    max_delay: float = 20.0
    timeout: float = 120.0  # seconds per try (connect, read, write, pool)

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base_delay < 0 or self.max_delay < 0 or self.timeout <= 0:
            raise ValueError(f"invalid retry policy {self}")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * 2**attempt))


class RateLimit:
    """At most ``per_second`` request starts per second (bursts up to ``burst``) and at most
    ``concurrency`` requests in flight.  ``per_second=None`` means no rate cap."""

    def __init__(
        self, per_second: float | None = None, concurrency: int = 64, burst: int | None = None
    ) -> None:
        if per_second is not None and per_second <= 0:
            raise ValueError(f"per_second must be positive, not {per_second}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be ≥ 1, not {concurrency}")
        self.per_second = per_second
        self.capacity = float(burst if burst is not None else max(1, int(per_second or 1)))
        self._tokens = self.capacity
        self._stamp = time.monotonic()
        self._slots = asyncio.Semaphore(concurrency)
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> RateLimit:
        await self._slots.acquire()
        try:
            await self._take()
        except BaseException:
            self._slots.release()
            raise
        return self

    async def __aexit__(self, *_: object) -> None:
        self._slots.release()

    async def _take(self) -> None:
        if self.per_second is None:
            return
        async with self._lock:  # waiters queue in order instead of all polling the bucket
            while True:
                now = time.monotonic()
                self._tokens = min(
                    self.capacity, self._tokens + (now - self._stamp) * self.per_second
                )
                self._stamp = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                await asyncio.sleep((1.0 - self._tokens) / self.per_second)


class HttpClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        limit: RateLimit | None = None,
        seed: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.limit = limit or RateLimit()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(self.retry.timeout),
            transport=transport,
        )
        self._rng = random.Random(seed)

    async def post_json(self, path: str, body: dict[str, Any], check: Callable[[Any], Any]) -> Any:
        """POST ``body``; return ``check(decoded JSON)``.  ``check`` raises :class:`BadReply`
        for a reply worth retrying."""
        problems: list[str] = []
        for attempt in range(self.retry.attempts):
            wait: float | None = None
            try:
                async with self.limit:
                    response = await self._client.post(path, json=body)
                if response.status_code in RETRY_STATUS:
                    problems.append(f"HTTP {response.status_code}: {_snippet(response.text)}")
                    wait = _retry_after(response)
                elif response.status_code == 400 and prompt_over_window(response.text):
                    raise ContextWindowExceeded(  # an episode outcome, not a backend failure
                        f"{self._url(path)} refused the prompt as longer than the model's "
                        f"context window: {_snippet(response.text)}"
                    )
                elif response.status_code >= 400:
                    raise PolicyError(
                        f"{self._url(path)} rejected the request with HTTP {response.status_code}: "
                        f"{_snippet(response.text)}"
                    )
                else:
                    try:
                        data = json.loads(response.text)
                    except ValueError as err:
                        raise BadReply(
                            f"the reply is not valid JSON ({err}): {_snippet(response.text)}"
                        ) from err
                    return check(data)
            except BadReply as err:
                problems.append(str(err))
            except httpx.TimeoutException as err:
                problems.append(f"timed out after {self.retry.timeout:g} s ({type(err).__name__})")
            except httpx.TransportError as err:  # connect refused, reset, DNS...
                problems.append(f"{type(err).__name__}: {err or 'connection failed'}")
            if attempt + 1 < self.retry.attempts:
                delay = self.retry.backoff(attempt, self._rng)
                await asyncio.sleep(max(delay, min(wait or 0.0, self.retry.max_delay)))
        raise PolicyError(
            f"{self._url(path)} failed after {self.retry.attempts} tries: "
            + "; ".join(problems[-3:])
        )

    @property
    def base_url(self) -> str:
        """The base URL without a trailing slash (``http://host:port/v1``)."""
        return str(self._client.base_url).rstrip("/")

    def _url(self, path: str) -> str:
        return self.base_url + "/" + path.lstrip("/")

    async def get(self, path: str) -> httpx.Response:
        return await self._client.get(path)

    async def aclose(self) -> None:
        await self._client.aclose()


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
