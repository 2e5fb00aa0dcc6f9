"""Evaluation: pass@k / pass^k with confidence intervals over a bundle's tasks, resumable.

* estimators.py — pass@k (Chen et al. 2021), pass^k (τ-bench), Wilson (clustered by task);
* summary.py — per-task and across-task numbers from episodes;
* paired.py — two evals compared task by task (``envgym compare``);
* models.py — ``--model`` names → policies and fingerprints;
* config.py — what an evaluation is asked to do, and the part of it that keys stored results;
* runner.py — the resumable run, keyed by content hashes, stored episode by episode;
* served.py — a served model's identity (what ``/models`` lists for it), for the key;
* budgets.py — per-task episode budgets from each task's gold solution length;
* watch.py — turn-by-turn progress inside the running episodes.
"""

from .config import EvalConfig, EvalError
from .estimators import (
    bootstrap_interval,
    clustered_wilson,
    pass_at_k,
    pass_hat_k,
    report_ks,
    wilson_interval,
)
from .models import (
    ModelRef,
    ModelSpecError,
    load_language_model,
    load_policy,
    model_decoder,
    model_ref,
    model_tokenizer,
    model_window,
)
from .runner import (
    EvalRun,
    env_factory,
    evaluate,
    evaluation_key,
    offered_tools,
    open_bundle,
    run_evaluation,
)
from .summary import EvalSummary, Interval, TaskSummary, across_tasks, summarize

__all__ = [
    "EvalConfig",
    "EvalError",
    "EvalRun",
    "EvalSummary",
    "Interval",
    "ModelRef",
    "ModelSpecError",
    "TaskSummary",
    "across_tasks",
    "bootstrap_interval",
    "clustered_wilson",
    "env_factory",
    "evaluate",
    "evaluation_key",
    "load_language_model",
    "load_policy",
    "model_decoder",
    "model_ref",
    "model_tokenizer",
    "model_window",
    "offered_tools",
    "open_bundle",
    "pass_at_k",
    "pass_hat_k",
    "report_ks",
    "run_evaluation",
    "summarize",
    "wilson_interval",
]
