"""The sampler's log-prob and kept set on tiny logits, with exact expected values."""

from __future__ import annotations

import math

import pytest
import torch

from envgym.models.sampler import sample, truncation
from envgym.policy import SamplingParams

LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0])  # softmax ≈ [.6439, .2369, .0871, .0321]


def _log_softmax(values: list[float], index: int) -> float:
    return values[index] - math.log(sum(math.exp(v) for v in values))


@pytest.mark.parametrize(
    ("top_k", "top_p", "kept"),
    [
        (0, 1.0, None),  # no truncation
        (2, 1.0, [0, 1]),
        (0, 0.7, [0, 1]),  # mass before rank 1 is .644 < .7; before rank 2 it is .881
        (0, 0.5, [0]),  # the most probable token is always kept
        (0, 0.95, [0, 1, 2]),
        (3, 0.7, [0, 1]),  # top-p on the renormalized top-3: .659, .242 ...
        (1, 1.0, [0]),
    ],
)
def test_truncation_sets(top_k: int, top_p: float, kept: list[int] | None) -> None:
    got = truncation(LOGITS, SamplingParams(top_k=top_k, top_p=top_p))
    assert (got.tolist() if got is not None else None) == kept


def test_truncation_ranks_by_probability_and_breaks_ties_by_id() -> None:
    logits = torch.tensor([0.0, 3.0, 1.0, 3.0])
    assert truncation(logits, SamplingParams(top_k=3)).tolist() == [1, 3, 2]


def test_logprobs_are_tempered_full_and_renormalized_over_the_kept_set() -> None:
    params = SamplingParams(temperature=0.5, top_k=2, seed=0)
    generator = torch.Generator().manual_seed(0)
    scaled = [v / 0.5 for v in LOGITS.tolist()]
    for _ in range(50):
        drawn = sample(LOGITS, params, generator)
        assert drawn.kept is not None and drawn.kept.tolist() == [0, 1]
        assert drawn.token in (0, 1)
        # full: log_softmax(logits / T) over the whole vocabulary
        assert drawn.full_logprob == pytest.approx(_log_softmax(scaled, drawn.token), abs=1e-6)
        # sampled: the same distribution restricted to the kept set {0, 1}, renormalized
        assert drawn.logprob == pytest.approx(_log_softmax(scaled[:2], drawn.token), abs=1e-6)


def test_without_truncation_both_logprobs_agree() -> None:
    drawn = sample(LOGITS, SamplingParams(temperature=0.8), torch.Generator().manual_seed(2))
    assert drawn.kept is None
    expected = _log_softmax([v / 0.8 for v in LOGITS.tolist()], drawn.token)
    assert drawn.logprob == pytest.approx(expected, abs=1e-6)
    assert drawn.full_logprob == pytest.approx(expected, abs=1e-6)


def test_sampling_never_leaves_the_kept_set_and_follows_its_distribution() -> None:
    params = SamplingParams(temperature=1.0, top_p=0.7)
    generator = torch.Generator().manual_seed(1)
    counts = [0, 0, 0, 0]
    for _ in range(4000):
        counts[sample(LOGITS, params, generator).token] += 1
    assert counts[2] == counts[3] == 0
    # renormalized over {0, 1}: p(0) = e^2 / (e^2 + e) ≈ .731
    assert counts[0] / 4000 == pytest.approx(0.731, abs=0.03)


def test_greedy_takes_the_argmax_with_its_untempered_full_logprob() -> None:
    drawn = sample(
        torch.tensor([0.5, 4.0, 1.0]), SamplingParams(temperature=0.0), torch.Generator()
    )
    assert drawn.token == 1 and drawn.kept is not None and drawn.kept.tolist() == [1]
    assert drawn.logprob == 0.0  # the point mass it was drawn from
    assert drawn.full_logprob == pytest.approx(_log_softmax([0.5, 4.0, 1.0], 1), abs=1e-6)


def test_same_seed_same_tokens() -> None:
    params = SamplingParams()
    draws = [
        [sample(LOGITS, params, g).token for _ in range(30)]
        for g in (torch.Generator().manual_seed(7), torch.Generator().manual_seed(7))
    ]
    assert draws[0] == draws[1]
