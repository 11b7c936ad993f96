"""Off-policy correction (TIS, MIS) and the CISPO and SAPO losses: hand-computed values, a slow loop
against the vectorised version, and "engine == learner log-probs leaves the PPO loss unchanged"."""

import math
from dataclasses import replace

import pytest
import torch

from agentrl import algorithms as A
from agentrl.config import AlgoConfig
from agentrl.training.experience import Experience
from agentrl.training.learner import micro_policy_loss

# ---------------------------------------------------------------- hand-computed values


def test_tis_weights_by_hand():
    old = torch.tensor([[0.0, -1.0, -2.0]])
    eng = torch.tensor([[0.0, -2.0, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    # position 1: exp(1) = 2.718 capped at 2; position 2: exp(-1) = .3679; masked position: 1
    w = A.tis_weights(old, eng, mask, cap=2.0)
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, math.exp(-1)]]))
    with pytest.raises(ValueError, match="cap"):
        A.tis_weights(old, eng, mask, cap=0.0)


def test_mis_keep_by_hand():
    old = torch.tensor([[-1.0, -1.0, 9.0], [-1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    eng = torch.tensor([[-1.5, -1.5, 0.0], [-3.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # row 0: mean diff .5 -> ratio 1.6487 (in [0.5, 2]); row 1: mean diff 1 -> 2.718 (out); row 2: no tokens
    keep = A.mis_keep(old, eng, mask, low=0.5, high=2.0)
    assert keep.tolist() == [1.0, 0.0, 1.0]
    w = A.correction_weights(old, eng, mask, mis_low=0.5, mis_high=2.0)
    assert w[1].tolist() == [0.0, 0.0, 0.0] and w[0].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="MIS bounds"):
        A.mis_keep(old, eng, mask, low=2.0, high=1.0)


def test_mismatch_and_staleness_metrics_by_hand():
    old = torch.tensor([[0.0, -1.0, -2.0], [-1.0, -1.0, 0.0]])
    eng = torch.tensor([[0.0, -1.5, -1.0], [-1.0, -1.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    w = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    m = A.mismatch_metrics(old, eng, mask, w)
    assert m["mismatch/logprob_abs_diff_mean"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert m["mismatch/logprob_abs_diff_max"] == pytest.approx(1.0)
    assert m["mismatch/is_ratio_mean"] == pytest.approx((math.exp(0.5) + math.exp(-1.0) + 1.0) / 3)
    assert m["mismatch/is_weight_mean"] == pytest.approx(1 / 3)
    assert m["mismatch/masked_frac"] == pytest.approx(0.5)  # row 0 has weight 0 on every token
    versions = torch.tensor([[0, 3, 2], [3, 0, 0]])  # versions under mask 0 are ignored
    s = A.staleness_metrics(versions, mask, current=3)
    # tokens: lag 0, 1 (row 0), 0 (row 1) -> mean 1/3, max 1; oldest per sample: 1 and 0
    assert s["staleness/mean"] == pytest.approx(1 / 3) and s["staleness/max"] == 1.0
    assert s["staleness/frac_0"] == 0.5 and s["staleness/frac_1"] == 0.5


def test_cispo_loss_by_hand():
    lp = torch.tensor([[-1.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0]])
    adv = torch.tensor([[2.0, 1.0]])
    mask = torch.ones(1, 2)
    # ratios 1 and e^.5=1.6487 -> clipped to 1.2; token losses -1*2*(-1)=2, -1.2*1*(-.5)=.6; mean 1.3
    loss, m = A.cispo_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx(1.3)
    assert m["clipfrac"].item() == pytest.approx(0.5)
    loss.backward()
    # d/dlp of mean(-w*A*lp) = -w*A/2 (w detached): the clipped token keeps its gradient
    assert torch.allclose(lp.grad, torch.tensor([[-1.0, -0.6]]))


def test_sapo_loss_by_hand():
    lp = torch.tensor([[-1.0, -1.0 + math.log(2.0)]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0]])
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    loss, _ = A.sapo_loss(lp, old, adv, mask, tau_pos=1.0, tau_neg=2.0)
    # token 0: r=1, tau 1: -(4/1)*sigmoid(0)*1 = -2 ; token 1: r=2, tau 2: -(4/2)*sigmoid(2)*(-1) = 2*.8808
    want = (-2.0 + 2.0 / (1 + math.exp(-2.0))) / 2
    assert loss.item() == pytest.approx(want, rel=1e-6)
    loss.backward()
    # at r=1 the gradient is the policy gradient: -A / num_tokens
    assert lp.grad[0, 0].item() == pytest.approx(-0.5)
    g = 1 / (1 + math.exp(-2.0))
    assert lp.grad[0, 1].item() == pytest.approx(4 * g * (1 - g) * 2.0 * 1.0 / 2, rel=1e-5)


# ---------------------------------------------------------------- slow loops against the vectorised code


def _batch(seed: int = 0, B: int = 4, A_: int = 6):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, A_, generator=g) * 2
    old = lp + 0.3 * torch.randn(B, A_, generator=g)
    eng = old + 0.4 * torch.randn(B, A_, generator=g)
    adv = torch.randn(B, A_, generator=g)
    mask = (torch.rand(B, A_, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    return lp, old, eng, adv, mask


def test_tis_and_mis_match_loop():
    _, old, eng, _, mask = _batch(1)
    w = A.correction_weights(old, eng, mask, tis_cap=1.5, mis_low=0.6, mis_high=1.4)
    for b in range(old.shape[0]):
        toks = [t for t in range(old.shape[1]) if mask[b, t] > 0]
        seq_ratio = math.exp(sum(old[b, t].item() - eng[b, t].item() for t in toks) / len(toks))
        keep = 1.0 if 0.6 <= seq_ratio <= 1.4 else 0.0
        for t in range(old.shape[1]):
            tis = min(math.exp(old[b, t].item() - eng[b, t].item()), 1.5) if mask[b, t] > 0 else 1.0
            assert w[b, t].item() == pytest.approx(tis * keep, rel=1e-5)


@pytest.mark.parametrize("kind", ["cispo", "sapo"])
def test_cispo_and_sapo_match_loop(kind):
    lp, old, eng, adv, mask = _batch(2)
    w = A.tis_weights(old, eng, mask, cap=2.0)
    if kind == "cispo":
        loss, _ = A.cispo_loss(lp, old, adv, mask, clip_low=0.1, clip_high=0.3, weights=w)
    else:
        loss, _ = A.sapo_loss(lp, old, adv, mask, tau_pos=1.0, tau_neg=1.05, weights=w)
    total, n = 0.0, 0
    for b in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if mask[b, t] == 0:
                continue
            r = math.exp(lp[b, t].item() - old[b, t].item())
            a = adv[b, t].item()
            if kind == "cispo":
                tok = -min(max(r, 0.9), 1.3) * a * lp[b, t].item()
            else:
                tau = 1.0 if a > 0 else 1.05
                tok = -(4 / tau) * (1 / (1 + math.exp(-tau * (r - 1)))) * a
            total += tok * w[b, t].item()
            n += 1
    assert loss.item() == pytest.approx(total / n, rel=1e-5, abs=1e-7)


# ---------------------------------------------------------------- equal log-probs change nothing


def _experience(lp, old, eng, adv, mask) -> Experience:
    B, A_ = lp.shape
    return Experience(sequences=torch.zeros(B, A_ + 1, dtype=torch.long),
                      attention_mask=torch.ones(B, A_ + 1, dtype=torch.long), action_mask=mask,
                      rewards=torch.zeros(B), group_ids=torch.arange(B), old_logprobs=old, advantages=adv,
                      engine_logprobs=eng)


@pytest.mark.parametrize("policy_loss", ["ppo", "cispo", "sapo"])
def test_equal_engine_and_learner_logprobs_leave_the_loss_unchanged(policy_loss):
    lp0, old, _, adv, mask = _batch(3)
    base = AlgoConfig(policy_loss=policy_loss)
    corrected = replace(base, tis_cap=2.0, mis_low=0.5, mis_high=2.0)
    norm = dict(num_tokens=mask.sum().item(), num_seqs=lp0.shape[0], max_len=None)
    results = []
    for algo, eng in ((base, None), (corrected, old.clone())):
        lp = lp0.clone().requires_grad_(True)
        loss, stats = micro_policy_loss(lp, torch.zeros_like(lp), _experience(lp, old, eng, adv, mask), algo, 0.0,
                                        norm)
        loss.backward()
        results.append((loss.detach(), lp.grad, stats))
    (l0, g0, _), (l1, g1, stats) = results
    assert torch.equal(l0, l1) and torch.equal(g0, g1)
    assert stats["mismatch/logprob_abs_diff_mean"] == 0.0 and stats["mismatch/is_weight_mean"] == 1.0


def test_correction_moves_the_loss_when_the_engine_disagrees():
    lp0, old, eng, adv, mask = _batch(4)
    algo = AlgoConfig(tis_cap=1.2)
    norm = dict(num_tokens=mask.sum().item(), num_seqs=lp0.shape[0], max_len=None)
    lp = lp0.clone().requires_grad_(True)
    loss, stats = micro_policy_loss(lp, torch.zeros_like(lp), _experience(lp, old, eng, adv, mask), algo, 0.0, norm)
    want, _ = A.policy_loss(lp0, old, adv, mask, weights=A.tis_weights(old, eng, mask, 1.2))
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert stats["mismatch/logprob_abs_diff_mean"] > 0 and stats["mismatch/is_weight_mean"] < 1.2


def test_tis_cap_auto_is_on_with_async_only_and_explicit_values_stay():
    from agentrl.config import ConfigError, load_config

    assert load_config(None, []).algo.tis_cap == 0.0  # synchronous: on-policy, no correction
    assert load_config(None, ["rollout.async=true"]).algo.tis_cap == 2.0
    assert load_config(None, ["rollout.async=true", "algo.tis_cap=0"]).algo.tis_cap == 0.0  # explicitly off
    assert load_config(None, ["algo.tis_cap=1.5"]).algo.tis_cap == 1.5
    with pytest.raises(ConfigError, match="algo.tis_cap: expected a cap > 0, 0 .off. or -1 .auto."):
        load_config(None, ["algo.tis_cap=-2"])
