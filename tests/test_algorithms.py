"""Estimators and losses: hand-computed values, a slow loop version, and micro-batch invariance."""

import math

import pytest
import torch

from agentrl import algorithms as A

# ---------------------------------------------------------------- hand-computed values


def test_group_norm_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 5.0])
    g = torch.tensor([0, 0, 1, 1, 2])
    # group 0: mean .5, unbiased std sqrt(.5) = .70711 -> +-.70711 ; group 2 has one sample -> 0
    out = A.group_norm_scores(r, g, eps=0.0)
    assert torch.allclose(out, torch.tensor([0.70711, -0.70711, -0.70711, 0.70711, 0.0]), atol=1e-4)


def test_weight_negative_by_hand():
    adv = torch.tensor([[0.5, -1.0, 0.0], [-2.0, 3.0, -0.25]])
    assert A.weight_negative(adv, 1.0) is adv  # off: the same tensor
    assert torch.equal(A.weight_negative(adv, 0.0), torch.tensor([[0.5, 0.0, 0.0], [0.0, 3.0, 0.0]]))
    assert torch.equal(A.weight_negative(adv, 0.25), torch.tensor([[0.5, -0.25, 0.0], [-0.5, 3.0, -0.0625]]))
    # a degenerate group (all equal rewards) has zero advantages: unchanged, no NaN
    zero = A.group_norm_scores(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0, 0, 0]))
    assert torch.equal(A.weight_negative(zero, 0.0), torch.zeros(3))


def test_dr_grpo_and_rloo_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 2.0])
    g = torch.tensor([7, 7, 7, 7])
    assert torch.allclose(A.dr_grpo_scores(r, g), torch.tensor([0.25, -0.75, -0.75, 1.25]))
    # rloo: r_i - mean of the other three: 1-2/3, 0-1, 0-1, 2-1/3
    assert torch.allclose(A.rloo_scores(r, g), torch.tensor([1 / 3, -1.0, -1.0, 5 / 3]))
    assert A.rloo_scores(torch.tensor([3.0]), torch.tensor([0])).item() == 0.0


def test_token_level_rewards_and_returns_by_hand():
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 0]])
    kl = torch.tensor([[9.0, 0.1, 0.2, 0.3], [9.0, 9.0, 0.5, 9.0]])
    tr = A.token_level_rewards(torch.tensor([1.0, 2.0]), mask, kl, kl_coef=0.5)
    assert torch.allclose(tr, torch.tensor([[0, -0.05, -0.1, 0.85], [0, 0, 1.75, 0]]))
    ret = A.discounted_returns(tr, mask, gamma=0.5)
    # row 0: G3=.85, G2=-.1+.5*.85=.325, G1=-.05+.5*.325=.1125
    assert torch.allclose(ret, torch.tensor([[0, 0.1125, 0.325, 0.85], [0, 0, 1.75, 0]]))


def test_returns_skip_feedback_tokens():
    # tokens 2 is environment feedback: the return passes through it undiscounted
    mask = torch.tensor([[1, 1, 0, 1]])
    tr = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    assert torch.allclose(A.discounted_returns(tr, mask, 0.5), torch.tensor([[0.25, 0.5, 0.0, 1.0]]))


def test_gae_by_hand():
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.6, 0.7]])
    m = torch.ones(1, 3)
    adv, ret = A.gae(r, v, m, gamma=0.9, lam=0.8)
    d2 = 1.0 - 0.7
    d1 = 0.0 + 0.9 * 0.7 - 0.6
    d0 = 0.0 + 0.9 * 0.6 - 0.5
    a2 = d2
    a1 = d1 + 0.72 * a2
    a0 = d0 + 0.72 * a1
    assert torch.allclose(adv, torch.tensor([[a0, a1, a2]]))
    assert torch.allclose(ret, adv + v)


def test_whiten_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    m = torch.tensor([[1, 1, 1, 0]])
    out = A.masked_whiten(x, m, eps=0.0)
    assert torch.allclose(out, torch.tensor([[-1.0, 0.0, 1.0, 0.0]]))


def test_policy_loss_by_hand():
    lp = torch.tensor([[math.log(1.5), math.log(0.5), 0.0]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    m = torch.tensor([[1, 1, 0]])
    loss, metrics = A.policy_loss(lp, old, adv, m, clip_low=0.2, clip_high=0.3)
    # token 0: ratio 1.5, A=1 -> min(1.5, 1.3) = 1.3; token 1: ratio .5, A=-1 -> min(-.5, -.8) = -.8
    assert loss.item() == pytest.approx(-(1.3 - 0.8) / 2)
    assert metrics["clipfrac"].item() == pytest.approx(1.0)
    # dual clip c=3 bounds negative-advantage losses by -c*A = 3
    lp2 = torch.tensor([[math.log(5.0)]])
    loss2, _ = A.policy_loss(lp2, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1), dual_clip=3.0)
    assert loss2.item() == pytest.approx(3.0)
    loss3, _ = A.policy_loss(lp2, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert loss3.item() == pytest.approx(5.0)


def test_gspo_sequence_ratio_by_hand():
    lp = torch.tensor([[math.log(2.0), 0.0]], requires_grad=True)
    loss, metrics = A.policy_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
                                  clip_low=10, clip_high=10, ratio_type="sequence")
    s = math.sqrt(2.0)  # exp(mean(log 2, 0))
    assert loss.item() == pytest.approx(-s)
    loss.backward()
    assert torch.allclose(lp.grad, torch.tensor([[-s / 2, -s / 2]]))


def test_aggregations_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert A.agg_loss(x, m, "token-mean").item() == pytest.approx(10 / 4)
    assert A.agg_loss(x, m, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert A.agg_loss(x, m, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert A.agg_loss(x, m, "seq-mean-token-sum-norm", max_len=5).item() == pytest.approx(10 / 10)
    with pytest.raises(ValueError, match="valid"):
        A.agg_loss(x, m, "nope")


def test_value_loss_by_hand():
    v = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    ret = torch.tensor([[2.0, 1.0]])
    m = torch.ones(1, 2)
    # token 0: unclipped (1-2)^2=1, clipped v=.2 -> (.2-2)^2=3.24 -> 3.24; token 1: 1
    assert A.value_loss(v, old, ret, m, clip=0.2).item() == pytest.approx(0.5 * (3.24 + 1) / 2)
    assert A.value_loss(v, old, ret, m, clip=None).item() == pytest.approx(0.5 * (1 + 1) / 2)


def test_kl_estimators_by_hand():
    lp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    d = math.log(2.0)
    assert A.kl_penalty(lp, ref, "k1").item() == pytest.approx(d)
    assert A.kl_penalty(lp, ref, "k2").item() == pytest.approx(0.5 * d * d)
    assert A.kl_penalty(lp, ref, "k3").item() == pytest.approx(0.5 - math.log(0.5) - 1)
    with pytest.raises(ValueError, match="k1, k2, k3"):
        A.kl_penalty(lp, ref, "k9")


def test_kl_controllers_by_hand():
    c = A.AdaptiveKLController(0.1, target=1.0, horizon=100)
    c.update(current_kl=2.0, n_samples=10)  # error clipped to .2 -> x1.02
    assert c.value == pytest.approx(0.102)
    c.update(current_kl=0.9, n_samples=100)  # error -.1 -> x0.9
    assert c.value == pytest.approx(0.0918)
    f = A.FixedKLController(0.05)
    f.update(3.0, 10)
    assert f.value == 0.05


def test_entropy_by_hand():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    assert torch.allclose(A.entropy_from_logits(logits), torch.tensor([[math.log(4), 0.0]]), atol=1e-6)


def test_compute_advantages_estimators_by_hand():
    r = torch.tensor([1.0, 0.0])
    g = torch.tensor([0, 0])
    m = torch.tensor([[1, 1], [1, 0]])
    adv, _ = A.compute_advantages("group_norm", r, g, m, eps=0.0)
    assert torch.allclose(adv, torch.tensor([[0.70711, 0.70711], [-0.70711, 0.0]]), atol=1e-4)
    adv, _ = A.compute_advantages("rloo", r, g, m)
    assert torch.allclose(adv, torch.tensor([[1.0, 1.0], [-1.0, 0.0]]))
    adv, ret = A.compute_advantages("reinforce", r, g, m)
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    # whiten [1,1,0] (mean 2/3, std sqrt(1/3))
    s = math.sqrt(1 / 3)
    assert torch.allclose(adv, torch.tensor([[(1 / 3) / s, (1 / 3) / s], [(-2 / 3) / s, 0.0]]), atol=1e-5)
    with pytest.raises(ValueError, match="group_norm"):
        A.compute_advantages("grpo", r, g, m)
    with pytest.raises(ValueError, match="critic"):
        A.compute_advantages("gae", r, g, m)


# ---------------------------------------------------------------- slow loops vs vectorised


def _rand_batch(seed=0, B=12, T=9):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=gen) > 0.3).long()
    mask[:, 0] = 0
    mask[:, 1] = 1
    rewards = torch.randint(0, 3, (B,), generator=gen).float()
    groups = torch.arange(B) // 4
    return gen, mask, rewards, groups


def _loop_group_scores(kind, r, g):
    out = []
    for i in range(len(r)):
        peers = [r[j].item() for j in range(len(r)) if g[j] == g[i]]
        n = len(peers)
        mean = sum(peers) / n
        if kind == "group_norm":
            std = math.sqrt(sum((p - mean) ** 2 for p in peers) / (n - 1)) if n > 1 else 0.0
            out.append((r[i].item() - mean) / (std + 1e-6) if n > 1 else 0.0)
        elif kind == "dr_grpo":
            out.append(r[i].item() - mean)
        else:
            out.append(r[i].item() - (sum(peers) - r[i].item()) / (n - 1) if n > 1 else 0.0)
    return torch.tensor(out)


@pytest.mark.parametrize("kind", ["group_norm", "dr_grpo", "rloo"])
def test_group_scores_match_loop(kind):
    _, _, r, g = _rand_batch()
    fn = {"group_norm": A.group_norm_scores, "dr_grpo": A.dr_grpo_scores, "rloo": A.rloo_scores}[kind]
    assert torch.allclose(fn(r, g), _loop_group_scores(kind, r, g), atol=1e-5)


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_weight_negative_matches_loop(weight):
    gen, mask, r, g = _rand_batch(3)
    adv, _ = A.compute_advantages("group_norm", r, g, mask)
    out = A.weight_negative(adv, weight)
    loop = [[a * weight if a < 0 else a for a in row] for row in adv.tolist()]
    assert torch.allclose(out, torch.tensor(loop), atol=0) and not torch.isnan(out).any()


def test_returns_and_gae_match_loop():
    gen, mask, r, _ = _rand_batch(1)
    tr = torch.randn(mask.shape, generator=gen) * mask
    values = torch.randn(mask.shape, generator=gen)
    gamma, lam = 0.9, 0.7
    ret = A.discounted_returns(tr, mask, gamma)
    adv, _ = A.gae(tr, values, mask, gamma, lam)
    for b in range(mask.shape[0]):
        idx = [t for t in range(mask.shape[1]) if mask[b, t]]
        g_run, a_run, v_next = 0.0, 0.0, 0.0
        for t in reversed(idx):
            g_run = tr[b, t].item() + gamma * g_run
            assert ret[b, t].item() == pytest.approx(g_run, abs=1e-5)
            delta = tr[b, t].item() + gamma * v_next - values[b, t].item()
            a_run = delta + gamma * lam * a_run
            v_next = values[b, t].item()
            assert adv[b, t].item() == pytest.approx(a_run, abs=1e-5)


def test_policy_loss_matches_loop():
    gen, mask, _, _ = _rand_batch(2)
    lp = torch.randn(mask.shape, generator=gen) * 0.3
    old = torch.randn(mask.shape, generator=gen) * 0.3
    adv = torch.randn(mask.shape, generator=gen)
    for agg in A.AGGREGATIONS:
        loss, _ = A.policy_loss(lp, old, adv, mask, clip_low=0.1, clip_high=0.28, dual_clip=3.0, agg=agg,
                                max_len=mask.shape[1])
        per_seq, tot, ntok = [], 0.0, 0
        for b in range(mask.shape[0]):
            toks = []
            for t in range(mask.shape[1]):
                if not mask[b, t]:
                    continue
                ratio = math.exp(lp[b, t].item() - old[b, t].item())
                a = adv[b, t].item()
                lt = -min(ratio * a, min(max(ratio, 0.9), 1.28) * a)
                if a < 0:
                    lt = min(lt, -3.0 * a)
                toks.append(lt)
            per_seq.append(toks)
            tot += sum(toks)
            ntok += len(toks)
        B = len(per_seq)
        expected = {"token-mean": tot / ntok,
                    "seq-mean-token-mean": sum(sum(s) / len(s) for s in per_seq) / B,
                    "seq-mean-token-sum": tot / B,
                    "seq-mean-token-sum-norm": tot / (B * mask.shape[1])}[agg]
        assert loss.item() == pytest.approx(expected, rel=1e-5), agg


def test_kl_and_value_loss_match_loop():
    gen, mask, _, _ = _rand_batch(3)
    lp, ref = torch.randn(mask.shape, generator=gen), torch.randn(mask.shape, generator=gen)
    k3 = A.kl_penalty(lp, ref, "k3")
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            d = ref[b, t].item() - lp[b, t].item()
            assert k3[b, t].item() == pytest.approx(math.exp(d) - d - 1, rel=1e-5, abs=1e-6)
    v, old, ret = (torch.randn(mask.shape, generator=gen) for _ in range(3))
    loss = A.value_loss(v, old, ret, mask, clip=0.1)
    tot, n = 0.0, 0
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[b, t]:
                vc = old[b, t].item() + min(max(v[b, t].item() - old[b, t].item(), -0.1), 0.1)
                tot += max((v[b, t].item() - ret[b, t].item()) ** 2, (vc - ret[b, t].item()) ** 2)
                n += 1
    assert loss.item() == pytest.approx(0.5 * tot / n, rel=1e-5)


# ---------------------------------------------------------------- micro-batch invariance


@pytest.mark.parametrize("agg", A.AGGREGATIONS)
@pytest.mark.parametrize("ratio_type", ["token", "sequence"])
def test_micro_batches_give_same_loss_and_grad(agg, ratio_type):
    gen, mask, _, _ = _rand_batch(4)
    base = torch.randn(mask.shape, generator=gen) * 0.2
    old = torch.randn(mask.shape, generator=gen) * 0.2
    adv = torch.randn(mask.shape, generator=gen)
    kw = dict(agg=agg, ratio_type=ratio_type, max_len=mask.shape[1],
              num_tokens=mask.sum().item(), num_seqs=mask.shape[0])
    full_lp = base.clone().requires_grad_(True)
    full, _ = A.policy_loss(full_lp, old, adv, mask, **kw)
    full.backward()
    micro_lp = base.clone().requires_grad_(True)
    total = 0.0
    for idx in torch.arange(mask.shape[0]).split(5):
        part, _ = A.policy_loss(micro_lp[idx], old[idx], adv[idx], mask[idx], **kw)
        part.backward()
        total += part.item()
    assert total == pytest.approx(full.item(), rel=1e-5)
    assert torch.allclose(micro_lp.grad, full_lp.grad, atol=1e-6)
