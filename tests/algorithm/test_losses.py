"""PPO-clip, KL and aggregation against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from astuner.algorithm.losses import aggregate, kl_penalty, ppo_clip_loss


def test_ppo_clip_hand_values():
    old = torch.zeros(1, 4)
    ratio = torch.tensor([[1.1, 1.5, 0.5, 0.9]])
    logp = torch.log(ratio)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = ppo_clip_loss(logp, old, adv, clip_low=0.2, clip_high=0.2)
    # A>0: -min(r, clip(r)) -> -1.1 (inside), -1.2 (clipped at 1.2)
    # A<0: max(r, clip(r))  -> 0.8 (r=0.5 clipped up to 0.8), 0.9 (inside)
    assert loss[0].tolist() == pytest.approx([-1.1, -1.2, 0.8, 0.9])
    assert clipped[0].tolist() == [0.0, 1.0, 1.0, 0.0]


def test_asymmetric_clip():
    loss, _ = ppo_clip_loss(torch.log(torch.tensor([[1.5]])), torch.zeros(1, 1), torch.ones(1, 1), 0.2, 0.28)
    assert loss.item() == pytest.approx(-1.28)


def test_kl_estimators():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    assert kl_penalty(logp, ref, "kl").item() == pytest.approx(math.log(2))
    # k3: exp(ref - logp) - (ref - logp) - 1 = 0.5 + ln 2 - 1
    assert kl_penalty(logp, ref, "low_var_kl").item() == pytest.approx(0.5 + math.log(2) - 1)
    assert kl_penalty(logp, logp, "low_var_kl").item() == 0.0
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "mse")


def test_aggregation_modes_over_micro_batches():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # as one micro-batch
    assert aggregate(values, mask, "token-mean", 4, 2).item() == pytest.approx(10 / 4)
    assert aggregate(values, mask, "seq-mean-token-mean", 4, 2).item() == pytest.approx((2 + 4) / 2)
    assert aggregate(values, mask, "seq-mean-token-sum", 4, 2).item() == pytest.approx((6 + 4) / 2)
    # split into two micro-batches, the parts add up to the same mini-batch value
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        whole = aggregate(values, mask, mode, 4, 2).item()
        parts = sum(aggregate(values[i:i + 1], mask[i:i + 1], mode, 4, 2).item() for i in range(2))
        assert parts == pytest.approx(whole)


def test_dual_clip_bounds_the_loss_of_negative_advantages():
    # A = -1, r = 5: the clipped surrogate says 5, dual clip caps it at clip_ratio_c = 3; A = +1 is untouched
    logp = torch.log(torch.tensor([[5.0, 5.0]]))
    loss, _ = ppo_clip_loss(logp, torch.zeros(1, 2), torch.tensor([[-1.0, 1.0]]), 0.2, 0.2, clip_ratio_c=3.0)
    assert loss[0].tolist() == pytest.approx([3.0, -1.2])


def test_a_huge_log_ratio_gap_gives_finite_gradients():
    """verl clamps the log-ratio to [-20, 20] before exp; without it a gap over ~88 overflows to inf and the
    gradients turn NaN."""
    logp = torch.tensor([[-100.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -100.0]])
    kl_penalty(logp, ref, "low_var_kl").sum().backward()
    assert torch.isfinite(logp.grad).all()
    logp.grad = None
    loss, _ = ppo_clip_loss(logp, ref, torch.tensor([[1.0, -1.0]]), 0.2, 0.2)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logp.grad).all()
