"""The errored share of a batch of episodes, made loud.

An errored episode is infrastructure failing (a sandbox that did not start, a policy backend
that went away), not the policy failing its task, so training and evaluation leave it out.
That is right for one episode and silently wrong for many: a trainer that drops most of a
batch trains on a biased rest, and the only sign used to be an ``errored`` count.  So past
:data:`WARN_SHARE` a run logs a warning naming the first cause, and past the configured
``max_errored_share`` it stops with :class:`TooManyErrored`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .episode import EpisodeResult

#: Above this share of errored episodes a run warns (a few percent is already a broken setup).
WARN_SHARE = 0.02
_CAUSE_CHARS = 300


class TooManyErrored(RuntimeError, ValueError):
    """More episodes errored than the run allows.  A ValueError too, so the command lines
    report it as a clear error instead of a traceback."""


@dataclass(frozen=True)
class ErroredShare:
    """How many of ``episodes`` errored, and the first error seen (kind: message)."""

    episodes: int = 0
    errored: int = 0
    first_cause: str = ""

    @property
    def share(self) -> float:
        return self.errored / self.episodes if self.episodes else 0.0

    def add(self, result: EpisodeResult) -> ErroredShare:
        """This tally with ``result`` counted."""
        if result.error is None:
            return ErroredShare(self.episodes + 1, self.errored, self.first_cause)
        cause = self.first_cause or _cause(result)
        return ErroredShare(self.episodes + 1, self.errored + 1, cause)

    def describe(self) -> str:
        text = f"{self.errored} of {self.episodes} episodes errored ({self.share:.0%})"
        return f"{text}; first cause: {self.first_cause}" if self.first_cause else text


def tally(results: list[EpisodeResult]) -> ErroredShare:
    share = ErroredShare()
    for result in results:
        share = share.add(result)
    return share


def _cause(result: EpisodeResult) -> str:
    message = " ".join(result.error_message.split())[:_CAUSE_CHARS]
    return f"{result.error}: {message}" if message else str(result.error)


def check_errored(
    share: ErroredShare, max_share: float | None, *, where: str, log: logging.Logger
) -> None:
    """Warn past :data:`WARN_SHARE`; raise :class:`TooManyErrored` past ``max_share``."""
    if not share.errored:
        return
    if max_share is not None and share.share > max_share:
        raise TooManyErrored(
            f"{where}: {share.describe()}, over the limit of {max_share:.0%} "
            "(errored episodes are infrastructure failures, left out of the results)"
        )
    if share.share > WARN_SHARE:
        log.warning("%s: %s; errored episodes are left out of the results", where, share.describe())
