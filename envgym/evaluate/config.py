"""What an evaluation is asked to do (:class:`EvalConfig`), the part of it that keys stored
results, and the errors that stop one before it starts."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from envgym.context import OVERFLOW_STRATEGIES
from envgym.policy import SamplingParams
from envgym.rollout import RolloutBudget

from .budgets import DerivedBudget

EVAL_OVERFLOW = tuple(name for name in OVERFLOW_STRATEGIES if name != "summary")
#: Errors dominate an evaluation when more than this share of its episodes errored: its numbers
#: then describe the infrastructure more than the model, and ``envgym eval`` exits non-zero.
ERRORS_DOMINATE = 0.5


class EvalError(RuntimeError):
    """An evaluation that cannot start (bad target, bad config)."""


@dataclass(frozen=True)
class EvalConfig:
    k: int = 1
    samples: int | None = None  # n per task (≥ k); default k
    limit: int | None = None  # the first N tasks
    params: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=512)
    )
    # per task from its gold solution's length (budgets.py), or one fixed budget for all tasks
    budget: RolloutBudget | DerivedBudget = field(default_factory=DerivedBudget)
    concurrency: int = 8  # the local engine batches across episodes: bs8 ≈ 4× bs1 tokens/s
    sandbox: str = "bwrap"
    context: str = "thinking-retention"  # the reasoning policy (envgym.context.policies)
    # Compaction past 80 % of the model's window (DeepSeek-V3.2 §4.4: discard-all scales best
    # for its cost); None: no compaction, a prompt past the window only truncates the episode.
    overflow: str | None = "discard-all"
    context_window: int | None = None  # the model's window in tokens; None: ask the model
    parser: str = "hermes"
    native_tools: bool = True
    seed: int = 0
    retry_errors: bool = False
    # reuse stored results of a server whose identity cannot be read (the caller vouches that
    # it serves the model they came from); not part of the key
    same_model: bool = False
    ray: str | None = None  # env workers as Ray actors: "local" (ray.init()) or a cluster address
    # score tasks a do-nothing agent passes (task metadata noop_solvable) too: τ²'s official numbers
    include_noop_tasks: bool = False
    # Stop when more than this share of the episodes errored (infrastructure failures, left out
    # of the estimators); None: never stop, but past 2 % the run warns with the first cause.
    max_errored_share: float | None = None

    def __post_init__(self) -> None:
        if self.k < 1:
            raise EvalError(f"k must be ≥ 1, not {self.k}")
        if self.n < self.k:
            raise EvalError(f"samples per task ({self.n}) must be ≥ k ({self.k})")
        if self.limit is not None and self.limit < 1:
            raise EvalError(f"--limit must be ≥ 1, not {self.limit}")
        if self.concurrency < 1:
            raise EvalError(f"concurrency must be ≥ 1, not {self.concurrency}")
        if self.overflow is not None and self.overflow not in EVAL_OVERFLOW:
            raise EvalError(
                f"unknown overflow strategy {self.overflow!r}; known: {', '.join(EVAL_OVERFLOW)}"
                " or none ('summary' needs a summarizer model, which eval does not have)"
            )
        if self.max_errored_share is not None and not 0.0 <= self.max_errored_share <= 1.0:
            raise EvalError(f"max errored share must be in [0, 1], not {self.max_errored_share}")
        if self.context_window is not None and self.context_window < 2:
            raise EvalError(f"the context window must be ≥ 2 tokens, not {self.context_window}")

    @property
    def n(self) -> int:
        return self.samples if self.samples is not None else self.k

    def result_config(self) -> dict[str, object]:
        """The part of the config that changes results (hashed into the evaluation key)."""
        config: dict[str, object] = {
            "params": asdict(self.params),
            "budget": (
                self.budget.key() if isinstance(self.budget, DerivedBudget) else asdict(self.budget)
            ),
            "context": self.context,
            "parser": self.parser,
            "native_tools": self.native_tools,
            "seed": self.seed,
        }
        if self.context_window is not None:  # without a window the strategy never runs
            config["context_window"] = self.context_window
            config["overflow"] = self.overflow
        return config

    def config_hash(self, env: str | None = None) -> str:
        """Hash of :meth:`result_config`, plus ``env`` (:func:`registry.env_identity`) when given."""
        return sha(json.dumps(self.keyed_config(env), sort_keys=True))

    def keyed_config(self, env: str | None) -> dict[str, object]:
        config = self.result_config()
        if env is not None:
            config["env"] = env
        return config


def sha(text: str) -> str:
    """A content hash as stored results are keyed by (``sha256:`` + hex)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
