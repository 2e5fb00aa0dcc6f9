"""One cold-start SFT run (DeepSeek-V3.2 §3.2.2): its checked config and its execution.

``envgym sft CONFIG.yaml`` (``configs/sft_smollm2.yaml``) and :func:`run_sft` share this:

* :class:`SFTRunConfig` — the model, the training targets (env ids / bundle directories whose
  gold solutions are replayed), the held-out split (bundles, task ids), optional store
  episodes (rejection sampling), the env options of the replay and the optimizer
  (:class:`envgym.trainer.sft.SFTConfig`).  :func:`load_run_config` / :func:`run_config_from_dict`
  check everything before anything runs: an unknown key or an impossible value raises one
  :class:`SFTConfigError` naming the dotted key.
* :func:`run_sft` — resolve the split, build the examples (``envgym.trainer.sft_gold``,
  ``envgym.trainer.sft_data.store_examples``), train (``envgym.trainer.sft.train_sft``), save an HF
  folder with ``sft_run.json`` (config, split, data report, per-step record).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.trainer.sft import (
    SFTConfig,
    SFTResult,
    SFTStepStats,
    load_trainable,
    save_policy,
    select_examples,
    train_sft,
)
from envgym.trainer.sft_data import DataReport, HeldOut, SFTExample, store_examples
from envgym.trainer.sft_gold import EnvOptions, gold_examples


class SFTConfigError(ValueError):
    """An SFT config that cannot run; the message names the offending key."""


@dataclass(frozen=True)
class StoreSource:
    """Rejection-sampled episodes: reward-1 episodes of ``models`` in the store at ``db``."""

    db: str | None = None  # SQLAlchemy URL; None = no store episodes
    models: tuple[str, ...] = ()  # the eval ``model`` specs whose episodes may be used
    keys: tuple[str, ...] | None = None  # only these evaluations


@dataclass(frozen=True)
class SFTRunConfig:
    train: tuple[str, ...]  # env ids or bundle directories (gold replays)
    out: str
    model: str = "smollm2"
    held_out_bundles: tuple[str, ...] = ()
    held_out_tasks: tuple[str, ...] = ()
    limit: int | None = None  # gold tasks per training target
    max_turn_tokens: int | None = 256  # drop gold episodes with a longer turn (eval --max-tokens)
    max_turns: int | None = None  # drop gold episodes of more turns (eval --max-turns)
    env: EnvOptions = EnvOptions()
    store: StoreSource = StoreSource()
    sft: SFTConfig = field(default_factory=SFTConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- reading and checking ------------------------------------------------------------------------

_SECTIONS = {
    "model": str,
    "out": str,
    "train": list,
    "held_out": dict,
    "data": dict,
    "store": dict,
    "sft": dict,
}
_HELD_OUT = {"bundles": list, "tasks": list}
_DATA = {
    "limit": (int, type(None)),
    "max_turn_tokens": (int, type(None)),
    "max_turns": (int, type(None)),
    "sandbox": str,
    "context": str,
    "parser": str,
}
_STORE = {"db": (str, type(None)), "models": list, "keys": (list, type(None))}
_SFT_TYPES: dict[str, Any] = {
    "epochs": int,
    "lr": (int, float),
    "warmup_ratio": (int, float),
    "min_lr_ratio": (int, float),
    "weight_decay": (int, float),
    "betas": list,
    "grad_clip": (int, float),
    "batch_tokens": int,
    "share_prefix": bool,
    "max_examples": (int, type(None)),
    "seed": int,
}


def _check_keys(data: Any, schema: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        what = where or "the config"
        raise SFTConfigError(f"{what} must be a mapping, not {type(data).__name__}")
    for key, value in data.items():
        dotted = f"{where}.{key}" if where else str(key)
        if key not in schema:
            raise SFTConfigError(f"unknown config key {dotted!r} (known here: {sorted(schema)})")
        want = schema[key]
        # bool is an int in Python; a YAML `yes` for a number is a mistake, not a 1.
        if isinstance(value, bool) and want is not bool and bool not in _as_tuple(want):
            raise SFTConfigError(f"{dotted} must be {_names(want)}, not a boolean")
        if not isinstance(value, want):
            raise SFTConfigError(f"{dotted} must be {_names(want)}, not {value!r}")
    return data


def _as_tuple(t: Any) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _names(t: Any) -> str:
    return " or ".join("null" if x is type(None) else x.__name__ for x in _as_tuple(t))


def _strings(value: list[Any], dotted: str) -> tuple[str, ...]:
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise SFTConfigError(f"{dotted} must hold non-empty strings, not {item!r}")
    return tuple(value)


def _path(spec: str) -> str:
    """``~`` and ``$VARS`` expanded; env ids pass through unchanged."""
    return os.path.expandvars(os.path.expanduser(spec))


def _split_dirs(spec: str, split: str) -> list[str]:
    """``spec`` itself, or, when it names a suite (docs/SUITES.md), the bundle directories of
    its ``split``: a suite trains on its training categories and holds out the others, as
    ``envgym train`` reads it."""
    from envgym.suite_manifest import SuiteError, split_dirs

    try:
        dirs = split_dirs(spec, None, split)
    except SuiteError as exc:
        raise SFTConfigError(str(exc)) from None
    return [spec] if dirs is None else [str(d) for d in dirs]


def run_config_from_dict(data: Any) -> SFTRunConfig:
    """Build and check an :class:`SFTRunConfig` from plain data (a parsed YAML mapping)."""
    _check_keys(data, _SECTIONS, "")
    for required in ("train", "out"):
        if required not in data:
            raise SFTConfigError(f"the config needs {required!r}")
    train = tuple(_path(t) for t in _strings(data["train"], "train"))
    if not train:
        raise SFTConfigError("train must name at least one env id or bundle directory")
    for spec in train:
        _split_dirs(spec, "train")  # a damaged suite is named here, before anything runs
    held = _check_keys(data.get("held_out", {}), _HELD_OUT, "held_out")
    d = _check_keys(data.get("data", {}), _DATA, "data")
    s = _check_keys(data.get("store", {}), _STORE, "store")
    o = _check_keys(data.get("sft", {}), _SFT_TYPES, "sft")
    for key in ("limit", "max_turn_tokens", "max_turns"):
        if d.get(key) is not None and d[key] < 1:
            raise SFTConfigError(f"data.{key} must be ≥ 1 or null, not {d[key]}")
    models = _strings(s.get("models", []), "store.models")
    held_bundles = held.get("bundles", [])
    for spec in _strings(held_bundles, "held_out.bundles"):
        _split_dirs(_path(spec), "held_out")
    if s.get("db") and not models:
        raise SFTConfigError("store.models must name the model(s) whose episodes may be used")
    try:
        options: dict[str, Any] = {k: tuple(v) if k == "betas" else v for k, v in o.items()}
        sft = SFTConfig(**options)
    except ValueError as err:
        raise SFTConfigError(str(err).replace("SFTConfig.", "sft.")) from None
    env = EnvOptions(**{k: d[k] for k in ("sandbox", "context", "parser") if k in d})
    model = data.get("model", "smollm2")
    if not model.strip():
        raise SFTConfigError("model must be 'smollm2' or an HF folder, not an empty string")
    return SFTRunConfig(
        train=train,
        out=_path(data["out"]),
        model=_path(model),
        held_out_bundles=tuple(_path(b) for b in _strings(held_bundles, "held_out.bundles")),
        held_out_tasks=_strings(held.get("tasks", []), "held_out.tasks"),
        limit=d.get("limit"),
        max_turn_tokens=d.get("max_turn_tokens", 256),
        max_turns=d.get("max_turns"),
        env=env,
        store=StoreSource(
            s.get("db"),
            models,
            None if s.get("keys") is None else _strings(s["keys"], "store.keys"),
        ),
        sft=sft,
    )


def load_run_config(path: str | Path) -> SFTRunConfig:
    """Read a YAML file into a checked :class:`SFTRunConfig` (SFTConfigError on any problem)."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as err:
        raise SFTConfigError(f"cannot read the config {str(p)!r}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise SFTConfigError(f"{p} is not valid YAML: {err}") from None
    return run_config_from_dict(data if data is not None else {})


def as_yaml_dict(cfg: SFTRunConfig) -> dict[str, Any]:
    """The config file form of ``cfg`` (``run_config_from_dict(as_yaml_dict(c)) == c``)."""
    sft = dataclasses.asdict(cfg.sft)
    sft["betas"] = list(sft["betas"])
    return {
        "model": cfg.model,
        "out": cfg.out,
        "train": list(cfg.train),
        "held_out": {"bundles": list(cfg.held_out_bundles), "tasks": list(cfg.held_out_tasks)},
        "data": {
            "limit": cfg.limit,
            "max_turn_tokens": cfg.max_turn_tokens,
            "max_turns": cfg.max_turns,
            "sandbox": cfg.env.sandbox,
            "context": cfg.env.context,
            "parser": cfg.env.parser,
        },
        "store": {
            "db": cfg.store.db,
            "models": list(cfg.store.models),
            "keys": None if cfg.store.keys is None else list(cfg.store.keys),
        },
        "sft": sft,
    }


_OVERRIDES = {
    "model": ("model",),
    "out": ("out",),
    "train": ("train",),
    "held_out_bundles": ("held_out", "bundles"),
    "held_out_tasks": ("held_out", "tasks"),
    "limit": ("data", "limit"),
    "max_turn_tokens": ("data", "max_turn_tokens"),
    "max_turns": ("data", "max_turns"),
}


def override(cfg: SFTRunConfig, **changes: Any) -> SFTRunConfig:
    """``cfg`` with command-line overrides (None = keep), re-checked like a config file.

    Keys: ``model, out, train, held_out_bundles, held_out_tasks, limit, max_turn_tokens,
    max_turns`` and
    ``sft_<field>`` for any :class:`~envgym.trainer.sft.SFTConfig` field.
    """
    data = as_yaml_dict(cfg)
    for key, value in changes.items():
        if value is None:
            continue
        if key.startswith("sft_"):
            data["sft"][key[4:]] = value
        elif key in _OVERRIDES:
            *parents, last = _OVERRIDES[key]
            node = data
            for parent in parents:
                node = node[parent]
            node[last] = list(value) if isinstance(value, tuple) else value
        else:
            raise SFTConfigError(f"unknown override {key!r} (known: {sorted(_OVERRIDES)})")
    return run_config_from_dict(data)


# -- running ---------------------------------------------------------------------------------------


@dataclass
class SFTRun:
    """What :func:`run_sft` did: the split, the data, the training, where the model went."""

    held_out: HeldOut
    report: DataReport
    examples: list[SFTExample]
    result: SFTResult | None = None
    out: Path | None = None


DataProgress = Callable[[str, int, int], None]  # (target, done, total)


def build_examples(
    cfg: SFTRunConfig, fmt: Any, *, vocab_size: int, progress: DataProgress | None = None
) -> SFTRun:
    """Resolve the split and build every example (gold replays, then store episodes)."""
    held_bundles = [d for spec in cfg.held_out_bundles for d in _split_dirs(spec, "held_out")]
    held = HeldOut.resolve(held_bundles, cfg.held_out_tasks)
    report, examples = DataReport(), []
    for target in (d for spec in cfg.train for d in _split_dirs(spec, "train")):
        step = (lambda d, n, t=target: progress(t, d, n)) if progress else None
        made, rep = gold_examples(
            target,
            fmt,
            held,
            env=cfg.env,
            limit=cfg.limit,
            max_turn_tokens=cfg.max_turn_tokens,
            max_turns=cfg.max_turns,
            progress=step,
        )
        examples += made
        report = report.merge(rep)
    if cfg.store.db:
        from envgym.store import Store

        made, rep = store_examples(
            Store(cfg.store.db),
            held,
            models=cfg.store.models,
            vocab_size=vocab_size,
            keys=cfg.store.keys,
        )
        examples += made
        report = report.merge(rep)
    return SFTRun(held, report, _fitting(examples, cfg.sft.batch_tokens, report))


def _fitting(examples: list[SFTExample], limit: int, report: DataReport) -> list[SFTExample]:
    """The examples of at most ``limit`` tokens; the others are counted as dropped.

    ``sft.batch_tokens`` is the run's memory bound: activations grow with the tokens through
    the model (~1.2 MB a token for SmolLM2-135M in float32, so one 17,814-token gold replay held
    21 GB), and an example longer than the bound would be a batch of its own beyond it.
    """
    fit: list[SFTExample] = []
    long: list[SFTExample] = []
    for e in examples:
        (fit if len(e.token_ids) <= limit else long).append(e)
    if long:
        report.dropped["longer_than_batch_tokens"] += len(long)
        report.examples -= len(long)
        report.tokens -= sum(len(e.token_ids) for e in long)
        report.policy_tokens -= sum(e.policy_tokens for e in long)
    return fit


def run_sft(
    cfg: SFTRunConfig,
    *,
    on_data: DataProgress | None = None,
    on_step: Callable[[SFTStepStats, int], None] | None = None,
) -> SFTRun:
    """Build the data, fine-tune ``cfg.model``, save it to ``cfg.out``; the run's record."""
    from envgym.models.chat import ChatFormat

    out = Path(cfg.out)
    if out.exists() and any(out.iterdir()) and not (out / "sft_run.json").is_file():
        raise FileExistsError(f"{out} is not empty and not an earlier SFT output; pick a new out")
    model, tokenizer = load_trainable(cfg.model)
    fmt = ChatFormat(tokenizer, cfg.env.parser)
    run = build_examples(
        cfg, fmt, vocab_size=model.get_output_embeddings().weight.shape[0], progress=on_data
    )
    if not run.examples:
        raise ValueError(f"no SFT examples: {run.report.to_dict()}")
    run.result = train_sft(model, run.examples, cfg.sft, on_step=on_step)
    trained = select_examples(run.examples, cfg.sft)  # the subset train_sft used
    meta = {
        "config": cfg.to_dict(),
        "held_out": run.held_out.to_dict(),
        "data": run.report.to_dict(),
        "trained_on": sorted({f"{e.bundle_hash}::{e.task_id}" for e in trained}),
        "training": run.result.to_dict(),
    }
    run.out = save_policy(model, tokenizer, out, meta)
    return run
