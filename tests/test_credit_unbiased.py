"""The shipped credit estimators give an unbiased policy gradient when the policy decides when to stop.

An enumerable episodic MDP: three states on a ring, a tabular softmax policy that at each of at most
three turns stops (a terminal reward that depends on the state), advances to the next state or stays
(each with an intermediate reward, or none). The exact gradient of the expected return comes from
enumerating every episode (autograd through the sum). Monte-Carlo: 20,000 groups of 4 episodes drawn
from the policy; each estimator's per-turn scores ``A_k`` weigh ``grad log pi(a_k|s_k)`` (the gradient
the loss follows, before any batch whitening); the mean over groups must match the exact gradient,
times the estimator's known scale, within its standard error (|z| < 4.5 on each of the 9 parameters),
for trajectory-level, turn-level (``turn_gamma`` 1) and step-group credit, with and without intermediate
rewards. A deliberately biased per-turn-index baseline (the mean return-to-go of the group's episodes
that reached turn k, the episode among them) and the step groups as they were before issue 43 (the
episode's own turns in its baseline, lone turns scored 0) must fail: the test has teeth.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.algorithms.advantages import dr_grpo_scores, rloo_scores
from agentrl.algorithms.turn_credit import episode_turn_scores, step_group_scores, turn_returns, turn_scores

S, A, K, N_GROUPS, N = 3, 3, 3, 20000, 4  # states, actions (stop, advance, stay), max turns, groups, group size
STOP = np.array([0.2, 1.0, 0.5])  # the reward of stopping in each state
MOVES = {"none": (np.zeros(S), np.zeros(S)), "intermediate": (np.array([0.3, -0.2, 0.1]), np.array([0.0, 0.4, -0.3]))}
THETA = torch.tensor([[0.3, 0.1, -0.2], [0.0, -0.4, 0.5], [0.2, 0.3, 0.0]], dtype=torch.float64)


def step_env(s: int, a: int, rewards: tuple[np.ndarray, np.ndarray]) -> tuple[float, int, bool]:
    """(reward, next state, the episode ended) of action ``a`` in state ``s``."""
    if a == 0:
        return float(STOP[s]), s, True
    advance, stay = rewards
    return (float(advance[s]), (s + 1) % S, False) if a == 1 else (float(stay[s]), s, False)


def exact_gradient(rewards: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
    """The gradient of the expected return, every episode enumerated (9,)."""
    theta = THETA.clone().requires_grad_(True)
    probs = torch.softmax(theta, -1)

    def value(s: int, t: int) -> torch.Tensor:
        if t == K:
            return torch.zeros((), dtype=torch.float64)
        total = torch.zeros((), dtype=torch.float64)
        for a in range(A):
            r, nxt, done = step_env(s, a, rewards)
            total = total + probs[s, a] * (r + (0.0 if done else value(nxt, t + 1)))
        return total

    value(0, 0).backward()
    return theta.grad.flatten()


def sample(rewards: tuple[np.ndarray, np.ndarray], seed: int) -> dict[str, torch.Tensor]:
    """N_GROUPS * N episodes from the policy: turn rewards, mask, states, actions (E,K); groups (E,)."""
    rng = np.random.default_rng(seed)
    E = N_GROUPS * N
    probs = torch.softmax(THETA, -1).numpy()
    state = np.zeros(E, dtype=int)
    alive = np.ones(E, dtype=bool)
    out = {k: np.zeros((E, K)) for k in ("reward", "mask", "state", "action")}
    for t in range(K):
        u = rng.random(E)
        action = (u[:, None] > np.cumsum(probs[state], 1)).sum(1)
        out["mask"][:, t], out["state"][:, t], out["action"][:, t] = alive, state, action
        for e in np.nonzero(alive)[0]:
            r, state[e], done = step_env(state[e], action[e], rewards)
            out["reward"][e, t] = r
            alive[e] = alive[e] and not done
    tensors = {k: torch.tensor(v, dtype=torch.float64) for k, v in out.items()}
    tensors["group"] = torch.arange(E) // N
    return tensors


def grad_log_pi(ep: dict[str, torch.Tensor]) -> torch.Tensor:
    """d log pi(a_k|s_k) / d theta for every turn (E,K,9)."""
    probs = torch.softmax(THETA, -1)
    s, a = ep["state"].long(), ep["action"].long()
    onehot_s = torch.nn.functional.one_hot(s, S).to(torch.float64)
    diff = torch.nn.functional.one_hot(a, A).to(torch.float64) - probs[s]
    return (onehot_s[..., :, None] * diff[..., None, :]).flatten(-2) * ep["mask"][..., None]


def z_scores(ep: dict[str, torch.Tensor], scores: torch.Tensor, exact: torch.Tensor, scale: float) -> torch.Tensor:
    """(Monte-Carlo mean - scale * exact) / its standard error, per parameter (9,)."""
    per_episode = (scores[..., None] * grad_log_pi(ep)).sum(1)  # (E, 9)
    per_group = per_episode.view(N_GROUPS, N, -1).mean(1)
    mean, se = per_group.mean(0), per_group.std(0) / N_GROUPS ** 0.5
    return (mean - scale * exact) / se


def per_turn_index_baseline(G: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The biased baseline: each turn's return-to-go less the mean over the group's episodes that reached
    that turn (the episode among them)."""
    g, m = G.view(N_GROUPS, N, K), mask.view(N_GROUPS, N, K)
    mean = (g * m).sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1.0)
    return ((g - mean) * m).view(-1, K)


def old_step_scores(G: torch.Tensor, mask: torch.Tensor, step_ids: torch.Tensor) -> torch.Tensor:
    """Step groups before issue 43: less the step group's mean, the turn itself and its episode's other
    turns included; a step group of one scored 0."""
    keep = mask.bool()
    x, ids = G[keep], step_ids[keep]
    out = torch.zeros_like(G)
    _, inv, count = torch.unique(ids, return_inverse=True, return_counts=True)
    total = torch.zeros(len(count), dtype=G.dtype).index_add_(0, inv, x)
    out[keep] = torch.where(count[inv] > 1, x - total[inv] / count[inv], torch.zeros_like(x))
    return out


@pytest.fixture(scope="module", params=list(MOVES))
def setup(request):
    rewards = MOVES[request.param]
    ep = sample(rewards, seed=1 + list(MOVES).index(request.param))
    G = turn_returns(ep["reward"], ep["mask"], 1.0)
    step_ids = ep["group"][:, None] * S + ep["state"].long()
    return request.param, ep, G, step_ids, exact_gradient(rewards)


def estimators(ep, G, step_ids):
    """(name, per-turn scores (E,K), the scale of the gradient they estimate) of the shipped credit paths."""
    m, g, R = ep["mask"], ep["group"], ep["reward"].sum(1)
    c = (N - 1) / N  # dr_grpo keeps the episode in its group's mean: the gradient times (n-1)/n
    yield "trajectory rloo", rloo_scores(R, g)[:, None] * m, 1.0
    yield "trajectory dr_grpo", dr_grpo_scores(R, g)[:, None] * m, c
    yield "turn rloo", turn_scores("rloo", G, m, g), 1.0
    yield "turn dr_grpo", turn_scores("dr_grpo", G, m, g), c
    yield "step groups rloo", step_group_scores("rloo", G, m, step_ids, g), 1.0
    yield "step groups dr_grpo", step_group_scores("dr_grpo", G, m, step_ids, g), 1.0
    both = episode_turn_scores("rloo", ep["reward"], m, g, R, step_ids, turn_gamma=1.0, step_weight=0.5)
    yield "turn + 0.5 step groups, rloo", both, 1.5


def test_the_shipped_estimators_are_unbiased(setup):
    rewards, ep, G, step_ids, exact = setup
    for name, scores, scale in estimators(ep, G, step_ids):
        z = z_scores(ep, scores, exact, scale)
        assert z.abs().max() < 4.5, (rewards, name, z)


def test_a_per_turn_index_baseline_and_the_old_step_groups_are_caught(setup):
    rewards, ep, G, step_ids, exact = setup
    biased = z_scores(ep, per_turn_index_baseline(G, ep["mask"]), exact, 1.0)
    assert biased.abs().max() > 8, (rewards, biased)
    old = z_scores(ep, old_step_scores(G, ep["mask"], step_ids), exact, 1.0)
    assert old.abs().max() > 8, (rewards, old)
