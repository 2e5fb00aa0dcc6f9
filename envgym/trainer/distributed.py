"""FSDP2 data parallelism for the policy: shard, step with a global normalizer, gather weights.

    init_distributed(rank, world_size, master_port=port)      # gloo on CPU, NCCL on GPU
    model = shard_model(AutoModelForCausalLM.from_pretrained(...))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)  # after sharding: DTensor params
    stats = distributed_step(model, optimizer, shard_batch(batch, rank, world_size), loss_fn)
    weights = full_state_dict(model)                           # rank 0: every tensor; others: {}

Seed-Thinking-v1.5 §5.3 trains its policy with FSDP (composed with TP/EP/CP, which this CPU-first
project leaves out); ``torch.distributed.fsdp.fully_shard`` (FSDP2) shards each decoder layer and
then the root, so a layer's full weights exist only while that layer runs.

**Gradients equal single-process training.**  A step is defined by ``loss_fn(model, batch) ->
(loss_sum, n_units)``: the *sum* of the per-unit losses on this rank's shard and how many units
(tokens, for token-mean aggregation; sequences, for seq-mean-token-mean) it holds.  The normalizer
is the count over **all** ranks (one all-reduce), each rank back-propagates
``loss_sum / N_global`` and FSDP *sums* the gradients (divide factor 1), so the update is the one a
single process makes on the concatenated batch.  A per-rank mean averaged over ranks would weight a
token on a rank with few tokens more than one on a rank with many (DeepSeek-V3.2 §3.1 eq. 5 and
Seed-Thinking §4.2's token-level loss both normalize over the whole batch's tokens).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

Batch = Mapping[str, Tensor]  # every value [B, ...] with the same B
LossFn = Callable[[nn.Module, Batch], tuple[Tensor, Tensor | int | float]]

BACKENDS = ("gloo", "nccl")


def default_backend() -> str:
    """NCCL when CUDA is available, else gloo (the CPU path)."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it; bind it soon, it is not reserved)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def init_distributed(
    rank: int,
    world_size: int,
    *,
    master_port: int,
    master_addr: str = "127.0.0.1",
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> None:
    """Join the default process group (TCP rendezvous at ``master_addr:master_port``).

    Every rank calls it; it returns once all ``world_size`` ranks have joined.  On NCCL each rank
    takes the GPU ``LOCAL_RANK`` (else ``rank`` modulo the local GPU count).
    """
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, not {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), not {rank!r}")
    if not isinstance(master_port, int) or not 0 < master_port < 65536:
        raise ValueError(f"master_port must be an int in (0, 65536), not {master_port!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialized in this process")
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank % max(torch.cuda.device_count(), 1)))
        torch.cuda.set_device(local)
    dist.init_process_group(
        backend,
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of an HF model: modules whose class is in ``_no_split_modules``.

    HF names its decoder layer there (``LlamaDecoderLayer``, ``MixtralDecoderLayer``…) because
    it is the unit that must stay whole on one device: the same unit FSDP shards by.
    """
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if m is not model and type(m).__name__ in names]


def shard_model(
    model: nn.Module,
    *,
    mesh: DeviceMesh | None = None,
    layers: list[nn.Module] | None = None,
    mp_policy: MixedPrecisionPolicy | None = None,
    sync_from_rank0: bool = True,
) -> nn.Module:
    """``fully_shard`` every decoder layer, then the root; gradients are summed, not averaged.

    ``layers`` defaults to :func:`decoder_layers`; ``mesh`` to a 1-D mesh over the whole group
    (``cuda`` on NCCL, ``cpu`` on gloo); ``mp_policy`` e.g. ``MixedPrecisionPolicy(
    param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`` on GPU.  With ``sync_from_rank0``
    every rank ends up with rank 0's weights (``fully_shard`` keeps each rank's own slice, so
    ranks that initialized differently would otherwise hold a mix).

    The root reshards after forward too: with FSDP2's default (root kept unsharded) a forward
    that no backward follows — a ``no_grad`` recompute of old log-probs — left the next step's
    root parameters (embeddings, final norm, head) without their update (seen on torch 2.13 gloo).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if isinstance(model, FSDPModule):
        raise ValueError(f"model ({type(model).__name__}) is already sharded")
    if not dist.is_initialized():
        raise RuntimeError("shard_model needs a process group: call init_distributed first")
    blocks = decoder_layers(model) if layers is None else list(layers)
    if not blocks:
        raise ValueError(
            f"no decoder layers found in {type(model).__name__} (its _no_split_modules is "
            f"{getattr(model, '_no_split_modules', None)!r}): pass layers=[...]"
        )
    owned = {id(m) for m in model.modules()}
    for block in blocks:
        if id(block) not in owned or block is model:
            raise ValueError(f"layers holds a {type(block).__name__} that is not a submodule")
    if mesh is None:
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        mesh = init_device_mesh(device, (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": True}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    full = model.state_dict() if sync_from_rank0 and dist.get_rank() == 0 else {}
    for block in blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    _sum_gradients(model)
    if sync_from_rank0:
        load_full_state_dict(model, full)
    return model


def _sum_gradients(model: nn.Module) -> None:
    # FSDP averages gradients over ranks by default; distributed_step divides by the global
    # count itself, so the reduction must be a plain sum.
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)


def shard_batch(batch: Batch, rank: int, world_size: int) -> dict[str, Tensor]:
    """Rank ``rank``'s contiguous slice of the rows (sizes differ by at most one)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, not {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), not {rank!r}")
    rows = _batch_rows(batch)
    if rows < world_size:
        raise ValueError(f"batch has {rows} rows, fewer than world_size={world_size}")
    return {k: v.tensor_split(world_size, dim=0)[rank] for k, v in batch.items()}


def _batch_rows(batch: Batch) -> int:
    if not isinstance(batch, Mapping) or not batch:
        raise TypeError(f"batch must be a non-empty mapping of tensors, not {batch!r:.80}")
    rows: int | None = None
    for key, value in batch.items():
        if not isinstance(value, Tensor) or value.dim() == 0:
            raise TypeError(f"batch[{key!r}] must be a tensor with a batch dimension")
        if rows is None:
            rows = value.shape[0]
        elif value.shape[0] != rows:
            raise ValueError(
                f"batch[{key!r}] has {value.shape[0]} rows, the others {rows}: "
                f"shape {tuple(value.shape)}"
            )
    assert rows is not None
    return rows


@dataclass(frozen=True)
class StepStats:
    """One optimizer step, identical on every rank."""

    loss: float  # global loss_sum / global n_units (NaN when non-finite)
    n_units: float  # tokens (or sequences) over all ranks
    grad_norm: float  # global L2 norm before clipping
    skipped: bool  # loss or gradients non-finite: gradients dropped, no update


def distributed_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    loss_fn: LossFn,
    *,
    max_grad_norm: float | None = None,
) -> StepStats:
    """One optimizer step on this rank's ``batch`` with the normalizer summed over all ranks.

    ``loss_fn(model, batch) -> (loss_sum, n_units)``: ``loss_sum`` a differentiable scalar, the
    sum of per-unit losses; ``n_units`` this rank's count.  Without a process group this is
    plain single-process training with the same semantics.  A non-finite loss or gradient norm
    (agreed on by all ranks: both are global) drops the gradients and skips the update; the
    backward still runs so that every rank takes part in FSDP's collectives.
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, not {type(loss_fn).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        kind = type(optimizer).__name__
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, not {kind}")
    if max_grad_norm is not None and not (max_grad_norm > 0 and math.isfinite(max_grad_norm)):
        raise ValueError(f"max_grad_norm must be positive and finite, not {max_grad_norm!r}")
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    if distributed and not isinstance(model, FSDPModule):
        raise TypeError(
            f"model ({type(model).__name__}) is not sharded: call shard_model before "
            "distributed_step, or its gradients would not be reduced across ranks"
        )
    if isinstance(model, FSDPModule):
        _sum_gradients(model)
    _batch_rows(batch)
    optimizer.zero_grad(set_to_none=True)
    loss_sum, n_local = _checked(loss_fn(model, batch))
    totals = torch.stack([loss_sum.detach().to(torch.float64), n_local]).to(loss_sum.device)
    if distributed:
        dist.all_reduce(totals)
    global_sum, n_units = float(totals[0]), float(totals[1])
    if n_units <= 0:
        raise ValueError("no loss units on any rank (n_units summed to 0): nothing to train on")
    (loss_sum / totals[1].to(loss_sum.dtype)).backward()
    # The norm is over all ranks' shards (DTensor), so every rank reaches the same verdict.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm or math.inf)
    grad_norm = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    skipped = not (math.isfinite(global_sum) and math.isfinite(grad_norm))
    if skipped:
        optimizer.zero_grad(set_to_none=True)
    else:
        optimizer.step()
    return StepStats(
        loss=global_sum / n_units if math.isfinite(global_sum) else math.nan,
        n_units=n_units,
        grad_norm=grad_norm,
        skipped=skipped,
    )


def _checked(result: Any) -> tuple[Tensor, Tensor]:
    if not isinstance(result, tuple) or len(result) != 2:
        raise TypeError(f"loss_fn must return (loss_sum, n_units), not {type(result).__name__}")
    loss_sum, n_units = result
    if not isinstance(loss_sum, Tensor) or loss_sum.dim() != 0:
        shape = tuple(loss_sum.shape) if isinstance(loss_sum, Tensor) else type(loss_sum).__name__
        raise ValueError(f"loss_sum must be a scalar tensor, not {shape}")
    if not loss_sum.requires_grad:
        raise ValueError("loss_sum does not require grad: it must depend on the model's parameters")
    count = torch.as_tensor(n_units, dtype=torch.float64).detach()
    if count.dim() != 0 or not math.isfinite(float(count)) or float(count) < 0:
        raise ValueError(f"n_units must be a finite scalar >= 0, not {n_units!r}")
    return loss_sum, count.to(loss_sum.device)


def full_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Checkpoint / weight sync: the full state dict on CPU at rank 0, ``{}`` elsewhere.

    A collective: every rank must call it.  Keys are the unsharded model's (a plain HF model
    ``load_state_dict``s it strictly).
    """
    _require_sharded(model)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # full_state_dict=True: every value is a plain tensor (torch types them as any state value)
    return cast(dict[str, Tensor], get_model_state_dict(model, options=options))


def load_full_state_dict(model: nn.Module, state_dict: Mapping[str, Tensor]) -> None:
    """Load a full state dict held by rank 0 (others pass ``{}``) into the sharded ``model``.

    Rank 0 broadcasts and each rank keeps its slice: the resume path for :func:`full_state_dict`
    checkpoints, and the way to start from pretrained weights read on rank 0 only.
    """
    _require_sharded(model)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, dict(state_dict), options=options)


def iter_full_parameters(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """``(name, full tensor)`` one parameter at a time, on every rank: streaming weight sync.

    Peak memory is one parameter rather than the model (layer-by-layer transfer to the
    generators, as LongCat's DORA does after each step, §3.1.1).  Tied parameters come once.
    A collective: all ranks iterate to the end together.
    """
    _require_sharded(model)
    for name, param in model.named_parameters():
        full = param.full_tensor() if isinstance(param, DTensor) else param
        yield name, full.detach()


def _require_sharded(model: nn.Module) -> None:
    if not isinstance(model, FSDPModule):
        raise TypeError(f"model ({type(model).__name__}) is not sharded: call shard_model first")
