"""envgym/trainer/microbatches.py: which rows run through the model together."""

from __future__ import annotations

import random

import pytest

from envgym.trainer.microbatches import _prefix_cost, balanced_microbatches, prefix_microbatches

A = [1, 2, 3, 4, 5, 6]  # one prompt (a system prompt and task)
B = [50, 51, 52, 53, 54, 55]  # another


def test_rows_sharing_a_prompt_share_a_microbatch() -> None:
    ids = [A + [9], B + [1], A + [8], B + [2]]
    # The prompt once (6) and two one-token tails: 8 tokens, padded or packed alike.
    assert _prefix_cost(ids, [0, 2], packed=False) == 8
    assert _prefix_cost(ids, [0, 2], packed=True) == 8
    assert _prefix_cost(ids, [0, 1], packed=False) == 14  # nothing shared: 2 × 7
    assert prefix_microbatches(ids, 8) == [[0, 2], [1, 3]]
    assert prefix_microbatches(ids, 8, packed=True) == [[0, 2], [1, 3]]
    # Counting every row whole, the same budget never fits two rows.
    assert balanced_microbatches([7, 7, 7, 7], 8) == [[0], [1], [2], [3]]


def test_padded_tails_count_to_the_longest_and_packed_tails_to_their_sum() -> None:
    ids = [A + [9], A + [8, 7, 6, 5]]
    assert _prefix_cost(ids, [0, 1], packed=False) == 6 + 2 * 4
    assert _prefix_cost(ids, [0, 1], packed=True) == 6 + 1 + 4
    assert prefix_microbatches(ids, 13) == [[1], [0]]  # sorted by ids: A + [8, …] first
    assert prefix_microbatches(ids, 13, packed=True) == [[0, 1]]


def test_each_row_keeps_a_token_of_its_own() -> None:
    """Two equal rows share all but their last token (its hidden state is the row's own)."""
    assert _prefix_cost([A, A], [0, 1], packed=False) == 5 + 2 * 1


def test_an_episode_stays_whole_and_a_unit_over_the_budget_runs_alone() -> None:
    ids = [A + [9], B + [1], A + [8], B + [2]]
    # rows 0 and 1 are one episode (two segments): never split, whatever they share
    assert prefix_microbatches(ids, 8, together=[0, 0, 1, 2]) == [[2], [0, 1], [3]]
    assert prefix_microbatches([A], 2) == [[0]]
    assert prefix_microbatches([], 8) == []


@pytest.mark.parametrize(
    ("ids", "budget", "together", "error"),
    [
        ([A], 0, None, "max_tokens must be > 0"),
        ([A, []], 8, None, "row lengths must be > 0"),
        ([A, B], 8, [0], "together has 1 keys for 2 rows"),
    ],
)
def test_bad_arguments_are_named(ids, budget, together, error) -> None:
    with pytest.raises(ValueError, match=error):
        prefix_microbatches(ids, budget, together)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("packed", [False, True])
def test_every_row_once_units_whole_and_every_shared_bin_within_the_budget(
    seed: int, packed: bool
) -> None:
    rng = random.Random(seed)
    prompts = [[rng.randrange(100) for _ in range(rng.randrange(1, 12))] for _ in range(4)]
    ids = [
        rng.choice(prompts) + [rng.randrange(100) for _ in range(rng.randrange(1, 6))]
        for _ in range(rng.randrange(1, 16))
    ]
    together = [rng.randrange(len(ids)) for _ in ids]
    budget = rng.randrange(4, 40)
    bins = prefix_microbatches(ids, budget, together, packed=packed)
    assert sorted(i for b in bins for i in b) == list(range(len(ids)))
    where = {i: k for k, b in enumerate(bins) for i in b}
    for i, j in zip(range(len(ids)), together):
        assert where[i] == where[together.index(j)]  # an episode's rows in one microbatch
    for b in bins:
        assert b == sorted(b)
        if len({together[i] for i in b}) > 1:
            assert _prefix_cost(ids, b, packed) <= budget
