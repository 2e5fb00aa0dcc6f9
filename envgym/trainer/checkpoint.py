"""Checkpoints with exact resume, and the data order they restore.

A checkpoint is a directory ``step-000042/`` holding

* ``model.pt`` — the trained model's state dict; ``optimizer.pt`` — optimizer and LR-schedule
  state; ``rng.pt`` — torch, numpy and Python RNG states;
* ``ref_model.pt`` — the KL reference model, only once ``loss.ref_sync_every`` has replaced it
  by a copy of the policy (before that it is the initial model, which a resume rebuilds);
* ``state.json`` — the step, the policy version, the data-order cursor (:class:`TaskOrder`) and
  the config it was written under.

It is written into a temporary directory and renamed into place, so a run killed mid-save
leaves either the previous checkpoint or the new one, never half of one; the newest ``keep``
survive.  Resuming restores every piece, so a run killed after step ``k`` and resumed makes
exactly the updates an uninterrupted run makes (tests/test_train_checkpoint.py: 3 straight
steps vs 2 + kill + resume + 1 give identical weights) — in synchronous mode; an asynchronous
run resumes at the producer's cursor and loses the rollouts in flight.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from envgym.trainer.lora import checkpoint_state, load_checkpoint_state, merged_view

if TYPE_CHECKING:  # transformers is imported where a model is loaded, not at import time
    from transformers import PreTrainedModel

PREFIX = "step-"


class TaskOrder:
    """The order training prompts are taken in: a seeded permutation of the tasks per epoch.

    ``(epoch, index)`` is the cursor; :meth:`take` walks it, crossing into the next epoch's
    permutation when one runs out.  The permutation of epoch ``e`` depends only on
    ``(seed, e)``, so the cursor alone restores the order.
    """

    def __init__(self, tasks: Sequence[Any], seed: int, *, epoch: int = 0, index: int = 0) -> None:
        if not tasks:
            raise ValueError("no training tasks: every task is held out or none were found")
        self.tasks = list(tasks)
        self.seed = seed
        self.epoch, self.index = epoch, index
        if not 0 <= index <= len(self.tasks) or epoch < 0:
            raise ValueError(f"cursor (epoch {epoch}, index {index}) is outside {len(tasks)} tasks")

    def _perm(self, epoch: int) -> list[int]:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.tasks)).tolist()

    def take(self, n: int) -> list[Any]:
        out: list[Any] = []
        while len(out) < n:
            if self.index >= len(self.tasks):
                self.epoch, self.index = self.epoch + 1, 0
            perm = self._perm(self.epoch)
            j = min(len(self.tasks), self.index + n - len(out))
            out.extend(self.tasks[i] for i in perm[self.index : j])
            self.index = j
        return out

    @property
    def cursor(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}


@dataclass(frozen=True)
class TrainState:
    """What a checkpoint restores besides tensors."""

    step: int  # steps completed
    policy_version: int
    cursor: dict[str, int]
    config: dict[str, Any]
    path: Path
    ref_model: bool = False  # whether ref_model.pt was there and loaded


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(
    directory: str | Path,
    *,
    step: int,
    policy_version: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    cursor: dict[str, int],
    config: dict[str, Any],
    keep: int = 2,
    ref_model: nn.Module | None = None,
) -> Path:
    """Write ``directory/step-XXXXXX`` atomically and prune to the newest ``keep``;
    ``ref_model`` (a synced KL reference) goes to ``ref_model.pt`` when given."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(checkpoint_state(model), tmp / "model.pt")  # a LoRA policy: its adapters only
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
        tmp / "optimizer.pt",
    )
    torch.save(rng_state(), tmp / "rng.pt")
    if ref_model is not None:
        torch.save(ref_model.state_dict(), tmp / "ref_model.pt")
    state = {"step": step, "policy_version": policy_version, "cursor": cursor, "config": config}
    (tmp / "state.json").write_text(json.dumps(state, indent=1, sort_keys=True))
    _fsync_dir(tmp)
    if final.exists():  # a rerun of the same step (resumed with a longer schedule): replace it
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for old in checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest first."""
    root = Path(directory)
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and (p / "state.json").is_file()
    ]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(directory: str | Path) -> Path | None:
    found = checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(
    path: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    restore_rng: bool = True,
    ref_model: nn.Module | None = None,
) -> TrainState:
    """Load ``path`` into ``model``/``optimizer``/``scheduler`` (and the RNGs) and, when the
    checkpoint has one, its ``ref_model.pt`` into ``ref_model``; return the rest."""
    p = Path(path)
    ref_weights = None
    try:
        state = json.loads((p / "state.json").read_text())
        weights = torch.load(p / "model.pt", map_location="cpu", weights_only=True)
        opt = torch.load(p / "optimizer.pt", map_location="cpu", weights_only=True)
        rng = torch.load(p / "rng.pt", map_location="cpu", weights_only=False)
        if ref_model is not None and (p / "ref_model.pt").is_file():
            ref_weights = torch.load(p / "ref_model.pt", map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError, KeyError, EOFError, pickle.UnpicklingError) as err:
        raise ValueError(f"checkpoint {p} is unreadable: {type(err).__name__}: {err}") from None
    load_checkpoint_state(model, weights)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    if ref_model is not None and ref_weights is not None:
        ref_model.load_state_dict(ref_weights)
    if restore_rng:
        set_rng_state(rng)
    return TrainState(
        step=int(state["step"]),
        policy_version=int(state["policy_version"]),
        cursor={k: int(v) for k, v in state["cursor"].items()},
        config=dict(state["config"]),
        path=p,
        ref_model=ref_weights is not None,
    )


def config_changes(saved: dict[str, Any], now: dict[str, Any], *, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts (``steps`` and the resume
    switch may change across a resume; everything else changes what the run computes)."""
    allowed = {"steps", "checkpoint.resume", "checkpoint.keep", "metrics.plot", "packing"}
    out = []
    for key in sorted(set(saved) | set(now)):
        dotted = f"{prefix}{key}"
        a, b = saved.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(config_changes(a, b, prefix=f"{dotted}."))
        elif a != b and dotted not in allowed:
            out.append(dotted)
    return out


def export_policy(
    model: PreTrainedModel, tokenizer: Any, out: str | Path, meta: dict[str, Any]
) -> Path:
    """The trained policy as an HF folder that ``envgym eval --model OUT`` (and vLLM) load:
    weights, config, tokenizer with its chat template, and ``train_run.json`` (``meta``).

    Written into a temporary sibling and renamed into place (an earlier export of the same run
    is replaced), so a kill mid-write never leaves a folder that loads half-written weights.
    A non-empty ``out`` that is not an earlier export is refused: it may be someone's model.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "train_run.json").is_file():
        raise FileExistsError(f"checkpoint.export: {out} is not empty and not an earlier export")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with merged_view(model):  # a LoRA policy exports as the plain model it computes
        model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / "train_run.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
