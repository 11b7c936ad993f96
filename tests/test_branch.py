"""Branch-point credit (agentrl.algorithms.branch): hand-computed cases, a slow reference on random groups,
and the learner's batch advantages with ``algo.branch_window``."""

from __future__ import annotations

import random

import pytest
import torch

from agentrl.algorithms.branch import branch_points, branch_window


def _batch(rows: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    seqs = torch.tensor([s for s, _ in rows], dtype=torch.long)
    mask = torch.tensor([m for _, m in rows], dtype=torch.float32)
    return seqs, mask


def test_branch_points_by_hand():
    actions = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 7, 3, 4], [1, 1], [4, 4], [4, 4]]
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    groups = [0, 0, 0, 1, 2, 2]
    # row 0 shares [1, 2] with row 1 and [1] with row 2: the longest prefix with a failure is 2;
    # rows 1 and 2 have one sibling of another reward (row 0); row 3 is alone; rows 4-5 are equal
    assert branch_points(actions, rewards, groups) == [2, 2, 1, None, 2, 2]


def test_branch_window_by_hand():
    seqs, mask = _batch([
        ([9, 9, 1, 2, 3, 4], [0, 1, 1, 1, 1]),   # actions 1 2 3 4, reward 1
        ([9, 9, 1, 2, 5, 6], [0, 1, 1, 1, 1]),   # actions 1 2 5 6, reward 0
        ([9, 9, 1, 7, 3, 4], [0, 1, 1, 1, 1]),   # actions 1 7 3 4, reward 0
        ([9, 8, 1, 1, 0, 0], [0, 1, 1, 0, 0]),   # alone in its group
        ([9, 1, 2, 8, 3, 0], [1, 1, 0, 1, 0]),   # two turns: actions 1 2 | 3 (8 is the env's feedback)
        ([9, 1, 2, 8, 4, 0], [1, 1, 0, 1, 0]),   # two turns: actions 1 2 | 4
        ([9, 1, 2, 0, 0, 0], [1, 1, 0, 0, 0]),   # equal to the next row, another reward
        ([9, 1, 2, 0, 0, 0], [1, 1, 0, 0, 0]),
    ])
    groups = torch.tensor([0, 0, 0, 1, 2, 2, 3, 3])
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    one = branch_window(seqs, mask, groups, rewards, window=1)
    assert one.tolist() == [
        [0, 0, 0, 1, 0], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [0, 1, 1, 0, 0],
        [0, 0, 0, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    to_end = branch_window(seqs, mask, groups, rewards, window=0)
    assert to_end.tolist() == [
        [0, 0, 0, 1, 1], [0, 0, 0, 1, 1], [0, 0, 1, 1, 1], [0, 1, 1, 0, 0],
        [0, 0, 0, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="window"):
        branch_window(seqs, mask, groups, rewards, window=-1)


def _slow(seqs: torch.Tensor, mask: torch.Tensor, groups: torch.Tensor, rewards: torch.Tensor, window: int
          ) -> torch.Tensor:
    """Position by position: a generated token is kept when, counting generated tokens only, it lies in
    [d, d + window) where d is the most generated tokens the sample shares from its start with a sibling
    of another reward."""
    B, A = mask.shape
    out = torch.zeros(B, A)
    for i in range(B):
        gen_i = [t for t in range(A) if mask[i, t] > 0]
        best = None
        for j in range(B):
            if j == i or groups[j] != groups[i] or rewards[j] == rewards[i]:
                continue
            gen_j = [t for t in range(A) if mask[j, t] > 0]
            d = 0
            for a, b in zip(gen_i, gen_j):
                if seqs[i, a + 1] != seqs[j, b + 1]:
                    break
                d += 1
            best = d if best is None else max(best, d)
        for k, t in enumerate(gen_i):
            if best is None or (best <= k and (window == 0 or k < best + window)):
                out[i, t] = 1.0
    return out


@pytest.mark.parametrize("seed", range(6))
def test_branch_window_matches_a_slow_loop(seed: int):
    rng = random.Random(seed)
    B, T = 24, 14
    groups = torch.tensor([i // 4 for i in range(B)])
    rewards = torch.tensor([float(rng.random() < 0.5) for _ in range(B)])
    rewards[0:4] = 1.0  # a group that agrees
    seqs = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T - 1)
    for i in range(B):
        start = 4 * (i // 4)
        for t in range(T):  # copy a sibling's token often, so prefixes are shared
            seqs[i, t] = seqs[start, t] if i != start and rng.random() < 0.85 else rng.randrange(3)
        n = rng.randrange(2, T - 1)
        for t in range(1, n):
            mask[i, t] = float(rng.random() < 0.8)  # gaps: the env's feedback between turns
    for window in (0, 1, 3):
        got = branch_window(seqs, mask, groups, rewards, window=window)
        assert torch.equal(got, _slow(seqs, mask, groups, rewards, window))
        assert torch.all(got <= mask)


@pytest.mark.parametrize("turn_gamma", [None, 1.0])
def test_batch_advantages_keep_the_branch_window(turn_gamma):
    """``algo.branch_window`` zeroes either credit path's advantages outside each sample's window and keeps them
    inside; the groups that agree keep theirs (0 under group_norm)."""
    from agentrl.config import AlgoConfig
    from agentrl.training.credit import batch_advantages, sample_metrics
    from agentrl.training.experience import EpisodeTable, Experience

    seqs, mask = _batch([
        ([9, 9, 1, 2, 3, 4], [0, 1, 1, 1, 1]),
        ([9, 9, 1, 2, 5, 6], [0, 1, 1, 1, 1]),
        ([9, 9, 1, 7, 3, 4], [0, 1, 1, 1, 1]),
        ([9, 9, 1, 7, 3, 0], [0, 1, 1, 1, 0]),
        ([9, 8, 1, 1, 0, 0], [0, 1, 1, 0, 0]),
        ([9, 8, 1, 2, 0, 0], [0, 1, 1, 0, 0]),
    ])
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 0, 1, 1])
    E = len(rewards)
    exp = Experience(sequences=seqs, attention_mask=(seqs > 0).long(), action_mask=mask, rewards=rewards,
                     group_ids=groups, episode_ids=torch.arange(E),
                     turn_ids=torch.where(mask > 0, 0, -1).long(),
                     episodes=EpisodeTable(rewards=rewards, group_ids=groups, turn_rewards=rewards[:, None].clone(),
                                           turn_mask=torch.ones(E, 1), step_ids=torch.arange(E)[:, None]))
    full, _ = batch_advantages(exp, AlgoConfig(turn_gamma=turn_gamma))
    for window in (0, 1, 2):
        adv, _ = batch_advantages(exp, AlgoConfig(turn_gamma=turn_gamma, branch_window=window))
        keep = branch_window(seqs, mask, groups, rewards, window)
        assert torch.equal(adv, full * keep)
    one, _ = batch_advantages(exp, AlgoConfig(turn_gamma=turn_gamma, branch_window=1))
    # row 0 (a success) parts from row 1 after [1, 2]; row 2 (a failure) shares [1, 7, 3] with row 3 (a success),
    # which ends there: row 2's fourth token is its branch, row 3 has none of its own
    assert one[0].tolist()[3] > 0 and one[0].count_nonzero() == 1
    assert one[1].tolist()[3] < 0 and one[1].count_nonzero() == 1
    assert one[2].tolist()[4] < 0 and one[2].count_nonzero() == 1 and one[3].count_nonzero() == 0
    assert torch.equal(one[4:], full[4:])
    # kept tokens of the rows with a sibling of another reward (rows 0-3: 1 + 1 + 1 + 0 of 4 + 4 + 4 + 3 generated)
    assert sample_metrics(exp, AlgoConfig(branch_window=1))["credit/branch_kept"] == pytest.approx(3 / 15)
    assert "credit/branch_kept" not in sample_metrics(exp, AlgoConfig())


@pytest.mark.parametrize("overrides,message", [
    (["algo.branch_window=-1"], "algo.branch_window: expected a token count >= 0"),
    (["algo.branch_window=true"], "algo.branch_window"),
    (["algo.branch_window=1", "algo.estimator=gae"], "the gae estimator has no groups"),
    (["algo.branch_window=1", "rollout.samples=turn"], "an episode is several samples"),
    (["algo.branch_window=0", "rollout.context.policy=truncate"], "an episode is several samples"),
])
def test_branch_window_is_checked_at_load(overrides, message):
    from agentrl.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert message in str(e.value) and "\n" not in str(e.value)
