"""Builds an :class:`~envgym.record.EpisodeRecord` from the policy's turns, one turn at a time.

Token-in/token-out (envgym.policy): when the previous segment's ids are a prefix of the new
turn's ``prompt_ids``, only the new context tokens (tool results, user turns) are appended as
context, then the sampled tokens; otherwise (the context policy dropped or compacted
something, DeepSeek-V3.2 §3.2.1/§4.4) a new segment starts with the whole prompt.

What each turn contributes (record version 2, envgym.record): a
:class:`~envgym.models.turn.RecordedTurn` (local engine, vLLM token-in backend) brings both
log-prob kinds or says which one it has, its kept sets (or ``None``: *unknown*), its sampling
parameters and policy version, and for MoE models the routes of every position its forward
passes saw.  A plain :class:`~envgym.policy.Turn` counts as sampled-distribution log-probs with
unknown parameters, unless :meth:`RecordBuilder.add` is told the parameters and version.
"""

from __future__ import annotations

from envgym.models.turn import RecordedTurn
from envgym.policy import SamplingParams, Turn
from envgym.record import EpisodeRecord, Segment, TurnInfo


class RecordError(ValueError):
    """A turn whose per-token data disagree with each other (a backend bug)."""


class RecordBuilder:
    def __init__(self, *, model: str, policy_version: int) -> None:
        self.record = EpisodeRecord(model=model, policy_version=policy_version)
        self.untracked_turns = 0  # turns without token ids (e.g. an HTTP server without them)

    def add(
        self,
        turn: Turn,
        *,
        params: SamplingParams | None = None,
        policy_version: int | None = None,
    ) -> None:
        """Record one turn.  ``params``/``policy_version``: what the caller asked for, used
        when the turn itself does not say (a plain Turn)."""
        if turn.prompt_ids is None:
            self.untracked_turns += 1
            return
        recorded = turn if isinstance(turn, RecordedTurn) else None
        if recorded is not None:
            params = recorded.params or params
            if recorded.policy_version is not None:
                policy_version = recorded.policy_version
        info = TurnInfo(
            temperature=params.temperature if params else None,
            top_p=params.top_p if params else None,
            top_k=params.top_k if params else None,
            policy_version=policy_version,
            finish_reason=turn.finish_reason,
            logprob_kind=recorded.logprob_kind if recorded else TurnInfo.logprob_kind,
        )
        prompt = list(turn.prompt_ids)
        routes = recorded.position_routes if recorded else None
        if routes is not None and len(routes) != len(prompt) + len(turn.token_ids) - 1:
            raise RecordError(
                f"turn with {len(prompt)} prompt and {len(turn.token_ids)} sampled ids has routes "
                f"for {len(routes)} positions (expected prompt + sampled - 1)"
            )
        segments = self.record.segments
        last = segments[-1] if segments else None
        if last is not None and _is_prefix(last.token_ids, prompt):
            segment = last
            segment.add_context(prompt[len(last.token_ids) :])
        else:
            segment = Segment()
            segments.append(segment)
            segment.add_context(prompt)
        try:
            segment.add_sampled(
                list(turn.token_ids),
                list(turn.logprobs),
                full_logprobs=recorded.full_logprobs if recorded else None,
                kept=turn.kept,
                info=info,
            )
            if routes is not None:
                segment.fill_routes(routes)
        except ValueError as exc:
            raise RecordError(
                f"turn with {len(turn.token_ids)} sampled ids and {len(turn.logprobs)} log-probs: {exc}"
            ) from None

    def finish(self, reward: float, components: dict[str, float]) -> EpisodeRecord:
        self.record.reward = reward
        self.record.reward_components = dict(components)
        return self.record


def _is_prefix(prefix: list[int], seq: list[int]) -> bool:
    return len(prefix) <= len(seq) and seq[: len(prefix)] == prefix
