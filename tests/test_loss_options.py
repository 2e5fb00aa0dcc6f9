"""Loss options on tiny float64 tensors, expected values and gradients worked out by hand.

GSPO's sequence ratio (``ratio_level: sequence``), CISPO (``kind: cispo``), the entropy bonus
(``entropy_coef``) and the config checks of each, plus ``ref_sync_every``'s.  Log-probs are
built from chosen log-ratios (logp = old + log r), as in tests/test_trainer_losses.py.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch

from envgym.trainer.config import ConfigError, config_from_dict
from envgym.trainer.loop import _run_config
from envgym.trainer.losses import LossConfig, cispo_surrogate, grpo_loss, sequence_ratio

F64 = torch.float64
BASE: dict[str, Any] = {"envs": [{"id": "code-interpreter-math-v0"}]}


def t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def close(a: torch.Tensor | float, b: torch.Tensor | float) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), atol=1e-12)


def leaf(old: torch.Tensor, log_ratios: list[list[float]]) -> torch.Tensor:
    return (old + t(log_ratios)).detach().requires_grad_(True)


# ---- GSPO: the sequence ratio -------------------------------------------------------------------

GSPO = LossConfig(
    ratio_level="sequence", seq_eps_low=0.1, seq_eps_high=0.2, dual_clip=None, tis_cap=None
)


def test_sequence_ratio_is_the_geometric_mean_of_the_trained_tokens() -> None:
    lr = t([[0.1, 0.3, 9.0], [-0.2, 0.0, 0.5]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    s = sequence_ratio(lr, mask)
    # exp((0.1 + 0.3)/2) on every position of row 0 (the untrained 9.0 ignored); exp(0.3/3)
    assert close(s, t([[math.exp(0.2)] * 3, [math.exp(0.1)] * 3]))


def test_gspo_clips_whole_sequences_by_hand() -> None:
    old = t([[-1.0, -2.0, -3.0], [-1.5, -0.5, -2.5]])
    # row 0: log r = 0.1, 0.3 (third untrained, garbage) → s = e^0.2 ≈ 1.2214 > 1 + 0.2: clipped
    # row 1: log r = −0.05, 0.05 → s = 1, inside [0.9, 1.2]
    logp = leaf(old, [[0.1, 0.3, 5.0], [-0.05, 0.05, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    adv = t([1.0, -1.0])
    loss, diag = grpo_loss(logp, old, adv, mask, GSPO)
    # token-mean of −s·Â: row 0 → −1.2 (the clip value) twice, row 1 → +1 twice: (−2.4 + 2)/4
    assert close(loss, -0.1)
    loss.backward()
    # row 0 is clipped: no gradient; row 1: each token moves s by s/|o| = 1/2, and both tokens'
    # objectives hold s: ∂loss/∂logp_j = −(1/4)·2·Â·s/2 = 0.25
    assert close(logp.grad, t([[0.0, 0.0, 0.0], [0.25, 0.25, 0.0]]))
    assert close(diag["clip_high_fraction"], 0.5)  # row 0's two tokens of four
    assert close(diag["ratio_mean"], (2 * math.exp(0.2) + 2 * 1.0) / 4)


def test_gspo_token_level_would_clip_differently() -> None:
    """The same batch at ratio_level token: row 0's first token (r = e^0.1 < 1.28) trains."""
    old = t([[-1.0, -2.0]])
    logp = leaf(old, [[0.1, 0.3]])
    mask = torch.tensor([[True, True]])
    loss, _ = grpo_loss(logp, old, t([1.0]), mask, LossConfig(dual_clip=None, tis_cap=None))
    loss.backward()
    # r = e^0.1 inside, gradient −r/2; r = e^0.3 ≈ 1.35 > 1.28 clipped, 0
    assert close(logp.grad, t([[-math.exp(0.1) / 2, 0.0]]))


def test_gspo_sequence_is_the_trajectory_not_the_segment() -> None:
    """One episode split into two records: one ratio over its three tokens, counted once."""
    old = t([[-1.0, 0.0], [-2.0, -3.0]])
    logp = leaf(old, [[0.6, 0.0], [0.0, 0.0]])  # row 0 alone: e^0.6 ≈ 1.82 would clip
    mask = torch.tensor([[True, False], [True, True]])
    cfg = LossConfig(ratio_level="sequence", seq_eps_high=0.5, dual_clip=None, tis_cap=None)
    traj = torch.tensor([7, 7])
    loss, diag = grpo_loss(logp, old, t([1.0, 1.0]), mask, cfg, trajectory=traj)
    s = math.exp(0.6 / 3)  # ≈ 1.2214 < 1.5: unclipped
    assert close(loss, -s)
    loss.backward()
    # loss = −(1/3)·3·s = −s, ∂s/∂logp_j = s/3 for each of the three trained tokens
    assert close(logp.grad, t([[-s / 3, 0.0], [-s / 3, -s / 3]]))
    assert diag["sequences"].item() == 1.0
    # per segment instead: row 0 clipped at 1.5, row 1 at s = 1 — another loss
    per_row, _ = grpo_loss(logp, old, t([1.0, 1.0]), mask, cfg)
    assert close(per_row, -(1.5 + 2 * 1.0) / 3)


# ---- CISPO ----------------------------------------------------------------------------------------


def test_cispo_keeps_every_tokens_gradient_with_a_clipped_weight() -> None:
    old = t([[-1.0, -2.0, -0.5], [-1.0, -2.0, -0.5]])
    logp = leaf(old, [[math.log(0.5), 0.0, math.log(2.0)]] * 2)
    mask = torch.ones(2, 3, dtype=torch.bool)
    adv = t([2.0, -1.0])
    cfg = LossConfig(kind="cispo", tis_cap=None)  # ε_high = 0.28: weights 0.5, 1, 1.28
    loss, diag = grpo_loss(logp, old, adv, mask, cfg)
    w = [0.5, 1.0, 1.28]
    # value −Σ ŵ·Â / 6 = −(2·2.78 − 2.78)/6
    assert close(loss, -2.78 / 6)
    loss.backward()
    # ∂/∂logp = −ŵ·Â/6: the capped token (r = 2) keeps a gradient, unlike the clipped surrogate
    assert close(logp.grad, t([[-2 * x / 6 for x in w], [x / 6 for x in w]]))
    assert close(diag["clip_high_fraction"], 2 / 6)
    assert close(diag["clip_low_fraction"], 0.0) and close(diag["dual_clip_fraction"], 0.0)


def test_cispo_sets_no_lower_bound_and_no_dual_clip() -> None:
    old = t([[0.0, 0.0]])
    logp = leaf(old, [[math.log(0.1), math.log(5.0)]])  # far below 1 − ε_low; above c = 3
    obj, flags = cispo_surrogate(logp, old, t([[-1.0]]), 0.28)
    assert close(obj, t([[-0.1, -1.28]]))
    obj.sum().backward()
    assert close(logp.grad, t([[-0.1, -1.28]]))
    assert flags["clip_high"].tolist() == [[False, True]]


# ---- entropy bonus --------------------------------------------------------------------------------


def test_entropy_bonus_is_masked_and_aggregated_like_the_loss() -> None:
    old = t([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    logp = old.clone().requires_grad_(True)  # r = 1 and Â = 0: the policy term is 0
    mask = torch.tensor([[True, True, False], [True, False, False]])
    ent = t([[1.0, 2.0, math.nan], [0.5, 7.0, 7.0]]).requires_grad_(True)
    cfg = LossConfig(entropy_coef=0.1, aggregation="seq-mean-token-mean", tis_cap=None)
    loss, diag = grpo_loss(logp, old, t([0.0, 0.0]), mask, cfg, entropy=ent)
    # seq-mean of H: ((1 + 2)/2 + 0.5/1) / 2 = 1.0; loss = −0.1 · 1.0
    assert close(diag["entropy_bonus"], 1.0)
    assert close(loss, -0.1)
    assert diag["nonfinite"].item() == 0.0  # the NaN sits at an untrained position
    loss.backward()
    assert ent.grad is not None
    assert close(ent.grad, t([[-0.025, -0.025, 0.0], [-0.05, 0.0, 0.0]]))


def test_entropy_coef_needs_the_entropies() -> None:
    old = t([[0.0]])
    with pytest.raises(ValueError, match="entropy_coef"):
        grpo_loss(old.clone(), old, t([1.0]), torch.tensor([[True]]), LossConfig(entropy_coef=0.1))


def test_entropy_off_changes_nothing() -> None:
    old = t([[-1.0, -2.0]])
    logp = leaf(old, [[0.1, -0.1]])
    mask = torch.tensor([[True, True]])
    ent = t([[3.0, 4.0]])
    a, _ = grpo_loss(logp, old, t([1.0]), mask, LossConfig(), entropy=ent)
    b, _ = grpo_loss(logp, old, t([1.0]), mask, LossConfig())
    assert close(a, b)


# ---- config ---------------------------------------------------------------------------------------


def _with_loss(**loss: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["loss"] = loss
    return data


def test_the_options_load_from_yaml_data() -> None:
    c = config_from_dict(
        _with_loss(kind="cispo", entropy_coef=0.001, kl_beta=0.01, ref_sync_every=50)
    )
    assert c.loss.kind == "cispo" and c.loss.ref_sync_every == 50
    assert c.loss.entropy_coef == 0.001
    c = config_from_dict(_with_loss(ratio_level="sequence"))
    assert c.loss.ratio_level == "sequence" and c.loss.seq_eps_high == 4e-4


@pytest.mark.parametrize(
    ("loss", "message"),
    [
        ({"kind": "ppo"}, "loss.kind must be one of"),
        ({"ratio_level": "turn"}, "loss.ratio_level must be one of"),
        ({"kind": "cispo", "ratio_level": "sequence"}, "kind 'cispo'"),
        ({"entropy_coef": -0.1}, "entropy_coef must be ≥ 0"),
        ({"entropy_coef": True}, "loss.entropy_coef must be a number"),
        ({"ref_sync_every": 10}, "kl_beta = 0"),
        ({"ref_sync_every": -1, "kl_beta": 0.1}, "ref_sync_every must be ≥ 0"),
        ({"ref_sync_every": 2.5, "kl_beta": 0.1}, "loss.ref_sync_every must be an integer"),
        ({"seq_eps_low": 1.0}, "seq_eps_low must be in"),
        ({"seq_eps_high": -0.1}, "seq_eps_high must be ≥ 0"),
    ],
)
def test_bad_option_values_name_the_key(loss: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(_with_loss(**loss))


def test_options_at_their_defaults_keep_the_run_identity() -> None:
    """A checkpoint written before the options existed resumes: at their defaults they are
    left out of the run's identity; set, they are in it."""
    plain = _run_config(config_from_dict(BASE))
    assert not {"kind", "ratio_level", "entropy_coef", "ref_sync_every"} & set(plain["loss"])
    set_ = _run_config(config_from_dict(_with_loss(kind="cispo", entropy_coef=0.01)))
    assert set_["loss"]["kind"] == "cispo" and set_["loss"]["entropy_coef"] == 0.01
