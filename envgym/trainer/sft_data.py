"""Cold-start SFT data (DeepSeek-V3.2 §3.2.2): examples, the held-out split, store episodes.

An :class:`SFTExample` is one token sequence exactly as the local engine sees and samples it,
with ``loss_mask`` 1 on the assistant (policy) tokens only and 0 on system/user/tool tokens
and template glue.  Two sources make them:

* **gold replays** (``envgym.trainer.sft_gold.gold_examples``): each task's gold solution written as
  the model's own tool-call text and played through the same env the evaluation builds;
* **rejection-sampled policy episodes** (:func:`store_examples`): episodes of a model in the
  store (``envgym eval`` writes them) with reward 1, trained on as they were sampled (their
  record's ids and mask; turns cut by the token limit are masked out).

**The split** (:class:`HeldOut`): held-out bundles (by content hash, so a copy of a held-out
bundle elsewhere is held out too), held-out task ids (in any bundle) and the prompts of every
held-out bundle's tasks (a training task with the same prompt as a held-out one is dropped).
Nothing held out ever becomes an example; what was dropped is counted, and ``to_dict`` is
written next to the trained model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envgym import registry
from envgym.bundle import Bundle, load_bundle
from envgym.record import Segment

Source = Literal["gold", "store"]


@dataclass(frozen=True)
class SFTExample:
    """One training sequence: ``token_ids: [T]``, ``loss_mask: [T]`` (1 = policy token)."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    source: Source
    bundle_hash: str
    task_id: str

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.loss_mask):
            raise ValueError(
                f"example {self.task_id!r}: {len(self.token_ids)} ids but "
                f"{len(self.loss_mask)} mask entries"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError(f"example {self.task_id!r}: the loss mask must hold only 0 and 1")
        if not any(self.loss_mask[1:]):
            raise ValueError(f"example {self.task_id!r} has no policy token to train on")

    @property
    def policy_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_ids": list(self.token_ids),
            "loss_mask": list(self.loss_mask),
            "source": self.source,
            "bundle_hash": self.bundle_hash,
            "task_id": self.task_id,
        }


def _prompt_key(prompt: str) -> str:
    return " ".join(prompt.split())


@dataclass(frozen=True)
class HeldOut:
    """What training never sees: bundles (content hashes), task ids, and held-out prompts."""

    bundles: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()
    prompts: frozenset[str] = frozenset()
    specs: tuple[str, ...] = ()  # the bundle specs as given, for the record

    @classmethod
    def resolve(cls, bundles: Sequence[str | Path] = (), tasks: Sequence[str] = ()) -> HeldOut:
        """``bundles``: env ids, bundle directories or ``sha256:…`` content hashes."""
        hashes: set[str] = set()
        prompts: set[str] = set()
        for spec in bundles:
            text = str(spec)
            if text.startswith("sha256:"):
                hashes.add(text)
                continue
            bundle = open_target(text, what="held-out bundle")
            hashes.add(bundle.manifest.content_hash)
            prompts.update(_prompt_key(t.prompt) for t in bundle.tasks)
        for task in tasks:
            if not isinstance(task, str) or not task.strip():
                raise ValueError(f"a held-out task must be a non-empty task id, not {task!r}")
        return cls(
            frozenset(hashes),
            frozenset(t.strip() for t in tasks),
            frozenset(prompts),
            tuple(str(b) for b in bundles),
        )

    def reason(self, bundle_hash: str, task_id: str, prompt: str | None) -> str | None:
        """Why ``task_id`` of bundle ``bundle_hash`` is held out, or None when it may be used."""
        if bundle_hash in self.bundles:
            return "held_out_bundle"
        if task_id in self.tasks:
            return "held_out_task"
        if prompt is not None and _prompt_key(prompt) in self.prompts:
            return "held_out_prompt"
        return None

    def check_sources(self, bundles: Sequence[Bundle]) -> None:
        """A training source that is itself held out is a configuration error, not a filter."""
        for bundle in bundles:
            if bundle.manifest.content_hash in self.bundles:
                raise ValueError(
                    f"bundle {bundle.manifest.name!r} ({bundle.root}) is held out; it cannot also "
                    "be a training source"
                )

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundles": sorted(self.bundles),
            "bundle_specs": list(self.specs),
            "tasks": sorted(self.tasks),
            "prompts": len(self.prompts),
        }


def open_target(target: str | Path, *, what: str = "target") -> Bundle:
    """The bundle behind an env id or bundle directory; a clear ValueError otherwise."""
    try:
        return load_bundle(registry.resolve_bundle(target))
    except (KeyError, ValueError, OSError) as err:
        raise ValueError(f"{what} {str(target)!r}: {str(err).strip(chr(34))}") from None


@dataclass
class DataReport:
    """What a data build did: tasks seen, episodes kept, and why the others were left out."""

    tasks: int = 0
    episodes: int = 0  # kept episodes
    examples: int = 0
    tokens: int = 0
    policy_tokens: int = 0
    dropped: Counter[str] = field(default_factory=Counter)

    def add(self, examples: Sequence[SFTExample]) -> None:
        self.episodes += 1
        self.examples += len(examples)
        self.tokens += sum(len(e.token_ids) for e in examples)
        self.policy_tokens += sum(e.policy_tokens for e in examples)

    def merge(self, other: DataReport) -> DataReport:
        return DataReport(
            self.tasks + other.tasks,
            self.episodes + other.episodes,
            self.examples + other.examples,
            self.tokens + other.tokens,
            self.policy_tokens + other.policy_tokens,
            self.dropped + other.dropped,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "episodes": self.episodes,
            "examples": self.examples,
            "tokens": self.tokens,
            "policy_tokens": self.policy_tokens,
            "dropped": dict(sorted(self.dropped.items())),
        }


def segment_examples(
    segments: Sequence[Segment], *, source: Source, bundle_hash: str, task_id: str
) -> list[SFTExample]:
    """One example per record segment (a segment is one token sequence, envgym.record).

    Turns cut by the token limit (``finish_reason == "length"``) are masked out: the policy
    would be taught to stop mid-thought (the same turns GRPO masks as overlong).
    """
    out = []
    for segment in segments:
        mask = list(segment.loss_mask)
        for (start, end), info in zip(segment.turns, segment.turn_info):
            if info.finish_reason == "length":
                mask[start:end] = [0] * (end - start)
        if any(mask[1:]):
            ids = tuple(segment.token_ids)
            out.append(SFTExample(ids, tuple(mask), source, bundle_hash, task_id))
    return out


# -- rejection-sampled policy episodes from the store ------------------------------------------


def store_examples(
    store: Any,
    held_out: HeldOut,
    *,
    models: Sequence[str],
    vocab_size: int,
    keys: Sequence[str] | None = None,
) -> tuple[list[SFTExample], DataReport]:
    """Successful (reward 1) episodes of ``models`` (evaluation ``model`` specs) in ``store``.

    Token ids must come from the model being trained (its tokenizer): ``models`` names whose
    episodes are acceptable, and an id ≥ ``vocab_size`` is refused.  ``keys``: only these
    evaluations.  Identical token sequences are kept once.
    """
    if not models:
        raise ValueError("name the model(s) whose episodes may be trained on (models=...)")
    wanted = set(keys) if keys is not None else None
    report = DataReport()
    examples: list[SFTExample] = []
    seen: set[tuple[int, ...]] = set()
    for ev in store.evaluations():
        if ev.model not in models or (wanted is not None and ev.key not in wanted):
            continue
        prompts = {t["id"]: t.get("prompt") for t in store.tasks(ev.bundle_hash)}
        for result in store.episodes(ev.key):
            why = held_out.reason(ev.bundle_hash, result.task_id, prompts.get(result.task_id))
            if why is None and not result.passed:
                why = "not_passed"
            if why is None and not result.record.segments:
                why = "no_record"
            if why is not None:
                report.dropped[why] += 1
                continue
            made = segment_examples(
                result.record.segments,
                source="store",
                bundle_hash=ev.bundle_hash,
                task_id=result.task_id,
            )
            if any(max(e.token_ids) >= vocab_size for e in made):
                raise ValueError(
                    f"evaluation {ev.key} ({ev.model}) has token ids ≥ the vocabulary size "
                    f"{vocab_size}: its episodes were sampled by another tokenizer"
                )
            fresh = [e for e in made if e.token_ids not in seen]
            seen.update(e.token_ids for e in fresh)
            report.tasks += 1
            if not fresh:
                report.dropped["duplicate"] += 1
                continue
            report.add(fresh)
            examples.extend(fresh)
    return examples, report
