"""Group-relative advantages Â = R − mean(R) (optionally / std), expected values by hand."""

from __future__ import annotations

import math

import pytest
import torch

from envgym.trainer.advantages import finite_groups, group_advantages

F64 = torch.float64


def t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, atol=1e-12)


REWARDS = t([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])


def test_mean_centred_by_hand() -> None:
    adv = group_advantages(REWARDS)
    # row 0 mean 0.5; row 1 mean 0.75
    assert close(adv, t([[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]]))
    assert adv.dtype == F64


def test_std_normalized_by_hand() -> None:
    adv = group_advantages(REWARDS, normalize_std=True, eps=0.0)
    # row 0: population std = sqrt(4·0.25/4) = 0.5 → ±1
    # row 1: std = sqrt((3·0.0625 + 0.5625)/4) = sqrt(0.1875) = 0.4330127…
    s1 = math.sqrt(0.1875)
    assert close(adv, t([[1.0, -1.0, -1.0, 1.0], [0.25 / s1, 0.25 / s1, 0.25 / s1, -0.75 / s1]]))
    with_eps = group_advantages(REWARDS, normalize_std=True, eps=0.5)
    assert close(with_eps[0], t([0.5, -0.5, -0.5, 0.5]) / (0.5 + 0.5))


def test_equal_rewards_and_single_samples_give_zero_not_nan() -> None:
    for eps in (0.0, 1e-6):
        adv = group_advantages(t([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), normalize_std=True, eps=eps)
        assert torch.equal(adv, torch.zeros(2, 3, dtype=F64))
    assert torch.equal(
        group_advantages(t([[3.0], [-2.0]]), normalize_std=True), torch.zeros(2, 1, dtype=F64)
    )


def test_ragged_groups_with_valid_mask_by_hand() -> None:
    rewards = t([[1.0, 0.0, float("nan")], [2.0, 0.0, 1.0]])
    valid = torch.tensor([[True, True, False], [True, True, True]])
    adv = group_advantages(rewards, valid=valid)
    # row 0 over its 2 valid entries: mean 0.5; the padding entry gets 0
    assert close(adv, t([[0.5, -0.5, 0.0], [1.0, -1.0, 0.0]]))
    adv = group_advantages(rewards, valid=valid, normalize_std=True, eps=0.0)
    # row 1: std = sqrt((1 + 1 + 0)/3) = sqrt(2/3)
    assert close(adv, t([[1.0, -1.0, 0.0], [1 / math.sqrt(2 / 3), -1 / math.sqrt(2 / 3), 0.0]]))
    all_padding = group_advantages(t([[float("nan"), 1.0]]), valid=torch.tensor([[False, False]]))
    assert torch.equal(all_padding, torch.zeros(1, 2, dtype=F64))


def test_rows_sum_to_zero_and_are_shift_invariant() -> None:
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(5, 7, generator=g, dtype=F64)
    adv = group_advantages(rewards)
    assert torch.allclose(adv.sum(dim=1), torch.zeros(5, dtype=F64), atol=1e-12)
    assert torch.allclose(
        group_advantages(rewards + t([[10.0], [-3.0], [0.0], [1.0], [2.0]])), adv, atol=1e-12
    )


def test_integer_and_bool_rewards_are_promoted() -> None:
    adv = group_advantages(torch.tensor([[1, 0], [0, 0]]))
    assert adv.is_floating_point() and close(adv.to(F64), t([[0.5, -0.5], [0.0, 0.0]]))
    adv = group_advantages(torch.tensor([[True, False, False, False]]))
    assert close(adv.to(F64), t([[0.75, -0.25, -0.25, -0.25]]))


def test_finite_groups() -> None:
    rewards = t([[1.0, float("nan")], [0.0, 1.0], [float("inf"), 0.0]])
    assert finite_groups(rewards).tolist() == [False, True, False]
    valid = torch.tensor([[True, False], [True, True], [True, True]])
    assert finite_groups(rewards, valid).tolist() == [True, True, False]
    assert finite_groups(torch.tensor([[1, 0]])).tolist() == [True]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: group_advantages([[1.0, 0.0]]), TypeError, "rewards must be a torch.Tensor"),
        (lambda: group_advantages(t([1.0, 0.0])), ValueError, r"shape \[G, n\]"),
        (lambda: group_advantages(torch.zeros(2, 0)), ValueError, "n ≥ 1"),
        (lambda: group_advantages(REWARDS, eps=-1.0), ValueError, "eps"),
        (lambda: group_advantages(REWARDS, eps=float("nan")), ValueError, "eps"),
        (lambda: group_advantages(REWARDS, eps=True), ValueError, "eps"),
        (lambda: group_advantages(REWARDS, normalize_std=1), TypeError, "normalize_std"),
        (
            lambda: group_advantages(t([[1.0, 0.0], [float("nan"), 1.0]])),
            ValueError,
            r"groups \[1\] are not finite",
        ),
        (lambda: group_advantages(t([[float("inf"), 0.0]])), ValueError, "not finite"),
        (lambda: group_advantages(REWARDS, valid=torch.ones(2, 4)), TypeError, "valid must be"),
        (
            lambda: group_advantages(REWARDS, valid=torch.ones(2, 3, dtype=torch.bool)),
            ValueError,
            "valid has shape",
        ),
        (lambda: finite_groups(t([1.0])), ValueError, "rewards must be"),
        (lambda: finite_groups(REWARDS, torch.ones(2, 4)), ValueError, "valid must be"),
        (
            lambda: finite_groups(REWARDS, torch.ones(1, 4, dtype=torch.bool)),
            ValueError,
            "valid has shape",
        ),
    ],
)
def test_bad_input_raises(call: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()  # type: ignore[operator]
