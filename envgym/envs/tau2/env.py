"""``Tau2Env``: one τ² domain's tasks as envgym episodes, scored by τ²'s own evaluator.

An episode follows τ²'s orchestrator (session.py): the agent sees τ²'s agent system prompt
(instructions + the domain policy) and the domain's tools, τ²'s default greeting, then the first
user turn.  The agent's tool calls run in τ²'s environment; a text reply goes to the user
simulator (simulator.py), whose own tool calls (telecom) run in τ² too.  The episode ends when
the user sends τ²'s stop/transfer/out-of-scope token, the agent sends ``###STOP###``, or τ²'s
error limit is reached; the reward is τ²'s ``evaluate_simulation`` with the task's reward basis.
``reset``'s ``info["noop_solvable"]`` is why a do-nothing agent also scores 1.0 on the task (τ²'s
known issue; envgym/envs/tau2/noop.py), else None.
Every user turn is recorded (``info["report"]["user_turns"]``): replaying them with
:class:`~envgym.envs.tau2.simulator.ReplayUser` reproduces the episode exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envgym.actions import NormalizedAction
from envgym.context import ContextManager
from envgym.context.view import ContextView
from envgym.core import Action, Env, Observation
from envgym.envs.tau2.link import Tau2Error, Tau2Link
from envgym.envs.tau2.noop_data import flagged_tasks
from envgym.envs.tau2.simulator import PolicyUser, UserModel, UserTurnError, user_seed
from envgym.envs.tau2.tasks import DOMAINS, domain_tasks, envgym_task_id
from envgym.episode import EpisodeCounters, counting
from envgym.keywords import EVAL_OPTIONS, init_keywords, refuse_unknown
from envgym.messages import assistant_message, env_message, tool_message
from envgym.parsers import get_parser
from envgym.step import GOES_ON, Outcome, run_step
from envgym.tokens import TokenCounter

MAX_USER_TOOL_STEPS = 10  # user tool-call turns in a row before the user must speak
_NOT_READ = NormalizedAction(assistant_message(None))  # an action after the user ended


class Tau2Env(Env):
    """τ² ``domain`` as an envgym env.  ``user`` is a :class:`UserModel` or a ``--model`` spec."""

    def __init__(self, domain: str, *, user: UserModel | str | None = None, link: Tau2Link | None = None,
                 parser: str = "hermes", native_tools: bool = False,
                 context: str | ContextManager = "thinking-retention", context_window: int | None = None,
                 tokenizer: Any = None, noop_flags: Mapping[str, str] | None = None,
                 **_eval_options: Any) -> None:  # fmt: skip
        # _eval_options: sandbox/time_budget_s that `envgym eval` passes every env; τ²'s tools
        # run in τ²'s own process, not in an envgym sandbox.  context/context_window/tokenizer
        # mean what they mean for BundleEnv: the prompt is rendered (and compacted) by the
        # context policy, and a prompt over the window truncates the episode.  Anything else
        # is a misspelling, refused here before τ²'s worker starts.
        refuse_unknown(_eval_options, [*init_keywords(type(self)), *EVAL_OPTIONS],
                       where=type(self).__name__)  # fmt: skip
        if domain not in DOMAINS:
            raise ValueError(f"unknown τ² domain {domain!r}; expected one of {', '.join(DOMAINS)}")
        self.domain = domain
        self.link = link or Tau2Link()
        self._owns_link = link is None  # a link passed in (shared by a check or a bench) stays open
        self._user_spec = user
        self._user: UserModel | None = (
            user if user is not None and not isinstance(user, str) else None
        )
        self.parser = get_parser(parser)
        self.native_tools = native_tools
        counters = counting(context, tokenizer, window=context_window is not None)
        self.counter: TokenCounter | None = counters.counter
        self.context = counters.context
        self._budget_counter = counters.budget
        self.context_window = context_window
        self.view = ContextView(self.context)
        self.ids = {envgym_task_id(t["id"]): t["id"] for t in domain_tasks(domain)}
        # τ² tasks a do-nothing agent passes (measured, shipped): flagged in every reset's info.
        # The measurement itself passes {} (it must run before any list exists).
        self.noop_flags = dict(flagged_tasks(domain) if noop_flags is None else noop_flags)
        self.tau2_id: str | None = None
        self.history: list[dict[str, Any]] = []
        self.user_turns: list[dict[str, Any]] = []
        self.episode = EpisodeCounters()
        self._done = True

    # -- the contract ------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        key = (options or {}).get("task")
        if key is None:
            key = sorted(self.ids)[int(self.np_random.integers(len(self.ids)))]
        tau2_id = self.ids.get(str(key)) or (str(key) if str(key) in self.ids.values() else None)
        if tau2_id is None:
            raise KeyError(f"τ² {self.domain} has no task {key!r}")
        self.tau2_id = tau2_id
        self.seed = 0 if seed is None else int(seed)
        if self._user is not None:
            self._user.end()  # a fresh user session per episode: its sampler is seeded anew
        if "user" in (options or {}):
            self._user = options["user"]  # type: ignore[index]
        start = self._call({"op": "reset", "task": tau2_id})
        self.tools = start["tools"]
        system = start["system"]
        if not self.native_tools:
            system = system + "\n\n" + self.parser.render_tools(self.tools)
        self.history = [{"role": "system", "content": system}, *start["messages"]]
        self.view.start(self.history)
        self.user_turns = []
        self.tool_results: list[dict[str, Any]] = []
        self.episode = EpisodeCounters()
        self._done = False
        self._ended: str | None = None
        if start["next"] == "user":
            self._ended = self._user_speaks()
        info = self._info({})
        info.update(task_id=envgym_task_id(tau2_id), tau2_task_id=tau2_id, domain=self.domain,
                    noop_solvable=self.noop_flags.get(tau2_id))  # fmt: skip
        return self._observe(), info

    def step(self, action: Action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        return run_step(self, action)  # _finish ends the episode

    def close(self) -> None:
        if self._user is not None:
            self._user.end()
        if self._owns_link:
            self.link.close()

    # -- episode mechanics -------------------------------------------------------------
    def _call(self, request: dict[str, Any]) -> Any:
        return self.link.call({**request, "domain": self.domain})

    # -- the step's hooks (envgym/step.py) ------------------------------------------------
    def _read(self, action: Action) -> NormalizedAction:
        if self._ended is not None:
            # The user ended the conversation in its first turn: the action is not read, yet
            # it was a turn.
            self.episode.turns += 1
            return _NOT_READ
        parsed = self.episode.read(action, self.parser)
        self.history.append(parsed.message)
        return parsed

    def _answer_turn(self, parsed: NormalizedAction) -> str | None:
        """τ² runs the turn's calls (or takes its text); how τ² ended the episode, if it did."""
        if self._ended is not None:
            return self._ended
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in parsed.tool_calls]
        broken = {e["id"]: e["function"]["name"] for e in parsed.message.get("tool_calls") or ()
                  if e["id"] not in {c["id"] for c in calls}}  # fmt: skip
        if parsed.problems and not calls:  # nothing τ² can run: the agent reads why, and retries
            for call_id, name in broken.items():
                self.history.append(
                    tool_message(call_id, name, "Error: this call could not be read")
                )
            self.history.append(
                env_message("Error: " + "; ".join(p.message for p in parsed.problems))
            )
            return None
        done = self._call(
            {"op": "turn", "role": "assistant", "content": parsed.content, "calls": calls}
        )
        self.episode.tool_calls += len(calls)
        names = {c["id"]: c["name"] for c in calls}
        for result in done["results"]:
            self._record_tool(result, names[result["id"]], "assistant")
        for call_id, name in broken.items():
            self.history.append(tool_message(call_id, name, "Error: this call could not be read"))
        return done["ended"]

    def _nudge(self, parsed: NormalizedAction) -> str | None:
        """A turn of text only goes to the user, who answers (or ends the episode)."""
        return self._user_speaks()

    def _budget_outcome(self) -> Outcome:
        # The only budget is the window: a next prompt that does not fit is τ²'s own
        # "max steps" ending, scored by τ² (0).
        window = self.context_window
        if (
            window is not None
            and self._budget_counter.count(self.view.rendered, self.tools) > window
        ):
            return Outcome("context_window")
        return GOES_ON

    def _finish(self, ended: str | None, outcome: Outcome) -> tuple[float, dict[str, Any]]:
        self._done = True
        if self._user is not None:
            self._user.end()
        termination = ended if ended is not None else "max_steps"
        report = self._call({"op": "finish", "termination": termination})
        report["user_turns"] = list(self.user_turns)
        report["tool_results"] = list(self.tool_results)
        report["tau2_task_id"] = self.tau2_id
        info = self._info({k.lower(): v for k, v in report["components"].items()})
        info["report"] = report
        return float(report["reward"]), info

    def _step_info(self, components: dict[str, float]) -> dict[str, Any]:
        return self._info(components)

    def _record_tool(self, result: dict[str, Any], name: str, requestor: str) -> None:
        self.tool_results.append({**result, "name": name, "requestor": requestor})
        if result["error"]:
            self.episode.errors["tool_error"] += 1
        if requestor == "assistant":
            self.history.append(tool_message(result["id"], name, result["content"]))

    def _user_speaks(self) -> str | None:
        """The user's turns until it speaks to the agent (or ends the episode)."""
        if self._user is None:
            spec = self._user_spec if isinstance(self._user_spec, str) else "smollm2"
            self._user = PolicyUser(spec)
        for _ in range(MAX_USER_TOOL_STEPS + 1):
            prompt = self._call({"op": "user_prompt"})
            seed = user_seed(self.seed, len(self.user_turns))
            turn = self._user.reply(prompt["messages"], prompt["tools"], seed)
            self.user_turns.append(
                {"seed": seed, "content": turn["content"], "calls": turn["calls"]}
            )
            done = self._call(
                {"op": "turn", "role": "user", "content": turn["content"], "calls": turn["calls"]}
            )
            names = {c["id"]: c["name"] for c in turn["calls"]}
            for result in done["results"]:
                self._record_tool(result, names[result["id"]], "user")
            if done["ended"] is not None:
                if turn["content"]:
                    self.history.append({"role": "user", "content": turn["content"]})
                return str(done["ended"])
            if not turn["calls"]:
                self.history.append({"role": "user", "content": turn["content"]})
                return None
        return "user_error"  # τ²: a user that never speaks to the agent is a user error

    def _observe(self) -> Observation:
        return {"messages": self.view.render(self.history, self.tools), "tools": self.tools}

    def _info(self, components: dict[str, float]) -> dict[str, Any]:
        # user_turns: every step, so a truncated episode can be replayed too (ReplayUser)
        return {**self.episode.info(self.view, components), "user_turns": list(self.user_turns)}


__all__ = ["Tau2Env", "Tau2Error", "UserTurnError"]
