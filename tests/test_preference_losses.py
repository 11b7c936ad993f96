"""The losses of the stages before RL (SFT, reward model, DPO/IPO): hand-computed values, a slow
per-sample loop against the vectorised functions, and micro-batch invariance."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algorithms import dpo_loss, reward_model_loss, sft_loss


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


# ------------------------------------------------------------------ SFT
def test_sft_loss_hand_computed():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, -9.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    # masked tokens: 2, 3, 0.5, 0.25 -> mean 5.75 / 4
    assert sft_loss(lp, mask).item() == pytest.approx(1.4375)
    assert sft_loss(lp, mask, num_tokens=10).item() == pytest.approx(0.575)
    assert sft_loss(lp, torch.zeros_like(mask)).item() == 0.0  # no response token: no NaN


def test_sft_loss_micro_batches_sum_to_the_full_batch():
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    total = mask.sum().item()
    parts = sum(sft_loss(lp[i:i + 2], mask[i:i + 2], num_tokens=total) for i in range(0, 6, 2))
    assert parts.item() == pytest.approx(sft_loss(lp, mask).item(), rel=1e-6)


# ------------------------------------------------------------------ reward model
def test_reward_model_loss_hand_computed():
    c, r = torch.tensor([1.0]), torch.tensor([0.0])
    assert reward_model_loss(c, r).item() == pytest.approx(0.31326169, rel=1e-6)  # log(1 + e^-1)
    assert reward_model_loss(c, r, margin=0.5).item() == pytest.approx(0.47407698, rel=1e-6)  # log(1 + e^-0.5)
    assert reward_model_loss(c, r, kind="logexp").item() == pytest.approx(0.31326169, rel=1e-6)
    # equal rewards: log 2; a large wrong-way gap: about the gap
    assert reward_model_loss(torch.tensor([3.0]), torch.tensor([3.0])).item() == pytest.approx(math.log(2))
    assert reward_model_loss(torch.tensor([0.0]), torch.tensor([50.0])).item() == pytest.approx(50.0)


@pytest.mark.parametrize("kind", ["pairwise", "logexp"])
def test_reward_model_loss_loop_vs_vectorised(kind):
    g = torch.Generator().manual_seed(1)
    c, r = torch.randn(16, generator=g) * 3, torch.randn(16, generator=g) * 3
    margin = torch.rand(16, generator=g)
    loop = 0.0
    for i in range(16):
        d = c[i].item() - r[i].item() - margin[i].item()
        loop += -_log_sigmoid(d) if kind == "pairwise" else math.log1p(math.exp(-d))
    got = reward_model_loss(c, r, kind=kind, margin=margin).item()
    assert got == pytest.approx(loop / 16, rel=1e-5)


def test_reward_model_loss_gradient_and_errors():
    c = torch.tensor([0.0], requires_grad=True)
    r = torch.tensor([0.0], requires_grad=True)
    reward_model_loss(c, r).backward()
    assert c.grad.item() == pytest.approx(-0.5) and r.grad.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="valid: pairwise, logexp"):
        reward_model_loss(c, r, kind="hinge")


# ------------------------------------------------------------------ DPO / IPO
def test_dpo_loss_hand_computed():
    pc, pr = torch.tensor([-1.0]), torch.tensor([-2.0])
    rc, rr = torch.tensor([-1.5]), torch.tensor([-1.5])
    # log-ratios: chosen +0.5, rejected -0.5 -> logits 1.0
    loss, m = dpo_loss(pc, pr, rc, rr, beta=0.1)
    assert loss.item() == pytest.approx(0.64439666, rel=1e-6)  # -log sigmoid(0.1)
    assert m["chosen_reward"].item() == pytest.approx(0.05)
    assert m["rejected_reward"].item() == pytest.approx(-0.05)
    assert m["margin"].item() == pytest.approx(0.1)
    assert m["accuracy"].item() == 1.0
    smoothed, _ = dpo_loss(pc, pr, rc, rr, beta=0.1, label_smoothing=0.2)
    # 0.8 * -log s(0.1) + 0.2 * -log s(-0.1)
    assert smoothed.item() == pytest.approx(0.8 * 0.64439666 + 0.2 * 0.74439666, rel=1e-6)
    ipo, _ = dpo_loss(pc, pr, rc, rr, beta=0.1, ipo=True)
    assert ipo.item() == pytest.approx((1.0 - 5.0) ** 2)  # (x - 1/(2 beta))^2
    # policy equal to the reference: loss log 2, zero margin, accuracy 0 (ties are not wins)
    loss0, m0 = dpo_loss(rc, rr, rc, rr, beta=0.5)
    assert loss0.item() == pytest.approx(math.log(2)) and m0["margin"].item() == 0.0
    assert m0["accuracy"].item() == 0.0


@pytest.mark.parametrize("ls,ipo", [(0.0, False), (0.1, False), (0.0, True)])
def test_dpo_loss_loop_vs_vectorised(ls, ipo):
    g = torch.Generator().manual_seed(2)
    pc, pr, rc, rr = (-torch.rand(12, generator=g) * 20 for _ in range(4))
    beta = 0.3
    loop = 0.0
    for i in range(12):
        x = (pc[i] - rc[i]).item() - (pr[i] - rr[i]).item()
        if ipo:
            loop += (x - 1 / (2 * beta)) ** 2
        else:
            loop += -(1 - ls) * _log_sigmoid(beta * x) - ls * _log_sigmoid(-beta * x)
    loss, _ = dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=ls, ipo=ipo)
    assert loss.item() == pytest.approx(loop / 12, rel=1e-5)


def test_dpo_gradient_pushes_chosen_up_and_rejected_down():
    pc = torch.tensor([-3.0], requires_grad=True)
    pr = torch.tensor([-3.0], requires_grad=True)
    loss, _ = dpo_loss(pc, pr, torch.tensor([-3.0]), torch.tensor([-3.0]), beta=0.1)
    loss.backward()
    # d/dx -log s(beta x) at x = 0 is -beta/2
    assert pc.grad.item() == pytest.approx(-0.05) and pr.grad.item() == pytest.approx(0.05)


def test_pair_losses_are_micro_batch_invariant():
    g = torch.Generator().manual_seed(3)
    pc, pr, rc, rr = (-torch.rand(8, generator=g) * 5 for _ in range(4))
    full, _ = dpo_loss(pc, pr, rc, rr, beta=0.2)
    parts = sum(dpo_loss(pc[i:i + 3], pr[i:i + 3], rc[i:i + 3], rr[i:i + 3], beta=0.2)[0] * len(pc[i:i + 3]) / 8
                for i in range(0, 8, 3))
    assert parts.item() == pytest.approx(full.item(), rel=1e-6)
    rm_full = reward_model_loss(pc, pr)
    rm_parts = sum(reward_model_loss(pc[i:i + 3], pr[i:i + 3]) * len(pc[i:i + 3]) / 8 for i in range(0, 8, 3))
    assert rm_parts.item() == pytest.approx(rm_full.item(), rel=1e-6)
