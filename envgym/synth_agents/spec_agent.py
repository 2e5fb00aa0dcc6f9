"""The spec-writing LLM agent: a model writes a declarative spec, the compiler does the rest.

The code-writing agent (:mod:`envgym.synth_agents.llm_agent`) asks a model for a database script,
tools, a solution and a verifier — code that must agree with itself, which small and mid-size
models rarely manage.  Here the model writes only what it is good at: the domain, as one JSON
spec (docs/ENV_SPEC.md).  Each round the reply is read (one JSON object, fenced or bare, bounded
in size and depth before it is parsed), validated with ``load_spec`` and, when refused, the
problem goes back to the model in words (the ``SpecError`` text: path and reason) — up to
``max_rounds`` replies.  A valid spec is compiled with ``compile_spec``: the shipped, reviewed
tools/solution/verifier templates, tasks proved in process.  A seed on which no strict task can
be drawn (``UnsolvableTask``) is redrawn like the procedural agent's; a spec that is unsolvable on
every redraw goes back to the model while rounds remain.

Everything the model says is hostile input: its reply is capped before any scan, its nesting is
measured without recursion, ``NaN``/``Infinity`` are refused, and the spec validator bounds the
rest (names are safe identifiers, no control characters in words, counts and lengths).  Nothing
the model writes is executed or pasted into code; it reaches the bundle as data.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from envgym.bundle import write_manifest
from envgym.bundle_limits import json_depth
from envgym.envs.procedural_kit.build import UnsolvableTask
from envgym.envs.procedural_kit.spec.compile import AGENT as COMPILER
from envgym.envs.procedural_kit.spec.compile import CompileError, compile_spec
from envgym.envs.procedural_kit.spec.model import MAX_DEPTH, MAX_SPEC_BYTES, Spec, SpecError
from envgym.envs.procedural_kit.spec.validate import load_spec
from envgym.policy import Policy, PolicyError, SamplingParams
from envgym.synth_agents import spec_prompts as prompts
from envgym.synth_agents.categories import normalize
from envgym.synth_agents.llm_agent import category_problem
from envgym.synth_agents.pipeline import Job, MakeOutcome
from envgym.synth_agents.procedural import REDRAW_STRIDE, REDRAWS

T = TypeVar("T")

# Room for a fence and a sentence around the largest spec the validator accepts; a longer reply
# is refused before any scan of it.
MAX_REPLY_CHARS = MAX_SPEC_BYTES + 4096
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)


class ReplyRejected(Exception):
    """A reply that yields no valid spec; ``kind`` names why (``prose``, ``too_large``,
    ``too_deep``, ``not_json``, ``not_object``, ``invalid_spec``)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def reply_json(reply: str) -> str:
    """The JSON text of a reply: the first ```json (or unlabelled) block holding an object, else
    the span from the first ``{`` to the last ``}``.  Bounded before anything scans it."""
    if len(reply) > MAX_REPLY_CHARS:
        raise ReplyRejected(
            "too_large", f"the reply is {len(reply)} characters, over {MAX_REPLY_CHARS}"
        )
    for m in _FENCE.finditer(reply):
        if m.group(1).lower() in ("json", "") and m.group(2).lstrip().startswith("{"):
            return m.group(2)
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0:
        raise ReplyRejected(
            "prose", "the reply holds no JSON object; reply with the spec in one ```json block"
        )
    # An object that never closes (a reply cut at its token limit) is still JSON to parse, so
    # the model hears where it broke off rather than that it wrote prose.
    return reply[start : end + 1] if end > start else reply[start:]


def parse_reply(reply: str) -> Spec:
    """A reply → a validated :class:`Spec`, or :class:`ReplyRejected` naming what was wrong."""
    text = reply_json(reply)
    if json_depth(text, stop_above=MAX_DEPTH) > MAX_DEPTH:
        raise ReplyRejected("too_deep", f"the JSON nests deeper than {MAX_DEPTH} levels")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge integers, NaN
        raise ReplyRejected("not_json", f"not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise ReplyRejected("not_object", f"the JSON is a {type(obj).__name__}, not an object")
    try:
        return load_spec(obj)
    except SpecError as exc:
        raise ReplyRejected("invalid_spec", str(exc)[:500]) from None


@dataclass(frozen=True)
class SpecConfig:
    max_rounds: int = 3  # replies per job: the first try plus revisions
    tasks_per_bundle: int = 5
    difficulties: Sequence[int] = (1, 2, 3, 4, 5)
    params: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=4096)
    )
    transcript_chars: int = 1500  # kept per message in the job record
    prompt: str = "full"  # spec_prompts.PROMPTS: "brief" for a model taught to write specs

    def __post_init__(self) -> None:
        if not 1 <= self.max_rounds <= 20:
            raise ValueError(f"--max-rounds must be in 1..20, not {self.max_rounds}")
        if not 1 <= self.tasks_per_bundle <= 200:
            raise ValueError(f"tasks per bundle must be in 1..200, not {self.tasks_per_bundle}")
        if not self.difficulties or any(d not in (1, 2, 3, 4, 5) for d in self.difficulties):
            raise ValueError(f"difficulties must be a subset of 1..5, not {self.difficulties}")
        if self.prompt not in prompts.PROMPTS:
            raise ValueError(f"spec prompt must be one of {prompts.PROMPTS}, not {self.prompt!r}")


@dataclass(frozen=True)
class Drawn:
    root: Path | None  # the compiled bundle; None when every draw was unsolvable
    seed: int  # the database seed of the last draw tried
    failures: tuple[str, ...]  # one line per unsolvable draw


def compile_redrawn(
    spec: Spec,
    out: Path,
    *,
    seed: int,
    n_tasks: int,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
    name: str | None = None,
) -> Drawn:
    """Compile ``spec`` into ``out``, redrawing the database as the procedural agent does when a
    seed gives no strict task (``REDRAWS`` more seeds, ``REDRAW_STRIDE`` apart).  ``out`` holds
    nothing after every draw failed or on a :class:`CompileError` (which propagates)."""
    failures: list[str] = []
    drawn = seed
    for redraw in range(REDRAWS + 1):
        drawn = seed + redraw * REDRAW_STRIDE
        shutil.rmtree(out, ignore_errors=True)  # a failed compile may leave files
        try:
            root = compile_spec(
                spec, out, seed=drawn, n_tasks=n_tasks, difficulties=difficulties, name=name
            )
        except UnsolvableTask as exc:
            failures.append(f"seed {drawn}: {str(exc)[:200]}")
            continue
        except CompileError:
            shutil.rmtree(out, ignore_errors=True)
            raise
        return Drawn(root, drawn, tuple(failures))
    shutil.rmtree(out, ignore_errors=True)
    return Drawn(None, drawn, tuple(failures))


class SpecAgent:
    """Synthesizes one bundle per job by asking ``policy`` for a spec; ``make`` may repeat."""

    def __init__(
        self, category: str, policy: Policy, *, model: str, config: SpecConfig = SpecConfig()
    ) -> None:
        self.category = category.strip()
        self.policy = policy
        self.model = model
        self.config = config
        words = normalize(self.category).replace(" ", "-")
        self.slug = "spec-" + (re.sub(r"[^a-z0-9-]", "", words)[:40].strip("-") or "category")
        self.name = f"llm-spec:{model}"
        # One loop for the policy's whole life (a local engine binds to the loop it first ran on).
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="envgym-spec-agent"
        )
        self._thread.start()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the agent's loop; its exception (any, interrupts too) is raised here."""

        async def carried() -> tuple[bool, Any]:
            try:
                return True, await coro
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                return False, exc

        ok, value = asyncio.run_coroutine_threadsafe(carried(), self._loop).result()
        if not ok:
            raise value
        return cast(T, value)

    def close(self) -> None:
        try:
            self._run(self.policy.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def make(self, job: Job, staging: Path) -> MakeOutcome:
        problem = category_problem(self.category)
        if problem is not None:
            return MakeOutcome(False, "category_rejected", problem)
        run = _Run(self, job)
        try:
            outcome = run.rounds(staging)
        except PolicyError as exc:
            outcome = MakeOutcome(False, "policy_error", str(exc)[:500], run.info())
        finally:
            self._run(self.policy.end_session(run.session))
        if not outcome.made:
            shutil.rmtree(staging, ignore_errors=True)  # nothing half-written is left behind
        return outcome


class _CompilerBug(RuntimeError):
    """A ``CompileError`` on a valid spec: the job is ``build_failed``."""


class _Run:
    """One job: the conversation, the rejections so far, what was compiled."""

    def __init__(self, agent: SpecAgent, job: Job) -> None:
        self.agent = agent
        self.job = job
        self.session = f"{job.key}/spec"
        self.round = 0
        self.rejections: list[dict[str, Any]] = []
        self.transcript: list[dict[str, str]] = []
        self.compiled: dict[str, Any] = {}

    def info(self) -> dict[str, Any]:
        return {
            "model": self.agent.model,
            "rounds": self.round,
            "rejections": self.rejections,
            **self.compiled,
            "transcript": self.transcript,
        }

    def rounds(self, staging: Path) -> MakeOutcome:
        config = self.agent.config
        messages: list[dict[str, Any]] = list(
            prompts.first_prompt(self.agent.category, config.prompt)
        )
        self._log(messages[-1])
        last = "the model gave no answer"
        unsolvable = False
        for self.round in range(1, config.max_rounds + 1):
            reply = self._reply(messages)
            try:
                spec = parse_reply(reply)
            except ReplyRejected as rejected:
                kind, detail = rejected.kind, rejected.detail
                unsolvable = False
            else:
                try:
                    failure = self._compile(spec, staging)
                except _CompilerBug as bug:
                    detail = f"CompileError on a valid spec: {str(bug)[:500]}"
                    return MakeOutcome(False, "build_failed", detail, self.info())
                if failure is None:
                    return MakeOutcome(True, info=self.info())
                unsolvable, kind, detail = failure
            self.rejections.append({"round": self.round, "kind": kind, "detail": detail[:300]})
            last = f"round {self.round}: {kind}: {detail}"
            if self.round < config.max_rounds:
                messages.append(prompts.feedback(kind, detail))
                self._log(messages[-1])
        reason = "spec_unsolvable" if unsolvable else "no_spec"
        return MakeOutcome(False, reason, last[:1000], self.info())

    def _compile(self, spec: Spec, staging: Path) -> tuple[bool, str, str] | None:
        """Compile ``spec`` into ``staging``; None when done, else (unsolvable?, kind, detail)."""
        config = self.agent.config
        offered = {level for t in spec.tasks for level in t.levels}
        wanted = [d for d in config.difficulties if d in offered]
        if not wanted:
            levels = sorted(config.difficulties)
            return False, "invalid_spec", f"tasks: no task template offers levels {levels}"
        shift = self.job.index % len(wanted)  # rotated per job so a run covers every level
        cycle = wanted[shift:] + wanted[:shift]
        try:
            drawn = compile_redrawn(
                spec,
                staging,
                seed=self.job.seed,
                n_tasks=config.tasks_per_bundle,
                difficulties=cycle,
                name=self.job.key,
            )
        except CompileError as exc:
            # A written task failed its proof: the compiler's fault, not the model's; nothing
            # the model could change would be a fair ask, so the job ends here.
            raise _CompilerBug(str(exc)) from exc
        if drawn.root is None:
            detail = prompts.UNSOLVABLE.format(
                draws=len(drawn.failures), detail=drawn.failures[-1][:200]
            )
            return True, "unsolvable", detail
        self.compiled = {
            "spec_name": spec.name,
            "database_seed": drawn.seed,
            "redraws": list(drawn.failures),
            "difficulties": list(cycle[: config.tasks_per_bundle]),
        }
        self._provenance(drawn.root, spec, drawn.seed)
        return None

    def _provenance(self, root: Path, spec: Spec, seed: int) -> None:
        """The compiler wrote itself as the agent; the bundle's maker is this model, in rounds."""
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        write_manifest(
            root,
            name=manifest["name"],
            category=self.agent.category[:200],
            description=manifest.get("description", ""),
            provenance={
                "agent": self.agent.name,
                "model": self.agent.model,
                "seed": self.job.seed,
                "rounds": self.round,
                "compiler": COMPILER,
                "database_seed": seed,
                "spec_name": spec.name,
            },
        )

    def _reply(self, messages: list[dict[str, Any]]) -> str:
        agent = self.agent
        turn = agent._run(agent.policy.act(self.session, messages, [], self._params()))
        content = turn.message.get("content") if turn.message is not None else None
        text = content if isinstance(content, str) else turn.text
        text = text if isinstance(text, str) else ""
        # The conversation keeps a capped copy: a huge reply must not be re-sent every round.
        messages.append({"role": "assistant", "content": text[:MAX_REPLY_CHARS]})
        self._log(messages[-1])
        return text

    def _params(self) -> SamplingParams:
        """The configured sampling, seeded per job and round: jobs must not repeat each other."""
        base = self.agent.config.params.seed or 0
        seed = (base * 1_000_003 + self.job.seed * 7_919 + self.round) % 2**31
        return replace(self.agent.config.params, seed=seed)

    def _log(self, message: dict[str, Any]) -> None:
        keep = self.agent.config.transcript_chars
        self.transcript.append(
            {"role": str(message.get("role")), "content": str(message.get("content"))[:keep]}
        )


def make_spec_agent(
    category: str,
    model: str,
    *,
    max_rounds: int = 3,
    max_tokens: int = 4096,
    temperature: float = 0.7,
    seed: int | None = None,
    tasks_per_bundle: int = 5,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
    prompt: str | None = None,
) -> SpecAgent:
    """The spec agent for ``envgym synth CATEGORY --agent llm --model M`` (``--model`` syntax:
    ``smollm2``, an ``http(s)://…/v1[#model]`` server, an HF folder).  ``prompt`` None: the one
    the model was taught on (:func:`taught_prompt`), else the full one."""
    from envgym.evaluate.models import load_policy, model_ref

    ref = model_ref(model)
    if ref.kind == "agent":
        raise ValueError(f"--model {model!r} is an agent baseline, not a language model")
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    config = SpecConfig(
        max_rounds=max_rounds,
        tasks_per_bundle=tasks_per_bundle,
        difficulties=tuple(difficulties),
        params=params,
        prompt=prompt or taught_prompt(model),
    )
    return SpecAgent(category, load_policy(ref), model=model, config=config)


def taught_prompt(model: str) -> str:
    """``brief`` for an HF folder written by ``envgym cold-start spec-writer`` (its
    ``sft_run.json`` names the prompt it was taught on), else ``full``.  The file is the user's:
    bounded, and anything unexpected in it means ``full``."""
    record = Path(model) / "sft_run.json"
    try:
        if not record.is_file() or record.stat().st_size > 4 * 1024 * 1024:
            return "full"
        taught = json.loads(record.read_text(encoding="utf-8")).get("spec_prompt")
    except (OSError, ValueError, AttributeError, RecursionError):
        return "full"
    return taught if taught in prompts.PROMPTS else "full"


__all__ = [
    "MAX_REPLY_CHARS",
    "ReplyRejected",
    "SpecAgent",
    "SpecConfig",
    "compile_redrawn",
    "make_spec_agent",
    "parse_reply",
    "reply_json",
    "taught_prompt",
]
