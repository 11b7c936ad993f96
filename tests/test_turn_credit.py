"""Turn-level credit (agentrl.algorithms.turn_credit): hand-computed values, a slow loop against the
vectorised version, and the trajectory-level estimators reproduced when there is one final reward."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algorithms import compute_advantages
from agentrl.algorithms.advantages import episode_scores, group_norm_scores, rloo_scores
from agentrl.algorithms.turn_credit import (
    TURN_ESTIMATORS,
    compute_turn_advantages,
    episode_turn_scores,
    scatter_turns,
    step_group_scores,
    turn_returns,
    turn_scores,
)

# ---------------------------------------------------------------- hand-computed values


def test_turn_returns_by_hand():
    r = torch.tensor([[0.0, 0.5, 1.0], [2.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    # row 0: G2 = 1, G1 = .5 + .5 * 1 = 1, G0 = 0 + .5 * 1 = .5 ; row 1 has one turn
    assert torch.allclose(turn_returns(r, m, 0.5), torch.tensor([[0.5, 1.0, 1.0], [2.0, 0.0, 0.0]]))
    assert torch.allclose(turn_returns(r, m, 1.0), torch.tensor([[1.5, 1.5, 1.0], [2.0, 0.0, 0.0]]))


def test_turn_scores_by_hand():
    # group 0: episodes with first-turn returns 1 and 0 (mean .5, unbiased variance .5); group 1 alone
    G = torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]])
    m = torch.tensor([[1, 1], [1, 0], [1, 1]])
    g = torch.tensor([0, 0, 1])
    # group_norm's spread: variance .5 of G_0, plus the turns' mean square distance from their episode's G_0
    # (1 at episode 0's second turn, 0 at the other two turns): sqrt(.5 + 1/3)
    s = math.sqrt(0.5 + 1 / 3)
    assert torch.allclose(turn_scores("group_norm", G, m, g, eps=0.0),
                          torch.tensor([[0.5 / s, 1.5 / s], [-0.5 / s, 0.0], [0.0, 0.0]]))
    assert torch.allclose(turn_scores("dr_grpo", G, m, g), torch.tensor([[0.5, 1.5], [-0.5, 0.0], [0.0, -2.0]]))
    # rloo: the other episode's first-turn return is the baseline; a group of one scores 0
    assert torch.allclose(turn_scores("rloo", G, m, g), torch.tensor([[1.0, 2.0], [-1.0, 0.0], [0.0, 0.0]]))
    assert torch.allclose(turn_scores("reinforce", G, m, g), G * m)


def test_identical_episodes_with_intermediate_rewards_do_not_explode():
    """Issue 43: four identical GuessNumber-like episodes (numbers found at turns 1 and 3): no spread of the
    first-turn returns, yet the later turns' returns differ from the mean. Divided by that std alone they
    were -5000 (turn_gamma 1, eps 1e-4); now bounded by sqrt(n K) + sqrt(n), trajectory-level gives 0."""
    tr = torch.tensor([[1.0, 0.0, 1.0, 0.0]] * 4)
    m, g = torch.ones(4, 4), torch.zeros(4, dtype=torch.long)
    for gamma in (1.0, 0.9):
        G = turn_returns(tr, m, gamma)
        out = turn_scores("group_norm", G, m, g, eps=1e-4)
        assert out.abs().max() <= math.sqrt(16) + math.sqrt(4) and torch.isfinite(out).all()
        assert out.abs().max() < 2.0, out  # the offsets over their own spread: O(1)


def test_step_group_scores_by_hand():
    G = torch.tensor([[1.0, 4.0], [3.0, 2.0], [5.0, 0.0]])
    m = torch.tensor([[1, 1], [1, 1], [1, 0]])
    g = torch.zeros(3, dtype=torch.long)
    # step groups: the three first turns (id 0), turns (0,1) and (1,1) (id 1); the padding's id is ignored.
    # Each turn less the mean of the other episodes' turns of its step group.
    ids = torch.tensor([[0, 1], [0, 1], [0, 7]])
    out = step_group_scores("dr_grpo", G, m, ids, g)
    assert torch.allclose(out, torch.tensor([[-3.0, 2.0], [0.0, -2.0], [3.0, 0.0]]))
    # group_norm: then divided by the step group's std: 2 for group 0, sqrt(2) for group 1
    out = step_group_scores("group_norm", G, m, ids, g, eps=0.0)
    r2 = math.sqrt(2)
    assert torch.allclose(out, torch.tensor([[-1.5, r2], [0.0, -r2], [1.5, 0.0]]))
    # a turn no other episode's turn shares a state with: less the other episodes' first-turn returns,
    # divided by the group's spread (variance 4 of [1, 3, 5]; strays 9, 1 over five turns: sqrt(4 + 2))
    lone = step_group_scores("group_norm", G, m, torch.tensor([[0, 1], [0, 2], [0, 3]]), g, eps=0.0)
    assert torch.allclose(lone[:, 1], torch.tensor([0.0, -1 / math.sqrt(6), 0.0]))
    # the episode's own other visits to a state are not its baseline: episode 0 twice in state 9
    twice = step_group_scores("dr_grpo", G, m, torch.tensor([[9, 9], [9, 1], [2, 0]]), g)
    assert torch.allclose(twice[0], torch.tensor([1.0 - 3.0, 4.0 - 3.0]))


def test_scatter_turns_by_hand():
    scores = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    episode_ids = torch.tensor([0, 1, 1])
    turn_ids = torch.tensor([[-1, 0, 0, 1], [-1, 0, -1, -1], [-1, -1, 1, 1]])
    mask = (turn_ids >= 0).float()
    mask[0, 3] = 0  # a masked token gets nothing even with a turn
    assert torch.allclose(scatter_turns(scores, episode_ids, turn_ids, mask),
                          torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 3.0, 0.0, 0.0], [0.0, 0.0, 4.0, 4.0]]))


def test_turn_advantages_by_hand():
    # two episodes of one task: [0 | 1] rewards (success at the 2nd turn) and [0 | 0]; turn_gamma .5
    tr = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    tm = torch.ones(2, 2)
    g = torch.tensor([0, 0])
    turn_ids = torch.tensor([[0, 0, -1, 1], [0, -1, 1, 1]])
    mask = (turn_ids >= 0).float()
    adv, _ = compute_turn_advantages("dr_grpo", tr, tm, g, tr.sum(1), torch.tensor([0, 1]), turn_ids, mask,
                                     turn_gamma=0.5)
    # G = [[.5, 1], [0, 0]]; baseline mean of G_0 = .25
    assert torch.allclose(adv, torch.tensor([[0.25, 0.25, 0.0, 0.75], [-0.25, 0.0, -0.25, -0.25]]))


# ---------------------------------------------------------------- a slow loop against the vectorised version


def _loop_returns(r, m, gamma):
    out = torch.zeros_like(r)
    for e in range(r.shape[0]):
        running = 0.0
        for k in reversed(range(r.shape[1])):
            if m[e, k]:
                running = float(r[e, k]) + gamma * running
                out[e, k] = running
    return out


def _loop_turn_scores(estimator, G, m, g, eps):
    out = torch.zeros_like(G)
    for e in range(G.shape[0]):
        peers = [j for j in range(G.shape[0]) if g[j] == g[e]]
        firsts = [float(G[j, 0]) for j in peers]
        mean = sum(firsts) / len(firsts)
        for k in range(G.shape[1]):
            if not m[e, k]:
                continue
            x = float(G[e, k])
            if estimator == "reinforce":
                out[e, k] = x
            elif estimator in ("dr_grpo", "reinforce_baseline"):
                out[e, k] = x - mean
            elif estimator == "rloo":
                others = [float(G[j, 0]) for j in peers if j != e]
                out[e, k] = x - sum(others) / len(others) if others else 0.0
            elif len(firsts) > 1:
                out[e, k] = (x - mean) / (_loop_spread(G, m, peers) + eps)
    return out


def _loop_spread(G, m, peers):
    firsts = [float(G[j, 0]) for j in peers]
    mean = sum(firsts) / len(firsts)
    var = sum((f - mean) ** 2 for f in firsts) / max(1, len(firsts) - 1)
    strays = [(float(G[j, k]) - float(G[j, 0])) ** 2 for j in peers for k in range(G.shape[1]) if m[j, k]]
    return math.sqrt(var + sum(strays) / max(1, len(strays)))


def _loop_step_scores(estimator, G, m, ids, g, eps):
    out = torch.zeros_like(G)
    cells = [(e, k) for e in range(G.shape[0]) for k in range(G.shape[1]) if m[e, k]]
    for e, k in cells:
        group = [(a, b) for a, b in cells if ids[a, b] == ids[e, k]]
        others = [float(G[a, b]) for a, b in group if a != e]
        x = float(G[e, k])
        if others:
            out[e, k] = x - sum(others) / len(others)
            if estimator == "group_norm":
                vals = [float(G[a, b]) for a, b in group]
                mean = sum(vals) / len(vals)
                out[e, k] /= math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) + eps
            continue
        peers = [j for j in range(G.shape[0]) if g[j] == g[e]]
        firsts = [float(G[j, 0]) for j in peers if j != e]
        if firsts:
            out[e, k] = x - sum(firsts) / len(firsts)
            if estimator == "group_norm":
                out[e, k] /= _loop_spread(G, m, peers) + eps
    return out


def _random_episodes(seed, E=9, K=5):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, K + 1, (E,), generator=gen)
    tm = (torch.arange(K)[None] < lengths[:, None]).float()
    tr = torch.randint(0, 3, (E, K), generator=gen).float() * tm * 0.5
    g = torch.randint(0, 3, (E,), generator=gen)
    states = torch.randint(0, 3, (E, K), generator=gen)
    step_ids = g[:, None] * 100 + torch.arange(K)[None] * 10 + states  # same task, turn and state
    return tr, tm, g, step_ids


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("estimator", TURN_ESTIMATORS)
def test_turn_credit_matches_loop(estimator, seed):
    tr, tm, g, ids = _random_episodes(seed)
    for gamma in (1.0, 0.7):
        G = turn_returns(tr, tm, gamma)
        assert torch.allclose(G, _loop_returns(tr, tm, gamma), atol=1e-6)
        assert torch.allclose(turn_scores(estimator, G, tm, g, 1e-6), _loop_turn_scores(estimator, G, tm, g, 1e-6),
                              atol=1e-5)
        assert torch.allclose(step_group_scores(estimator, G, tm, ids, g, 1e-6),
                              _loop_step_scores(estimator, G, tm, ids, g, 1e-6), atol=1e-5)


# ---------------------------------------------------------------- one final reward: the old estimators


def _one_row_per_episode(tm):
    """Rows of 2 generated tokens per turn, then a feedback token: turn_ids and mask (E, 3K)."""
    E, K = tm.shape
    turn_ids = torch.full((E, 3 * K), -1)
    for e in range(E):
        for k in range(int(tm[e].sum())):
            turn_ids[e, 3 * k:3 * k + 2] = k
    return turn_ids, (turn_ids >= 0).float()


@pytest.mark.parametrize("estimator", TURN_ESTIMATORS)
def test_one_final_reward_gives_the_trajectory_level_advantages(estimator):
    tr, tm, g, ids = _random_episodes(3)
    last = tm.sum(1).long() - 1
    final = torch.zeros_like(tr)
    final[torch.arange(len(tr)), last] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    rewards = final.sum(1)
    turn_ids, mask = _one_row_per_episode(tm)
    kl = torch.rand(mask.shape, generator=torch.Generator().manual_seed(0))
    for kw in ({}, {"kl": kl, "kl_coef": 0.1}):
        old_adv, old_ret = compute_advantages(estimator, rewards, g, mask, **kw)
        for turn_gamma in (1.0, None):
            adv, ret = compute_turn_advantages(estimator, final, tm, g, rewards, torch.arange(len(g)), turn_ids, mask,
                                               step_ids=ids, turn_gamma=turn_gamma, step_weight=0.0, **kw)
            assert torch.allclose(adv, old_adv, atol=1e-5), (estimator, turn_gamma, kw)
            assert torch.allclose(ret, old_ret, atol=1e-5)


def test_step_groups_with_one_final_reward_score_the_root_leaving_each_episode_out():
    """Every episode of a task starts from the task's state: with one final reward that step group's score
    is the group's, each episode's baseline the other episodes' mean (the rloo form: n/(n-1) times
    group_norm's numerator); later turns in states no other episode reached fall back to the other
    episodes' first-turn returns, the same here."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    tm = torch.ones(4, 2)
    final = torch.stack([torch.zeros(4), rewards], 1)
    g = torch.tensor([0, 0, 0, 0])
    ids = torch.tensor([[0, 1], [0, 2], [0, 3], [0, 4]])
    s = step_group_scores("group_norm", turn_returns(final, tm), tm, ids, g, 1e-6)
    assert torch.allclose(s[:, 0], 4 / 3 * group_norm_scores(rewards, g, 1e-6), atol=1e-5)
    assert torch.allclose(s[:, 1], s[:, 0])
    both = episode_turn_scores("group_norm", final, tm, g, rewards, ids, step_weight=0.5)
    assert torch.allclose(both[:, 0], (1 + 0.5 * 4 / 3) * group_norm_scores(rewards, g, 1e-6), atol=1e-5)


def test_an_episode_of_several_rows_counts_once_in_its_group():
    """Episode 0 is two rows (its context was reset): the group baseline is still over three episodes."""
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])  # rows: episode 0 twice, episodes 1 and 2
    groups = torch.tensor([5, 5, 5, 5])
    episode_ids = torch.tensor([0, 0, 1, 2])
    out = episode_scores(rloo_scores, rewards, groups, episode_ids)
    assert torch.allclose(out, torch.tensor([1.0, 1.0, -0.5, -0.5]))
    mask = torch.ones(4, 3)
    adv, _ = compute_advantages("group_norm", rewards, groups, mask, episode_ids=episode_ids)
    expect = group_norm_scores(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([5, 5, 5]))
    assert torch.allclose(adv[:, 0], expect[episode_ids])
    # without episode_ids the duplicated row would move the baseline
    naive, _ = compute_advantages("group_norm", rewards, groups, mask)
    assert not torch.allclose(naive[:, 0], adv[:, 0])


def test_turn_credit_rejects_gae():
    with pytest.raises(ValueError, match="outcome estimators"):
        turn_scores("gae", torch.zeros(1, 1), torch.ones(1, 1), torch.zeros(1, dtype=torch.long))


# ---------------------------------------------------------------- every path against a plain loop, degenerate cases


def _degenerate_batch(seed: int):
    """Episodes in groups that include the degenerate ones: equal rewards, one member, all zero (all
    failed), random turn counts, intermediate rewards, and episodes split into several rows (a reset)."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [4, 4, 1, 3, 2, 5]  # group 1: equal rewards; group 2: one member; group 3: all zero
    g = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    E, K = len(g), 4
    lengths = torch.randint(1, K + 1, (E,), generator=gen)
    tm = (torch.arange(K)[None] < lengths[:, None]).float()
    tr = (torch.randint(-2, 3, (E, K), generator=gen).float() * 0.5) * tm
    tm[g == 1] = 1.0
    tr[g == 1] = torch.tensor([1.0, 0.0, 0.5, 0.0])  # identical episodes with intermediate rewards
    tr[g == 3] = 0.0
    step_ids = g[:, None] * 10 + torch.randint(0, 3, (E, K), generator=gen)
    rows, turn_ids = [], []
    for e in range(E):  # one row per episode, two rows (split after its first turn) for every third one
        n = int(tm[e].sum())
        cuts = [(0, 1), (1, n)] if e % 3 == 0 and n > 1 else [(0, n)]
        for lo, hi in cuts:
            ids = torch.full((3 * K,), -1)
            for k in range(lo, hi):
                ids[3 * k:3 * k + 2] = k
            rows.append(e)
            turn_ids.append(ids)
    return tr, tm, g, step_ids, torch.tensor(rows), torch.stack(turn_ids)


def _loop_path(estimator, tr, tm, g, step_ids, rows, turn_ids, turn_gamma, step_weight, eps):
    """The advantage of every generated token by plain loops: the episode's score (turn_gamma None: its
    trajectory-level score) plus step_weight times the step-group score of its turn."""
    G = _loop_returns(tr, tm, 1.0 if turn_gamma is None else turn_gamma)
    if turn_gamma is None:
        R = tr.sum(1)
        per = torch.zeros_like(G)
        for e in range(len(g)):
            peers = [float(R[j]) for j in range(len(g)) if g[j] == g[e]]
            mean = sum(peers) / len(peers)
            others = [float(R[j]) for j in range(len(g)) if g[j] == g[e] and j != e]
            score = {"reinforce": float(R[e]), "dr_grpo": float(R[e]) - mean,
                     "reinforce_baseline": float(R[e]) - mean,
                     "rloo": float(R[e]) - sum(others) / len(others) if others else 0.0}.get(estimator)
            if estimator == "group_norm":
                std = math.sqrt(sum((p - mean) ** 2 for p in peers) / max(1, len(peers) - 1))
                score = (float(R[e]) - mean) / (std + eps) if len(peers) > 1 else 0.0
            per[e] = score * tm[e]
    else:
        per = _loop_turn_scores(estimator, G, tm, g, eps)
    if step_weight:
        per = per + step_weight * _loop_step_scores(estimator, G, tm, step_ids, g, eps)
    out = torch.zeros(turn_ids.shape)
    for b in range(len(rows)):
        for a in range(turn_ids.shape[1]):
            if turn_ids[b, a] >= 0:
                out[b, a] = per[rows[b], turn_ids[b, a]]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("estimator", TURN_ESTIMATORS)
def test_every_advantage_path_matches_a_plain_loop_and_stays_bounded(estimator, seed):
    """Issue 43 (a): trajectory-level, turn-level and step-group credit against plain loops on batches with
    degenerate groups; every advantage finite and within the stated bound: group_norm |A| <= (1 + w)
    (sqrt(2 n K) + sqrt(n)) for n episodes of at most K turns in a group and step weight w; the others
    |A| <= (1 + w) 2 max|G|; reinforce and reinforce_baseline, whitened over the batch's T tokens, sqrt(T)."""
    tr, tm, g, step_ids, rows, turn_ids = _degenerate_batch(seed)
    mask = (turn_ids >= 0).float()
    n, K = 5, tr.shape[1]
    for turn_gamma, w in ((None, 0.0), (1.0, 0.0), (0.9, 0.0), (1.0, 0.5), (None, 1.0)):
        adv, ret = compute_turn_advantages(estimator, tr, tm, g, tr.sum(1), rows, turn_ids, mask, step_ids=step_ids,
                                           turn_gamma=turn_gamma, step_weight=w, eps=1e-6)
        want = _loop_path(estimator, tr, tm, g, step_ids, rows, turn_ids, turn_gamma, w, 1e-6)
        assert torch.allclose(ret, want, atol=1e-5), (estimator, turn_gamma, w)
        assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
        G = turn_returns(tr, tm, 1.0 if turn_gamma is None else turn_gamma)
        bound = (1 + w) * (math.sqrt(2 * n * K) + math.sqrt(n) if estimator == "group_norm" else 2 * G.abs().max())
        assert ret.abs().max() <= bound + 1e-6, (estimator, turn_gamma, w, ret.abs().max(), bound)
        if estimator in ("reinforce", "reinforce_baseline"):
            assert adv.abs().max() <= math.sqrt(mask.sum()) + 1e-6
        if turn_gamma is None and not w:  # the trajectory-level path itself, episodes counted once
            traj, _ = compute_advantages(estimator, tr.sum(1)[rows], g[rows], mask, episode_ids=rows)
            assert torch.allclose(traj * mask, adv * mask, atol=1e-5)
