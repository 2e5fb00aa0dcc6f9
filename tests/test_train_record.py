"""What the trainer reads from the rollout engine's record: per-turn sampling parameters and
policy version for any backend (a plain Turn says neither), and the export of record v2."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from test_rollout_doubles import ScriptedPolicy
from test_train_loop import parity_bundle

from envgym.bundle_env import BundleEnv
from envgym.policy import SamplingParams, Turn
from envgym.record import TurnInfo
from envgym.rollout import EpisodeSpec, RolloutBudget, rollout
from envgym.store.export import episode_row


class SyncedDuringTheTurn(ScriptedPolicy):
    """A plain-Turn backend whose weights are replaced (version bumped) while a turn samples."""

    async def act(self, session: str, messages: Any, tools: Any, params: SamplingParams) -> Turn:
        turn = await super().act(session, messages, tools, params)
        self.version += 1  # a weight sync landed after this turn was asked for
        return turn


def test_plain_turns_record_the_params_and_version_they_were_asked_with(tmp_path: Path) -> None:
    bundle = parity_bundle(tmp_path / "b", tasks=1)
    policy = SyncedDuringTheTurn(script=lambda task, sample: ["not yet", "done"])
    policy.version = 3
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=5, max_tokens=3)
    (result,) = rollout(
        policy,
        functools.partial(BundleEnv, bundle, sandbox="inprocess"),
        [EpisodeSpec("t0", 0, seed=1)],
        concurrency=1,
        params=params,
        budget=RolloutBudget(max_turns=1, max_tokens=100),
    )
    assert result.error is None, result.error_message
    (segment,) = result.record.segments
    assert segment.turn_info == [
        TurnInfo(temperature=0.7, top_p=0.9, top_k=5, policy_version=3, finish_reason="stop")
    ]
    assert policy.version == 4  # the turn was sampled across the sync; it records the old one

    row = episode_row("ev", "m", result)["segments"][0]
    assert row["turn_info"] == [
        {
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 5,
            "policy_version": 3,
            "finish_reason": "stop",
            "logprob_kind": "sampled",
        }
    ]
    mask = row["loss_mask"]
    # a plain Turn: full-vocabulary log-probs not reported (null, not NaN: valid JSON) and kept
    # sets unknown
    assert all(f is None for f, m in zip(row["full_logprobs"], mask) if m)
    assert json.loads(row["kept"]) == ["unknown" if m else None for m in mask]
    json.loads(json.dumps(row, allow_nan=False))  # no NaN anywhere in the row
    assert not any(isinstance(x, float) and math.isnan(x) for x in row["logprobs"])
