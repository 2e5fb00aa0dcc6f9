"""envgym/trainer/batch.py: groups, dynamic sampling, overlong masking, padding/shift,
microbatches."""

from __future__ import annotations

import math

import pytest
import torch

from envgym.record import EpisodeRecord, Segment, TurnInfo
from envgym.rollout import EpisodeResult
from envgym.trainer.batch import (
    Group,
    collate,
    group_results,
    nonfinite_rewards,
    overlong_loss_mask,
    samples_from_groups,
    split_informative,
    split_minibatches,
)
from envgym.trainer.microbatches import balanced_microbatches


def _segment() -> Segment:
    """ids 10..16; sampled: 13, 14 (turn 1, stop, v3) and 16 (turn 2, length, v2)."""
    seg = Segment()
    seg.add_context([10, 11, 12])
    seg.add_sampled(
        [13, 14],
        [-0.5, -0.25],
        full_logprobs=[-0.6, -0.3],
        kept=[None, [14, 20]],
        info=TurnInfo(finish_reason="stop", policy_version=3),
    )
    seg.add_context([15])
    seg.add_sampled(
        [16], [-1.0], kept=[None], info=TurnInfo(finish_reason="length", policy_version=2)
    )
    return seg


def _result(
    task: str,
    sample: int,
    reward: float,
    *,
    error: str | None = None,
    segments: list[Segment] | None = None,
) -> EpisodeResult:
    record = EpisodeRecord(
        segments=segments if segments is not None else [_segment()], policy_version=7, reward=reward
    )
    return EpisodeResult(task_id=task, sample=sample, reward=reward, error=error, record=record)


def test_group_results_leaves_out_errored_episodes_and_groups_left_with_one() -> None:
    results = [
        _result("a", 1, 1.0),
        _result("a", 0, 0.0),
        _result("a", 2, 0.0, error="env"),
        _result("b", 0, 1.0),
        _result("b", 1, 0.0, error="policy"),
    ]
    groups, dropped = group_results(results)
    assert [g.task_id for g in groups] == ["a"]
    assert [r.sample for r in groups[0].results] == [0, 1]  # ordered by sample
    assert dropped == 3  # two errored + b's lone survivor


def test_split_informative_drops_all_equal_groups_and_counts_them() -> None:
    groups = [
        Group("mixed", [_result("mixed", 0, 1.0), _result("mixed", 1, 0.0)]),
        Group("solved", [_result("solved", 0, 1.0), _result("solved", 1, 1.0)]),
        Group("failed", [_result("failed", 0, 0.0), _result("failed", 1, 0.0)]),
        Group("partial", [_result("partial", 0, 0.5), _result("partial", 1, 0.5)]),
    ]
    kept, correct, wrong = split_informative(groups)
    assert [g.task_id for g in kept] == ["mixed"]
    assert (correct, wrong) == (1, 2)


def test_nonfinite_rewards_are_named() -> None:
    groups = [
        Group("a", [_result("a", 0, math.nan), _result("a", 1, 1.0)]),
        Group("b", [_result("b", 0, math.inf), _result("b", 1, 0.0)]),
    ]
    assert nonfinite_rewards(groups) == ["a#0 = nan", "b#0 = inf"]
    assert nonfinite_rewards(groups[:0]) == []


def test_overlong_mask_zeroes_only_turns_cut_by_length() -> None:
    seg = _segment()
    assert seg.loss_mask == [0, 0, 0, 1, 1, 0, 1]
    assert overlong_loss_mask(seg) == [0, 0, 0, 1, 1, 0, 0]
    assert seg.loss_mask == [0, 0, 0, 1, 1, 0, 1]  # the record is not modified


def test_samples_carry_advantage_oldest_version_and_masks() -> None:
    g = Group("t", [_result("t", 0, 1.0), _result("t", 1, 0.0)])
    adv = torch.tensor([[0.5, -0.5]], dtype=torch.float64)
    samples = samples_from_groups([g], adv, overlong_mask=True)
    assert [s.advantage for s in samples] == [0.5, -0.5]
    assert [s.reward for s in samples] == [1.0, 0.0]
    assert all(s.policy_version == 2 for s in samples)  # min over turns (3, 2)
    assert samples[0].loss_mask == [0, 0, 0, 1, 1, 0, 0]
    assert samples[0].trained_tokens == 2
    unmasked = samples_from_groups([g], adv, overlong_mask=False)
    assert unmasked[0].trained_tokens == 3


def test_a_segment_with_nothing_left_to_train_is_skipped() -> None:
    seg = Segment()
    seg.add_context([1, 2])
    seg.add_sampled([3, 4], [-1.0, -1.0], kept=[None, None], info=TurnInfo(finish_reason="length"))
    g = Group("t", [_result("t", 0, 1.0, segments=[seg]), _result("t", 1, 0.0)])
    samples = samples_from_groups([g], torch.tensor([[1.0, -1.0]]))
    assert [s.reward for s in samples] == [0.0]


def test_samples_from_groups_rejects_a_mismatched_advantage_tensor() -> None:
    g = Group("t", [_result("t", 0, 1.0), _result("t", 1, 0.0)])
    with pytest.raises(ValueError, match="2 groups|1 groups"):
        samples_from_groups([g], torch.zeros(2, 2))
    with pytest.raises(ValueError, match="columns"):
        samples_from_groups([g], torch.zeros(1, 1))


def test_collate_shifts_pads_and_keeps_kept_sets_of_trained_positions_only() -> None:
    g = Group("t", [_result("t", 0, 1.0)])
    short = Segment()
    short.add_context([30])
    short.add_sampled([31, 32], [-2.0, -3.0], kept=[[31, 40, 41], None], info=TurnInfo())
    g.results.append(_result("t", 1, 0.0, segments=[short]))
    s = samples_from_groups(
        [g], torch.tensor([[0.25, -0.25]], dtype=torch.float64), overlong_mask=False
    )
    b = collate(s, pad_id=99, dtype=torch.float64)
    assert b.input_ids.tolist() == [
        [10, 11, 12, 13, 14, 15],
        [30, 31, 32, 99, 99, 99][:2] + [99] * 4,
    ]
    assert b.targets.tolist() == [[11, 12, 13, 14, 15, 16], [31, 32, 99, 99, 99, 99]]
    assert b.attention_mask.tolist() == [[1] * 6, [1, 1, 0, 0, 0, 0]]
    assert b.mask.tolist() == [[0, 0, 1, 1, 0, 1], [1, 1, 0, 0, 0, 0]]
    assert b.engine_logp.tolist() == [[0, 0, -0.5, -0.25, 0, -1.0], [-2.0, -3.0, 0, 0, 0, 0]]
    # trained positions row-major: 13, 14, 16 | 31, 32 → kept sets None, {14,20}, None, {31,40,41}, None
    assert b.kept_ids.tolist() == [
        [-1, -1, -1],
        [14, 20, -1],
        [-1, -1, -1],
        [31, 40, 41],
        [-1, -1, -1],
    ]
    assert b.kept_rows.tolist() == [False, True, False, True, False]
    assert b.advantages.tolist() == [0.25, -0.25]
    assert b.rewards.tolist() == [1.0, 0.0]
    assert b.routes is None and b.old_logp is None
    assert b.tokens == 5


def test_collate_aligns_routes_with_inputs_and_pads_with_minus_one() -> None:
    seg = _segment()
    seg.fill_routes(torch.arange(6 * 2 * 2).view(6, 2, 2))  # positions 0..5 fed, 6 never
    g = Group("t", [_result("t", 0, 1.0, segments=[seg])])
    s = samples_from_groups([g], torch.tensor([[1.0]]), overlong_mask=False)
    b = collate(s)
    assert b.routes is not None and b.routes.shape == (1, 6, 2, 2)
    assert torch.equal(b.routes[0], torch.arange(24).view(6, 2, 2))


def test_collate_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        collate([])
    g = Group("t", [_result("t", 0, 1.0)])
    (s,) = samples_from_groups([g], torch.tensor([[1.0]]))
    s.engine_logp = s.engine_logp[:-1]
    with pytest.raises(ValueError, match="6 log-probs"):
        collate([s])
    seg = _segment()
    seg.fill_routes(torch.zeros(6, 1, 2, dtype=torch.long))
    routed = samples_from_groups(
        [Group("t", [_result("t", 0, 1.0, segments=[seg])])], torch.tensor([[1.0]])
    )
    dense = samples_from_groups([g], torch.tensor([[1.0]]))
    with pytest.raises(ValueError, match="mixed"):
        collate(routed + dense)
    seg = _segment()
    seg.add_sampled([17], [-1.0], kept=["unknown"], info=TurnInfo())
    unknown = samples_from_groups(
        [Group("t", [_result("t", 0, 1.0, segments=[seg])])], torch.tensor([[1.0]])
    )
    with pytest.raises(ValueError, match="unknown"):
        collate(unknown)
    # trained: 13, 14, 17 (16 is overlong-masked); the unknown set of 17 → full vocabulary
    assert collate(unknown, unknown_kept="full").kept_rows.tolist() == [False, True, False]


@pytest.mark.parametrize(
    ("lengths", "budget"),
    [([5, 3, 8, 1, 7, 2, 6], 12), ([10] * 6, 20), ([50, 1, 1, 1], 20), ([4, 4, 4, 4, 4], 100)],
)
def test_balanced_microbatches_fit_the_budget_and_cover_every_row_once(
    lengths: list[int], budget: int
) -> None:
    bins = balanced_microbatches(lengths, budget)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    for b in bins:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= budget


def test_balanced_microbatches_balance_tokens() -> None:
    # 8, 7, 6, 5 into two bins of ≤ 2 × 8: longest first onto the lighter bin → {8, 5}, {7, 6}
    assert balanced_microbatches([8, 7, 6, 5], 16) == [[0, 3], [1, 2]]
    assert balanced_microbatches([3], 1) == [[0]]  # longer than the budget: alone
    assert balanced_microbatches([], 8) == []
    with pytest.raises(ValueError, match="max_tokens"):
        balanced_microbatches([1], 0)
    with pytest.raises(ValueError, match="lengths"):
        balanced_microbatches([0, 2], 4)


def test_split_minibatches_is_a_seeded_partition() -> None:
    a = split_minibatches(10, 3, torch.Generator().manual_seed(1))
    b = split_minibatches(10, 3, torch.Generator().manual_seed(1))
    assert a == b
    assert sorted(i for part in a for i in part) == list(range(10))
    assert sorted(len(p) for p in a) == [3, 3, 4]
    with pytest.raises(ValueError, match="cannot split"):
        split_minibatches(2, 3, torch.Generator())
