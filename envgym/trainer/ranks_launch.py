"""Starting the training ranks: ``envgym train`` on one node, or every rank under torchrun.

* ``trainer.world_size`` 1: this process alone (:class:`~envgym.trainer.ranks.Ranks` ()).
* torchrun (``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``/``LOCAL_RANK`` set): each
  process joins the group; rank 0 runs the loop, the others :func:`follow` it.
* ``envgym train`` with ``world_size`` > 1, one node, no torchrun: this process becomes rank 0
  and starts ranks 1… as child processes (``python -m envgym.trainer.ranks_launch CONFIG.json``)
  with the same variables torchrun would set, rendezvous on 127.0.0.1 at a free port.

A follower builds the same model, policy and :class:`~envgym.trainer.update.Update` as rank 0, takes
rank 0's weights and optimizer state, then trains on every batch rank 0 sends until it says stop.
It never rolls out, logs metrics or writes checkpoints: those are rank 0's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.trainer.config import TrainConfig, config_from_dict
from envgym.trainer.distributed import free_port
from envgym.trainer.ranks import Ranks, RanksError, join, rank_device

# How long rank 0 waits for its children to exit after the run (they end with its stop message).
CHILD_EXIT_S = 120.0


@dataclass
class Spawned:
    """Rank 0's view of the ranks it started itself (none under torchrun or alone)."""

    ranks: Ranks
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    config_file: Path | None = None

    def finish(self, *, failed: bool) -> None:
        """Wait for the children (killed when rank 0 failed or they outlive the wait); a child
        that failed while rank 0 did not is an error."""
        bad = []
        for i, child in enumerate(self.children, 1):
            try:
                code = child.wait(timeout=5.0 if failed else CHILD_EXIT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
            if code != 0:
                bad.append(f"rank {i} exited with {code}")
        self.ranks.close()
        if self.config_file is not None:
            self.config_file.unlink(missing_ok=True)
        if bad and not failed:
            raise RanksError("; ".join(bad))


def start_ranks(config: TrainConfig) -> Spawned:
    """Join (torchrun) or start (one node) the ranks ``config.trainer`` asks for; this process
    is rank 0 of them, or a follower under torchrun (``ranks.is_main`` False)."""
    t = config.trainer
    if "RANK" in os.environ or t.world_size == 1:
        return Spawned(join(config))
    if t.nodes > 1:
        raise RanksError(
            f"trainer.nodes {t.nodes}: launch envgym train with torchrun on every node "
            "(docs/DISTRIBUTED.md); it spawns ranks itself on one node only"
        )
    port = free_port()
    fd, name = tempfile.mkstemp(prefix="envgym-ranks-", suffix=".json")
    with os.fdopen(fd, "w") as out:
        json.dump(config.to_dict(), out)
    root = str(Path(__file__).resolve().parents[2])  # the children import this same code
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    base = {"WORLD_SIZE": str(t.world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    children = []
    try:
        for rank in range(1, t.world_size):
            env = {**os.environ, **base, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            env["PYTHONPATH"] = path
            children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "envgym.trainer.ranks_launch", name],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,  # rank 0 owns stdout (--json); errors on stderr
                )
            )
        ranks = join(config, {**base, "RANK": "0", "LOCAL_RANK": "0"})
    except BaseException:
        for child in children:
            child.kill()
            child.wait()
        Path(name).unlink(missing_ok=True)
        raise
    return Spawned(ranks, children, Path(name))


def follow(config: TrainConfig, ranks: Ranks) -> None:
    """A rank other than 0: train on what rank 0 sends until it says stop."""
    import torch

    from envgym.trainer.config import resolve_device
    from envgym.trainer.loop import build_policies
    from envgym.trainer.update import Update
    from envgym.trainer.weight_sync import load_model, pad_id

    torch.manual_seed(config.seed)
    device = rank_device(config, ranks) or resolve_device(config.model.device)
    model, tokenizer = load_model(config)
    model.to(device)  # type: ignore[arg-type]  # transformers' wrapped .to
    policy, ref_policy = build_policies(config, model)
    update = Update(config, policy, ref_policy, pad_id=pad_id(tokenizer), ranks=ranks)
    ref_model = ref_policy.model if ref_policy is not None else None
    ranks.share_state(model, update.optimizer, update.scheduler, ref_model)
    every = config.loss.ref_sync_every
    while True:
        message: Any = ranks.send(None)
        if message[0] == "stop":
            if message[1]:
                ranks.check_same(model)
            return
        _, samples, step = message
        if samples is not None:
            update.run(samples, step)
        if ref_model is not None and every > 0 and (step + 1) % every == 0:
            with torch.no_grad():  # as rank 0's Trainer._sync_ref, at the same step
                ref_model.load_state_dict(model.state_dict())


def main(argv: list[str]) -> int:
    """``python -m envgym.trainer.ranks_launch CONFIG.json``: one follower rank."""
    if len(argv) != 1:
        print("usage: python -m envgym.trainer.ranks_launch CONFIG.json", file=sys.stderr)
        return 2
    config = config_from_dict(json.loads(Path(argv[0]).read_text()))
    ranks = join(config)
    try:
        follow(config, ranks)
    finally:
        ranks.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
