"""The GRPO run's configuration: typed dataclasses loaded from YAML (``envgym train CONFIG.yaml``).

Every value is checked before anything runs (no model loaded, no env started): an unknown key,
a value of the wrong type or an impossible value raises one :class:`ConfigError` whose message
names the dotted key (``rollout.group_size``) and what was wrong.  docs/TRAINER.md has the full
reference; ``configs/grpo_smollm2.yaml`` is a complete example.

The ``loss`` section is :class:`envgym.trainer.losses.LossConfig` (DeepSeek-V3.2 §3.1 eq. 5–9,
LongCat §3.2, Seed-Thinking §4.2); its own checks run here too and are re-worded with the key names.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import torch

from envgym.models.kept import TOP_LOGPROBS
from envgym.trainer.lora import LoRAConfig
from envgym.trainer.losses import LossConfig
from envgym.trainer.micro_tokens import AUTO, MicroTokens


class ConfigError(ValueError):
    """A config that cannot run; the message names the offending key."""


class MoEWithoutRoutesError(ConfigError):
    """An MoE policy sampled by a vLLM server the user started (``model.vllm_url``): nothing
    says the server returns expert routes, and without them keep routing (DeepSeek-V3.2 §3.1)
    is silently off and the routing-flip metric disappears.  Refused unless
    ``model.allow_moe_without_keep_routing: true`` says the user accepts that."""


@dataclass(frozen=True)
class ModelConfig:
    path: str = "smollm2"  # "smollm2" (embedded), an HF folder or hub id
    dtype: Literal["float32", "bfloat16", "float64"] = "float32"
    # Where the trained policy (and the local engine's copy) lives: auto = the first CUDA GPU
    # when torch sees one, else the CPU; or cpu | cuda | cuda:N (resolve_device).
    device: str = "auto"
    thinking: bool = False  # open every assistant turn with <think>
    parser: str = "hermes"  # the tool-call text format the model writes
    gradient_checkpointing: bool = False
    engine: Literal["local", "vllm"] = "local"  # where rollouts are sampled
    # engine: vllm → a running server "http://127.0.0.1:PORT/v1", or null: the trainer starts
    # one from .venv-vllm on an untied copy of the policy (envgym.trainer.weight_sync.managed_vllm)
    vllm_url: str | None = None
    # engine: vllm → after every weight reload, the largest |Δ log p| allowed between the
    # server and the trained model on a short probe (null = no probe); docs/TRAINER.md
    sync_check_tol: float | None = 1e-3
    # engine: vllm with a vllm_url and an MoE policy → true accepts training without keep
    # routing (the server may return no routes; the flip-rate metric then disappears)
    allow_moe_without_keep_routing: bool = False
    # LoRA adapters on a frozen base (envgym/trainer/lora.py; null = train every weight)
    lora: LoRAConfig | None = None


@dataclass(frozen=True)
class EnvConfig:
    id: str = ""  # a registered environment id, a bundle directory or a suite (docs/SUITES.md)
    tasks: list[str] | None = None  # restrict to these task ids (default: every task)
    # a suite only: train | held_out | all (default train); the entry becomes one per bundle
    split: str | None = None
    # a kept-tasks file (``envgym filter``): each bundle of the entry trains on the tasks that
    # file kept for it, a bundle it kept none of is left out (envgym/kept_tasks.py)
    kept: str | None = None
    sandbox: str = "bwrap"
    context: str = "thinking-retention"


@dataclass(frozen=True)
class HeldOutConfig:
    """Tasks kept out of training (evaluated on, never trained on)."""

    fraction: float = 0.0  # of each env's tasks, chosen by ``seed``
    tasks: list[str] = field(default_factory=list)  # explicit held-out ids ("ENV::TASK" or TASK)
    seed: int = 0
    every: int = 0  # evaluate pass@1 on the held-out tasks every N steps (0 = never)
    samples: int = 1


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8  # n samples per prompt (GRPO group)
    prompts: int = 4  # prompts per rollout batch
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_tokens: int = 512  # per turn
    episode_tokens: int = 2048  # sampled tokens per episode
    max_turns: int = 16
    max_seconds: float = 600.0
    concurrency: int = 8
    # A step whose share of errored episodes (infrastructure failures, left out of training)
    # passes this stops the run; null: never stop (past 2 % it still warns with the cause).
    max_errored_share: float | None = 0.1
    workers: int = 0  # Ray rollout workers (policy replicas + env actors); 0 = in-process
    ray_address: str | None = None  # with workers: a Ray cluster; null = start one locally


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float = 1e-6
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    warmup_steps: int = 0


@dataclass(frozen=True)
class DynamicSamplingConfig:
    """Seed-Thinking §4.2 dynamic sampling / LongCat §3.2.2 online filtering: groups whose
    rewards are all equal (all correct or all wrong) carry no GRPO gradient and are dropped; more
    prompts are rolled out to refill the batch, at most ``max_refills`` extra rounds."""

    enabled: bool = True
    max_refills: int = 2


@dataclass(frozen=True)
class AsyncConfig:
    """Bounded-staleness asynchronous rollouts (LongCat §3.1.1 DORA, §3.2.2 staleness control;
    Seed-Thinking §5.2 streaming rollouts)."""

    enabled: bool = False
    max_staleness: int = 1  # policy versions a sample may lag behind the trainer
    stale: Literal["drop", "regenerate"] = "regenerate"


@dataclass(frozen=True)
class CheckpointConfig:
    dir: str = "runs/grpo/checkpoints"
    every: int = 1  # steps between checkpoints (0 = only at the end)
    keep: int = 2  # newest checkpoints kept on disk
    resume: bool = True  # resume from the newest checkpoint in ``dir`` when there is one
    export: str | None = None  # at the end, the final policy as an HF folder (envgym eval --model)


@dataclass(frozen=True)
class MetricsConfig:
    dir: str = "runs/grpo/metrics"
    tensorboard: bool = True
    plot: bool = True  # PNG curves after every step
    store: str | None = None  # SQLAlchemy URL of the envgym store for the run row (None: none)


@dataclass(frozen=True)
class RanksConfig:
    """Data-parallel training ranks (envgym/trainer/ranks.py, docs/DISTRIBUTED.md)."""

    world_size: int = 1  # ranks over all nodes; 1 = this process alone
    nodes: int = 1  # > 1: launched by torchrun on every node
    backend: str | None = None  # gloo (CPU) | nccl (GPU); required when world_size > 1


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    envs: list[EnvConfig] = field(default_factory=list)
    heldout: HeldOutConfig = field(default_factory=HeldOutConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    steps: int = 10
    minibatches: int = 1  # optimizer steps per rollout batch (the batch split this many ways)
    # padded tokens per microbatch (gradient accumulation); auto: from the model's shape and the
    # free memory, activations at most the training state (envgym/trainer/micro_tokens.py)
    micro_tokens: MicroTokens = AUTO
    # several samples per row, no padding in the forward (envgym/trainer/packing.py);
    # micro_tokens then counts real tokens
    packing: bool = False
    normalize_std: bool = False  # Â = (R − mean) / std instead of R − mean
    old_logprobs: Literal["recompute", "engine"] = "recompute"  # π_old of the ratio
    keep_sampling_mask: bool = True  # renormalize π_θ over the recorded kept sets (§3.1)
    unknown_kept: Literal["raise", "full"] = "raise"  # kept sets the engine did not report
    keep_routing: bool = True  # replay recorded MoE routes (§3.1)
    overlong_mask: bool = True  # mask episodes/turns cut by the token limit (LongCat §3.2.2)
    # what overlong_mask masks: sample = the whole episode (every turn, and out of its group's
    # mean; LongCat §3.2.2), turn = only the turns cut; auto = sample when rollout.max_turns > 1
    overlong_scope: Literal["auto", "turn", "sample"] = "auto"
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seed: int = 0
    chunk_size: int = 1024  # vocabulary chunk of the log-prob op (envgym/kernels/logprob.py)
    trainer: RanksConfig = field(default_factory=RanksConfig)

    def to_dict(self) -> dict[str, Any]:
        """The config as YAML would hold it (``async_`` is written ``async``)."""
        data = dataclasses.asdict(self)
        data["async"] = data.pop("async_")
        return data


# -- loading -------------------------------------------------------------------------------------
_RENAMED = {"async": "async_"}  # YAML key → field name (``async`` is a Python keyword)


def load_config(path: str | Path) -> TrainConfig:
    """Read a YAML file into a checked :class:`TrainConfig` (ConfigError on any problem)."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read the config {str(p)!r}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{p}: not valid YAML: {err}") from None
    return config_from_dict({} if data is None else data)


def config_from_dict(data: Any) -> TrainConfig:
    """Build and check a :class:`TrainConfig` from plain data (a parsed YAML mapping)."""
    config = _expand_suites(_expand_paths(_build(TrainConfig, data, "")))
    check(config)
    return config


def _expand_paths(c: TrainConfig) -> TrainConfig:
    """``~`` and ``$VARS`` expanded in the keys that name files, as ``envgym sft`` does: the
    configs point at ``~/.cache/envgym/...`` (an env id or hub id has neither, so passes as is)."""

    def ex(path: str) -> str:
        return os.path.expandvars(os.path.expanduser(path))

    return dataclasses.replace(
        c,
        model=dataclasses.replace(c.model, path=ex(c.model.path)),
        envs=[dataclasses.replace(e, id=ex(e.id), kept=e.kept and ex(e.kept)) for e in c.envs],
        checkpoint=dataclasses.replace(
            c.checkpoint,
            dir=ex(c.checkpoint.dir),
            export=c.checkpoint.export and ex(c.checkpoint.export),
        ),
        metrics=dataclasses.replace(c.metrics, dir=ex(c.metrics.dir)),
    )


def _expand_suites(c: TrainConfig) -> TrainConfig:
    """Each entry becomes one per bundle it stands for (envgym/trainer/env_entries.py): a suite
    split's bundles, each restricted to what a kept-tasks file kept when the entry names one."""
    from envgym.trainer.env_entries import EntryError, bundles_of

    envs: list[EnvConfig] = []
    for i, env in enumerate(c.envs):
        try:
            pairs = bundles_of(env.id, env.split, env.tasks, env.kept)
        except EntryError as err:
            raise ConfigError(f"envs[{i}]{err}") from None
        envs += [
            dataclasses.replace(env, id=d, split=None, kept=None, tasks=tasks) for d, tasks in pairs
        ]
    return dataclasses.replace(c, envs=envs)


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping, not {_show(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = _RENAMED.get(key, key) if isinstance(key, str) else key
        dotted = f"{where}.{key}" if where else str(key)
        if name not in names:
            known = ", ".join(sorted(_RENAMED.get(n, n) for n in _yaml_names(cls)))
            raise ConfigError(f"unknown config key {dotted!r} (known here: {known})")
        kwargs[name] = _convert(hints[name], value, dotted)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:  # LossConfig's own checks name its fields
        raise ConfigError(f"{where or 'config'}: {err}") from None


def _yaml_names(cls: type) -> list[str]:
    inverse = {v: k for k, v in _RENAMED.items()}
    return [inverse.get(f.name, f.name) for f in dataclasses.fields(cls)]


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except ConfigError as err:
                errors.append(err)
        raise errors[0]
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ConfigError(f"{where} must be one of {list(allowed)}, not {_show(value)}")
        return value
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, not {_show(value)}")
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {_show(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {_show(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, not {_show(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be finite, not {value}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {_show(value)}")
        return value
    raise ConfigError(f"{where}: unsupported type {hint}")  # a bug in this module


def _show(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if value is not None else "null"


# -- impossible values -----------------------------------------------------------------------------
def check(c: TrainConfig) -> None:
    """Raise ConfigError naming the first impossible value."""
    _positive(c, "steps", "minibatches", "chunk_size")
    if isinstance(c.micro_tokens, int) and c.micro_tokens <= 0:
        raise ConfigError(f"micro_tokens must be > 0 or auto, not {c.micro_tokens}")
    if not c.envs:
        raise ConfigError("envs must list at least one environment ({id: ...})")
    for i, env in enumerate(c.envs):
        if not env.id.strip():
            raise ConfigError(f"envs[{i}].id must name an environment or a bundle directory")
        if env.tasks is not None and not env.tasks:
            raise ConfigError(f"envs[{i}].tasks is empty: leave it out to use every task")
    h = c.heldout
    if not 0.0 <= h.fraction < 1.0:
        raise ConfigError(f"heldout.fraction must be in [0, 1), not {h.fraction}")
    _positive(h, "samples", where="heldout")
    _non_negative(h, "every", where="heldout")
    r = c.rollout
    _positive(
        r, "prompts", "max_tokens", "episode_tokens", "max_turns", "concurrency", where="rollout"
    )
    if r.group_size < 2:
        raise ConfigError(
            f"rollout.group_size must be ≥ 2 (group-relative advantages), not {r.group_size}"
        )
    if r.temperature <= 0:
        raise ConfigError(
            f"rollout.temperature must be > 0 (log-probs are of logits / T), not {r.temperature}"
        )
    if not 0.0 < r.top_p <= 1.0:
        raise ConfigError(f"rollout.top_p must be in (0, 1], not {r.top_p}")
    _non_negative(r, "top_k", where="rollout")
    if r.max_seconds <= 0:
        raise ConfigError(f"rollout.max_seconds must be > 0, not {r.max_seconds}")
    if r.max_errored_share is not None and not 0.0 <= r.max_errored_share <= 1.0:
        raise ConfigError(
            f"rollout.max_errored_share must be in [0, 1] or null, not {r.max_errored_share}"
        )
    if c.minibatches > r.prompts * r.group_size:
        raise ConfigError(
            f"minibatches ({c.minibatches}) must be ≤ the episodes per batch "
            f"(rollout.prompts × rollout.group_size = {r.prompts * r.group_size})"
        )
    _non_negative(r, "workers", where="rollout")
    check_ranks(c)
    o = c.optimizer
    if o.lr <= 0:
        raise ConfigError(f"optimizer.lr must be > 0, not {o.lr}")
    if len(o.betas) != 2 or not all(0.0 <= b < 1.0 for b in o.betas):
        raise ConfigError(f"optimizer.betas must be two numbers in [0, 1), not {o.betas}")
    if o.eps <= 0 or o.weight_decay < 0:
        raise ConfigError("optimizer.eps must be > 0 and optimizer.weight_decay ≥ 0")
    if o.max_grad_norm is not None and o.max_grad_norm <= 0:
        raise ConfigError(f"optimizer.max_grad_norm must be > 0 or null, not {o.max_grad_norm}")
    _non_negative(o, "warmup_steps", where="optimizer")
    _non_negative(c.dynamic_sampling, "max_refills", where="dynamic_sampling")
    if c.async_.max_staleness < 0:
        raise ConfigError(f"async.max_staleness must be ≥ 0, not {c.async_.max_staleness}")
    _non_negative(c.checkpoint, "every", where="checkpoint")
    _positive(c.checkpoint, "keep", where="checkpoint")
    if not c.checkpoint.dir.strip() or not c.metrics.dir.strip():
        raise ConfigError("checkpoint.dir and metrics.dir must be non-empty paths")
    if not _DEVICE.fullmatch(c.model.device):
        raise ConfigError(f"model.device must be auto, cpu, cuda or cuda:N, not {c.model.device!r}")
    if c.model.sync_check_tol is not None and not c.model.sync_check_tol > 0:
        raise ConfigError(f"model.sync_check_tol must be > 0 or null, not {c.model.sync_check_tol}")
    # vLLM's kept sets are recovered from its top TOP_LOGPROBS log-probs (envgym.models.kept):
    # exact for any top_k below that, and for top_p wherever the kept set fits (a token whose
    # set does not is recorded unknown, which the trainer refuses unless unknown_kept: full)
    if c.model.engine == "vllm" and c.keep_sampling_mask and r.top_k >= TOP_LOGPROBS:
        raise ConfigError(
            f"rollout.top_k {r.top_k} with model.engine 'vllm': its kept sets are recovered from "
            f"the top {TOP_LOGPROBS} log-probs, so the keep sampling mask is exact only for "
            f"top_k < {TOP_LOGPROBS}; use top_k < {TOP_LOGPROBS} or 0, or model.engine: local"
        )
    if c.model.engine == "vllm" and c.model.vllm_url:  # the folder's config.json says if MoE
        refuse_moe_without_routes(c, config_is_moe(c.model.path))


def check_ranks(c: TrainConfig) -> None:
    """The ``trainer`` section: a world of ranks needs an explicit backend."""
    t = c.trainer
    _positive(t, "world_size", "nodes", where="trainer")
    if t.world_size % t.nodes:
        raise ConfigError(
            f"trainer.world_size ({t.world_size}) must be a multiple of trainer.nodes"
        )
    if t.backend not in (None, "gloo", "nccl"):
        raise ConfigError(f"trainer.backend must be gloo, nccl or null, not {t.backend!r}")
    if t.world_size > 1 and t.backend is None:
        raise ConfigError(
            f"trainer.world_size {t.world_size} needs trainer.backend: gloo (CPU) or nccl (GPU)"
        )
    if c.rollout.workers and c.model.engine != "local":
        raise ConfigError("rollout.workers (Ray rollout workers) run model.engine: local only")


def overlong_scope(c: TrainConfig) -> Literal["turn", "sample"] | None:
    """What overlong masking masks in this run: ``sample`` (whole episodes), ``turn`` (the turns
    cut) or None (off).  ``auto`` is ``sample`` for multi-turn runs (``rollout.max_turns > 1``):
    there the turns before the cut would otherwise train on the reward of an episode that never
    finished; a single-turn episode is one turn, so ``turn`` already masks all of it."""
    if not c.overlong_mask:
        return None
    if c.overlong_scope == "auto":
        return "sample" if c.rollout.max_turns > 1 else "turn"
    return c.overlong_scope


def refuse_moe_without_routes(c: TrainConfig, is_moe: bool | None) -> None:
    """MoEWithoutRoutesError for an MoE policy (``is_moe``; None = not known yet) on a server the
    user started, unless ``model.allow_moe_without_keep_routing``.  Called when the config loads
    (``model.path`` a folder: its config.json says) and again once the model is loaded."""
    m = c.model
    if not is_moe or m.engine != "vllm" or not m.vllm_url or m.allow_moe_without_keep_routing:
        return
    raise MoEWithoutRoutesError(
        f"model.path {m.path!r} is a mixture of experts and model.vllm_url names a server the "
        "trainer did not start: nothing says it returns expert routes, and without them keep "
        "routing (DeepSeek-V3.2 §3.1) is off and routing_flip_rate disappears. Use "
        "model.engine: local, or set model.allow_moe_without_keep_routing: true to train "
        "without them (docs/TRAINER.md)"
    )


_CONFIG_JSON_MAX = 1 << 20  # a model's config.json is a few KiB; more is not one


def config_is_moe(path: str) -> bool | None:
    """Whether the HF folder ``path`` holds an MoE model, from its config.json alone (no weights,
    no network): True/False, or None when it cannot tell (a hub id, no readable config)."""
    import json

    file = Path(path) / "config.json"
    try:
        with file.open("rb") as fh:
            raw = fh.read(_CONFIG_JSON_MAX + 1)
    except OSError:
        return None
    if len(raw) > _CONFIG_JSON_MAX:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    nested = data.get("text_config")  # multimodal configs keep the LM's keys one level down
    for d in (data, nested if isinstance(nested, dict) else {}):
        for key in ("num_local_experts", "num_experts", "n_routed_experts"):
            n = d.get(key)
            if isinstance(n, int) and not isinstance(n, bool) and n > 1:
                return True
    return False


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def resolve_device(spec: str) -> torch.device:
    """The torch device ``model.device`` names on this machine; ConfigError when it names a
    GPU this torch cannot use (so a run asked for a GPU never trains on the CPU by surprise).

    ``auto`` takes the first CUDA device when there is one: the policy update is the costliest
    part of a step, and the local engine follows the model it copies.
    """
    if not _DEVICE.fullmatch(spec):
        raise ConfigError(f"model.device must be auto, cpu, cuda or cuda:N, not {spec!r}")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(
                f"model.device is {spec!r} but torch {torch.__version__} sees no CUDA device "
                "(a CPU-only build, or no driver); use auto or cpu"
            )
        if device.index is not None and device.index >= count:
            raise ConfigError(f"model.device is {spec!r} but torch sees {count} CUDA device(s)")
    return device


def _positive(obj: Any, *names: str, where: str = "") -> None:
    for name in names:
        value = getattr(obj, name)
        if value <= 0:
            raise ConfigError(f"{where + '.' if where else ''}{name} must be > 0, not {value}")


def _non_negative(obj: Any, *names: str, where: str = "") -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 0:
            raise ConfigError(f"{where + '.' if where else ''}{name} must be ≥ 0, not {value}")
