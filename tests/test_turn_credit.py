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
    # group 0: episodes with first-turn returns 1 and 0 (mean .5, unbiased std sqrt(.5)); group 1 alone
    G = torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 1.0]])
    m = torch.tensor([[1, 1], [1, 0], [1, 1]])
    g = torch.tensor([0, 0, 1])
    s = math.sqrt(0.5)
    assert torch.allclose(turn_scores("group_norm", G, m, g, eps=0.0),
                          torch.tensor([[0.5 / s, 1.5 / s], [-0.5 / s, 0.0], [0.0, 0.0]]))
    assert torch.allclose(turn_scores("dr_grpo", G, m, g), torch.tensor([[0.5, 1.5], [-0.5, 0.0], [0.0, -2.0]]))
    # rloo: the other episode's first-turn return is the baseline; a group of one scores 0
    assert torch.allclose(turn_scores("rloo", G, m, g), torch.tensor([[1.0, 2.0], [-1.0, 0.0], [0.0, 0.0]]))
    assert torch.allclose(turn_scores("reinforce", G, m, g), G * m)


def test_step_group_scores_by_hand():
    G = torch.tensor([[1.0, 4.0], [3.0, 2.0], [5.0, 0.0]])
    m = torch.tensor([[1, 1], [1, 1], [1, 0]])
    # step groups: the three first turns (id 0), turns (0,1) and (1,1) (id 1); the padding's id is ignored
    ids = torch.tensor([[0, 1], [0, 1], [0, 7]])
    out = step_group_scores("dr_grpo", G, m, ids)
    assert torch.allclose(out, torch.tensor([[-2.0, 1.0], [0.0, -1.0], [2.0, 0.0]]))
    # group_norm: group 0 has std 2, group 1 std sqrt(2)
    out = step_group_scores("group_norm", G, m, ids, eps=0.0)
    assert torch.allclose(out, torch.tensor([[-1.0, 1 / math.sqrt(2)], [0.0, -1 / math.sqrt(2)], [1.0, 0.0]]))
    # a step group of one scores 0
    lone = step_group_scores("group_norm", G, m, torch.tensor([[0, 1], [0, 2], [0, 3]]), eps=0.0)
    assert torch.allclose(lone[:, 1], torch.zeros(3))


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
            else:
                if len(firsts) < 2:
                    continue
                std = math.sqrt(sum((f - mean) ** 2 for f in firsts) / (len(firsts) - 1))
                out[e, k] = (x - mean) / (std + eps)
    return out


def _loop_step_scores(estimator, G, m, ids, eps):
    out = torch.zeros_like(G)
    cells = [(e, k) for e in range(G.shape[0]) for k in range(G.shape[1]) if m[e, k]]
    for e, k in cells:
        peers = [float(G[a, b]) for a, b in cells if ids[a, b] == ids[e, k]]
        x, mean = float(G[e, k]), sum(peers) / len(peers)
        if len(peers) < 2:
            continue
        if estimator == "group_norm":
            std = math.sqrt(sum((p - mean) ** 2 for p in peers) / (len(peers) - 1))
            out[e, k] = (x - mean) / (std + eps)
        elif estimator == "rloo":
            out[e, k] = x - (sum(peers) - x) / (len(peers) - 1)
        else:
            out[e, k] = x - mean
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
        assert torch.allclose(step_group_scores(estimator, G, tm, ids, 1e-6),
                              _loop_step_scores(estimator, G, tm, ids, 1e-6), atol=1e-5)


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


def test_step_groups_with_one_final_reward_score_the_root_as_the_group():
    """Every episode of a task starts from the task's state: with one final reward that step group's score
    is the group's own; later turns in states no other episode reached score 0."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    tm = torch.ones(4, 2)
    final = torch.stack([torch.zeros(4), rewards], 1)
    g = torch.tensor([0, 0, 0, 0])
    ids = torch.tensor([[0, 1], [0, 2], [0, 3], [0, 4]])
    s = step_group_scores("group_norm", turn_returns(final, tm), tm, ids, 1e-6)
    assert torch.allclose(s[:, 0], group_norm_scores(rewards, g, 1e-6))
    assert torch.allclose(s[:, 1], torch.zeros(4))
    both = episode_turn_scores("group_norm", final, tm, g, rewards, ids, step_weight=0.5)
    assert torch.allclose(both[:, 0], 1.5 * group_norm_scores(rewards, g, 1e-6))


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
