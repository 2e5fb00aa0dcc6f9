"""FSDP2 on gloo, 2 processes: one step equals single-process training on the whole batch.

The distributed runs happen once per module (``torch.multiprocessing`` spawn, 127.0.0.1, a free
port; one Ray group for the heavy test); each test checks one property of what they saved.  The
reference is written out here by hand (a float64 SGD step, clipping by the global L2 norm), never
through :mod:`envgym.trainer.distributed`.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch import Tensor, nn
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from envgym.trainer.distributed import (
    StepStats,
    distributed_step,
    free_port,
    full_state_dict,
    init_distributed,
    iter_full_parameters,
    load_full_state_dict,
    shard_batch,
    shard_model,
)
from envgym.trainer.losses import LossConfig, grpo_loss

WORLD = 2
LR = 0.5
CLIP = 1e-3  # far below the gradient norm (~1), so the second step really clips
VOCAB, SEQ = 48, 10


def tiny_model(seed: int) -> LlamaForCausalLM:
    """Hidden 32, 2 layers, tied embeddings (as SmolLM2), float64 so equality can be tight."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).to(torch.float64)


def tiny_moe(seed: int) -> MixtralForCausalLM:
    """The MoE policy's shape in miniature: 4 experts, top-2, float64."""
    torch.manual_seed(seed)
    config = MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=32,
        experts_implementation="eager",  # grouped_mm has no float64 kernel
    )
    return MixtralForCausalLM(config).to(torch.float64)


def make_batch() -> dict[str, Tensor]:
    """4 rows; rank 0 gets rows 0–1 with 9 + 9 loss tokens, rank 1 rows 2–3 with 2 + 1."""
    ids = torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(11))
    mask = torch.zeros(4, SEQ - 1, dtype=torch.float64)
    mask[0:2] = 1.0
    mask[2, 3:5] = 1.0
    mask[3, 7] = 1.0
    return {"input_ids": ids, "loss_mask": mask}


def token_nll(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    """Masked next-token NLL: (sum over loss tokens, their count)."""
    ids, mask = batch["input_ids"], batch["loss_mask"]  # [B, T], [B, T-1]
    logits = model(input_ids=ids).logits[:, :-1]  # [B, T-1, V]
    logp = torch.log_softmax(logits.double(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    return -(logp * mask).sum(), mask.sum()


def token_logp(model: nn.Module, ids: Tensor) -> Tensor:  # [B, T-1]
    logits = model(input_ids=ids).logits[:, :-1]
    return torch.log_softmax(logits.double(), -1).gather(-1, ids[:, 1:, None])[..., 0]


GRPO_AGGREGATIONS = ("token-mean", "seq-mean-token-mean")


def grpo_batch() -> dict[str, Tensor]:
    """make_batch plus π_old (the seed-0 model's log-probs, jittered so ratios clip) and Â."""
    batch = make_batch()
    with torch.no_grad():
        old = token_logp(tiny_model(seed=0), batch["input_ids"])
    noise = torch.randn(old.shape, generator=torch.Generator().manual_seed(3), dtype=old.dtype)
    advantages = torch.tensor([1.0, -0.5, 0.7, -1.2], dtype=torch.float64)
    return {**batch, "old_logp": old + 0.3 * noise, "advantages": advantages}


def grpo_terms(
    model: nn.Module, batch: dict[str, Tensor], aggregation: str
) -> tuple[Tensor, dict[str, Tensor]]:
    cfg = LossConfig(aggregation=aggregation)  # type: ignore[arg-type]
    logp = token_logp(model, batch["input_ids"])
    mask = batch["loss_mask"].bool()
    return grpo_loss(logp, batch["old_logp"], batch["advantages"], mask, cfg)


def grpo_sum(model: nn.Module, batch: dict[str, Tensor], aggregation: str) -> tuple[Tensor, Tensor]:
    """envgym.trainer.losses.grpo_loss as a (loss_sum, n_units) loss_fn."""
    loss, diagnostics = grpo_terms(model, batch, aggregation)
    n_units = diagnostics["n_units"]
    return loss * n_units.clamp_min(1.0), n_units


def nan_on_rank1(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    import torch.distributed as dist

    loss, n = token_nll(model, batch)
    return (loss * math.nan if dist.get_rank() == 1 else loss), n


def hand_step(
    model: nn.Module, grads: dict[str, Tensor], lr: float, clip: float | None = None
) -> None:
    """SGD by hand; with ``clip`` the gradients are scaled to at most that global L2 norm."""
    norm = math.sqrt(sum(float((g**2).sum()) for g in grads.values()))
    scale = min(1.0, clip / (norm + 1e-6)) if clip is not None else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            p -= lr * scale * grads[name]


def grads_of(model: nn.Module, loss: Tensor) -> dict[str, Tensor]:
    names, params = zip(*model.named_parameters())
    return dict(zip(names, torch.autograd.grad(loss, params)))


def global_mean_grads(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    loss_sum, n = token_nll(model, batch)
    return grads_of(model, loss_sum / n)


# -- the 2-process run ------------------------------------------------------------------------


def _worker(rank: int, world: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    init_distributed(rank, world, master_port=port, backend="gloo")
    saved: dict[str, Any] = {}
    batch = shard_batch(make_batch(), rank, world)
    model = shard_model(tiny_model(seed=rank))  # ranks start different: rank 0's weights must win
    with torch.no_grad():  # a forward no backward follows (an old-logp recompute)
        model(input_ids=batch["input_ids"])
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    saved["stats1"] = distributed_step(model, opt, batch, token_nll)
    saved["sd1"] = full_state_dict(model)
    saved["stats2"] = distributed_step(model, opt, batch, token_nll, max_grad_norm=CLIP)
    saved["sd2"] = full_state_dict(model)
    saved["stats3"] = distributed_step(model, opt, batch, nan_on_rank1)
    saved["sd3"] = full_state_dict(model)
    saved["params"] = dict(iter_full_parameters(model))
    fresh = shard_model(tiny_model(seed=7), sync_from_rank0=False)
    load_full_state_dict(fresh, saved["sd3"])
    with torch.no_grad():
        probe = batch["input_ids"]
        gap = fresh(input_ids=probe).logits - model(input_ids=probe).logits
        saved["logits_gap"] = float(gap.abs().max())
    grpo = shard_batch(grpo_batch(), rank, world)
    for aggregation in GRPO_AGGREGATIONS:
        policy = shard_model(tiny_model(seed=rank))
        loss_fn = functools.partial(grpo_sum, aggregation=aggregation)
        distributed_step(policy, torch.optim.SGD(policy.parameters(), lr=LR), grpo, loss_fn)
        saved[aggregation] = full_state_dict(policy)
    moe = shard_model(tiny_moe(seed=rank))
    distributed_step(moe, torch.optim.SGD(moe.parameters(), lr=LR), batch, token_nll)
    saved["moe"] = full_state_dict(moe)
    saved["errors"] = {}
    for name, call in {
        "unsharded": lambda: distributed_step(tiny_model(0), opt, batch, token_nll),
        "twice": lambda: shard_model(model),
        "no_layers": lambda: shard_model(nn.Sequential(nn.Linear(2, 2))),
        "foreign_layers": lambda: shard_model(tiny_model(0), layers=[nn.Linear(2, 2)]),
    }.items():
        try:
            call()
        except (TypeError, ValueError) as exc:
            saved["errors"][name] = f"{type(exc).__name__}: {exc}"
    torch.save(saved, Path(out) / f"rank{rank}.pt")
    import torch.distributed as dist

    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("fsdp")
    mp.spawn(_worker, args=(WORLD, free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.fixture(scope="module")
def reference() -> list[dict[str, Tensor]]:
    """Weights after each of the worker's steps, single process, full batch, by hand."""
    model, batch = tiny_model(seed=0), make_batch()
    hand_step(model, global_mean_grads(model, batch), LR)
    after1 = {k: v.clone() for k, v in model.state_dict().items()}
    hand_step(model, global_mean_grads(model, batch), LR, clip=CLIP)
    return [after1, {k: v.clone() for k, v in model.state_dict().items()}]


def max_gap(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


pytestmark = pytest.mark.timeout(300)


def test_fsdp_step_equals_single_process_step(ranks: list[dict[str, Any]], reference: Any) -> None:
    # Also shows rank 1 (seeded differently) adopted rank 0's weights, and that the no-grad
    # forward before the step did not cost the root parameters their update.
    assert max_gap(ranks[0]["sd1"], reference[0]) < 1e-12
    assert ranks[1]["sd1"] == {}  # the full state dict lives on rank 0 only


def test_normalizer_is_global_not_per_rank(ranks: list[dict[str, Any]]) -> None:
    # Per-rank token means averaged over ranks weight rank 1's 3 tokens like rank 0's 18.
    model, batch = tiny_model(seed=0), make_batch()
    halves = [shard_batch(batch, r, WORLD) for r in range(WORLD)]
    per_rank = [global_mean_grads(model, h) for h in halves]
    hand_step(model, {k: (per_rank[0][k] + per_rank[1][k]) / 2 for k in per_rank[0]}, LR)
    assert max_gap(ranks[0]["sd1"], model.state_dict()) > 1e-3
    stats: StepStats = ranks[0]["stats1"]
    assert stats.n_units == 21.0 and not stats.skipped
    ref_model = tiny_model(seed=0)
    with torch.no_grad():
        loss_sum, n = token_nll(ref_model, batch)
    assert stats.loss == pytest.approx(float(loss_sum / n), rel=1e-12)
    assert ranks[1]["stats1"] == stats


def test_moe_policy_step_equals_single_process_step(ranks: list[dict[str, Any]]) -> None:
    model, batch = tiny_moe(seed=0), make_batch()
    hand_step(model, global_mean_grads(model, batch), LR)
    assert max_gap(ranks[0]["moe"], model.state_dict()) < 1e-12


@pytest.mark.parametrize("aggregation", GRPO_AGGREGATIONS)
def test_grpo_step_equals_single_process_step(
    ranks: list[dict[str, Any]], aggregation: str
) -> None:
    model, batch = tiny_model(seed=0), grpo_batch()
    loss, diagnostics = grpo_terms(model, batch, aggregation)
    # the batch exercises the clipped branches, not only the identity ratio
    assert diagnostics["clip_low_fraction"] + diagnostics["clip_high_fraction"] > 0
    assert diagnostics["dual_clip_fraction"] + diagnostics["clip_low_fraction"] < 1
    hand_step(model, grads_of(model, loss), LR)
    assert max_gap(ranks[0][aggregation], model.state_dict()) < 1e-12


def test_clipped_step_equals_single_process(ranks: list[dict[str, Any]], reference: Any) -> None:
    assert ranks[0]["stats2"].grad_norm > 100 * CLIP
    assert max_gap(ranks[0]["sd2"], reference[1]) < 1e-12


def test_nan_loss_on_one_rank_skips_the_step_on_all(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        assert rank["stats3"].skipped and math.isnan(rank["stats3"].loss)
    assert max_gap(ranks[0]["sd3"], ranks[0]["sd2"]) == 0.0


def test_gathered_state_dict_loads_into_fresh_models(ranks: list[dict[str, Any]]) -> None:
    sd = ranks[0]["sd3"]
    fresh = tiny_model(seed=5)
    fresh.load_state_dict(sd, strict=True)
    assert fresh.lm_head.weight is fresh.model.embed_tokens.weight  # still tied
    trained = tiny_model(seed=9)
    trained.load_state_dict(sd)
    ids = make_batch()["input_ids"]
    assert torch.equal(fresh(input_ids=ids).logits, trained(input_ids=ids).logits)
    assert not torch.equal(fresh.lm_head.weight, tiny_model(seed=5).lm_head.weight)
    # ...and into a fresh sharded model through rank 0's broadcast.
    assert ranks[0]["logits_gap"] == 0.0 and ranks[1]["logits_gap"] == 0.0


def test_streamed_parameters_match_the_state_dict(ranks: list[dict[str, Any]]) -> None:
    sd = ranks[0]["sd3"]
    for rank in ranks:  # every rank receives every full parameter
        params = rank["params"]
        assert "lm_head.weight" not in params  # tied: streamed once
        assert set(params) == set(sd) - {"lm_head.weight"}
        assert all(torch.equal(params[k], sd[k]) for k in params)


def test_misuse_under_a_process_group_is_refused(ranks: list[dict[str, Any]]) -> None:
    errors = ranks[0]["errors"]
    assert errors["unsharded"].startswith("TypeError") and "shard_model" in errors["unsharded"]
    assert errors["twice"].startswith("ValueError") and "already sharded" in errors["twice"]
    assert errors["no_layers"].startswith("ValueError") and "Sequential" in errors["no_layers"]
    assert errors["foreign_layers"] == ("ValueError: layers holds a Linear that is not a submodule")


# -- single process and bad input -------------------------------------------------------------


def test_without_a_process_group_it_is_plain_training(reference: Any) -> None:
    model = tiny_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    stats = distributed_step(model, opt, make_batch(), token_nll)
    assert stats.n_units == 21.0 and not stats.skipped
    assert max_gap(model.state_dict(), reference[0]) < 1e-12


def test_shard_batch_splits_rows_and_refuses_bad_batches() -> None:
    batch = make_batch()
    parts = [shard_batch(batch, r, 3) for r in range(3)]
    assert [p["input_ids"].shape[0] for p in parts] == [2, 1, 1]
    assert torch.equal(torch.cat([p["loss_mask"] for p in parts]), batch["loss_mask"])
    with pytest.raises(ValueError, match="4 rows, fewer than world_size=5"):
        shard_batch(batch, 0, 5)
    with pytest.raises(ValueError, match="rank must be an int in \\[0, 2\\), not 2"):
        shard_batch(batch, 2, 2)
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        shard_batch(batch, 0, 0)
    with pytest.raises(ValueError, match="batch\\['loss_mask'\\] has 3 rows"):
        shard_batch({"input_ids": batch["input_ids"], "loss_mask": batch["loss_mask"][:3]}, 0, 2)
    with pytest.raises(TypeError, match="batch\\['x'\\] must be a tensor"):
        shard_batch({"x": [1, 2]}, 0, 1)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="non-empty mapping"):
        shard_batch({}, 0, 1)


@pytest.mark.parametrize(
    ("loss_fn", "error", "match"),
    [
        ("not callable", TypeError, "loss_fn must be callable"),
        (lambda m, b: token_nll(m, b)[0], TypeError, "must return \\(loss_sum, n_units\\)"),
        (lambda m, b: (token_nll(m, b)[0].reshape(1), 3), ValueError, "scalar tensor, not \\(1,"),
        (lambda m, b: (torch.tensor(1.0), 3), ValueError, "does not require grad"),
        (lambda m, b: (token_nll(m, b)[0], -1), ValueError, "n_units must be a finite scalar >= 0"),
        (lambda m, b: (token_nll(m, b)[0], math.inf), ValueError, "n_units must be a finite"),
        (lambda m, b: (token_nll(m, b)[0], 0), ValueError, "summed to 0"),
    ],
)
def test_distributed_step_refuses_bad_loss_functions(loss_fn: Any, error: type, match: str) -> None:
    model = tiny_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with pytest.raises(error, match=match):
        distributed_step(model, opt, make_batch(), loss_fn)


def test_bad_arguments_are_refused() -> None:
    model = tiny_model(seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with pytest.raises(ValueError, match="max_grad_norm must be positive and finite, not 0"):
        distributed_step(model, opt, make_batch(), token_nll, max_grad_norm=0)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer, not dict"):
        distributed_step(model, {}, make_batch(), token_nll)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="call init_distributed first"):
        shard_model(model)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, not str"):
        shard_model("model")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not sharded: call shard_model first"):
        full_state_dict(model)
    with pytest.raises(ValueError, match="backend must be one of"):
        init_distributed(0, 2, master_port=free_port(), backend="mpi")
    with pytest.raises(ValueError, match="rank must be an int in \\[0, 2\\), not 3"):
        init_distributed(3, 2, master_port=free_port(), backend="gloo")
    with pytest.raises(ValueError, match="master_port must be an int in \\(0, 65536\\), not 70000"):
        init_distributed(0, 2, master_port=70000, backend="gloo")
    with pytest.raises(ValueError, match="world_size must be a positive int, not 0"):
        init_distributed(0, 0, master_port=free_port(), backend="gloo")
    with pytest.raises(ValueError, match="timeout_s must be positive, not -1"):
        init_distributed(0, 1, master_port=free_port(), backend="gloo", timeout_s=-1)


# -- Ray: trainer ranks as actors, rollout workers in their own placement group ---------------


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    import ray

    from envgym.rollout.ray_engine import ensure_ray

    # tests/ is not importable in Ray's workers: ship this module's functions by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ensure_ray(None, num_cpus=2)
    yield ray
    ray.shutdown()


def placement_group_id() -> str | None:
    import ray

    return ray.get_runtime_context().get_placement_group_id()  # type: ignore[no-any-return]


@pytest.mark.heavy
def test_ray_trainer_group_equals_single_process(ray_local: Any, reference: Any) -> None:
    from envgym.trainer.placement import Placement, PlacementPlan, TrainerGroup

    plan = PlacementPlan(trainers=2, rollout_workers=1, trainer_cpus=0.5, rollout_cpus=0.5)
    placement = Placement(plan)
    try:
        optimizer = functools.partial(torch.optim.SGD, lr=LR)
        model = functools.partial(tiny_model, 0)
        with TrainerGroup(model, optimizer, placement, master_addr="127.0.0.1") as group:
            stats = group.step(make_batch(), token_nll)
            sd = group.full_state_dict()
        assert stats.n_units == 21.0 and not stats.skipped
        assert max_gap(sd, reference[0]) < 1e-12

        where = ray_local.remote(placement_group_id).options(**placement.rollout_options())
        assert ray_local.get(where.remote()) == placement.rollout_group.id.hex()
        with pytest.raises(ValueError, match="rank must be an int in \\[0, 2\\), not 2"):
            placement.trainer_options(2)
        with pytest.raises(ValueError, match="index must be None or in \\[0, 1\\), not 1"):
            placement.rollout_options(1)
    finally:
        placement.remove()
    too_big = PlacementPlan(trainers=2, rollout_workers=0, trainer_cpus=8)
    with pytest.raises(TimeoutError, match="not ready in 1 s: trainers \\[\\{'CPU': 8.0\\}"):
        Placement(too_big, timeout_s=1)
    trainers_only = Placement(PlacementPlan(trainers=1, rollout_workers=0, trainer_cpus=0.5))
    try:
        with pytest.raises(ValueError, match="rollout_workers=0"):
            trainers_only.rollout_options()
    finally:
        trainers_only.remove()


def test_placement_plan_refuses_bad_values() -> None:
    from envgym.trainer.placement import Placement, PlacementPlan

    with pytest.raises(ValueError, match="trainers must be an int >= 0, not -1"):
        PlacementPlan(trainers=-1)
    with pytest.raises(ValueError, match="nothing to place"):
        PlacementPlan(trainers=0, rollout_workers=0)
    with pytest.raises(ValueError, match="rollout_cpus must be a number >= 0, not -1"):
        PlacementPlan(rollout_cpus=-1)
    with pytest.raises(ValueError, match="trainer_cpus and trainer_gpus are 0"):
        PlacementPlan(trainer_cpus=0)
    with pytest.raises(ValueError, match="strategy must be one of"):
        PlacementPlan(strategy="RANDOM")
    assert PlacementPlan(trainer_gpus=1).trainer_bundles() == [{"CPU": 1.0, "GPU": 1.0}] * 2
    with pytest.raises(TypeError, match="plan must be a PlacementPlan, not dict"):
        Placement({"trainers": 2})  # type: ignore[arg-type]
