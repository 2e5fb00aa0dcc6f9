"""Which tasks train and which are held out (``envs`` and ``heldout`` of the config).

The split is a pure function of the config: ``heldout.fraction`` of each env's tasks chosen by
``heldout.seed`` plus the explicit ``heldout.tasks``; the rest train, in the seeded order of
:class:`envgym.trainer.checkpoint.TaskOrder`.  Held-out tasks are evaluated on, never trained on.
"""

from __future__ import annotations

import numpy as np

from envgym.trainer.config import TrainConfig

TaskRef = tuple[int, str]  # (index into config.envs, task id)


def task_split(config: TrainConfig) -> tuple[list[TaskRef], list[TaskRef]]:
    """``(train, held_out)`` task refs; ValueError naming the config key on unknown tasks."""
    from envgym.evaluate.config import EvalError
    from envgym.evaluate.runner import open_bundle

    train: list[TaskRef] = []
    held: list[TaskRef] = []
    explicit = set(config.heldout.tasks)
    seen: set[str] = set()
    for i, env in enumerate(config.envs):
        try:
            ids = [t.id for t in open_bundle(env.id).tasks]
        except EvalError as err:
            raise ValueError(f"envs[{i}].id: {err}") from None
        if env.tasks is not None:
            missing = sorted(set(env.tasks) - set(ids))
            if missing:
                raise ValueError(f"envs[{i}].tasks: no such tasks in {env.id!r}: {missing}")
            ids = [t for t in ids if t in set(env.tasks)]
        n_held = round(config.heldout.fraction * len(ids))
        rng = np.random.default_rng([config.heldout.seed, i])
        chosen = {ids[j] for j in rng.permutation(len(ids))[:n_held].tolist()}
        for t in ids:
            names = {t, f"{env.id}::{t}"}
            seen |= names
            (held if t in chosen or names & explicit else train).append((i, t))
    unknown = sorted(explicit - seen)
    if unknown:
        raise ValueError(f"heldout.tasks: no such tasks: {unknown}")
    return train, held
