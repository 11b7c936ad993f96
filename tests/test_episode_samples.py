"""Episodes of several samples (issue 31): the episode-counted group scores and seq-mean aggregations
against slow loops, the learner's normalisers and the logged ``samples/*`` by hand, the old
``Experience`` layout reproduced for trajectories without resets, episode records and learner
log-probs that keep every rebuilt context, and ``run_scripted`` under a context policy."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
import torch

from agentrl.algorithms import agg_loss
from agentrl.algorithms.advantages import (
    dr_grpo_scores,
    episode_scores,
    group_norm_scores,
    reinforce_baseline_scores,
    rloo_scores,
)
from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.models import train_tokenizer
from agentrl.rollout.context import COMPACT_INSTRUCTION, ContextPolicy
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.runs.episodes import EpisodeRecord, episode_record
from agentrl.training.credit import sample_metrics
from agentrl.training.experience import Experience
from agentrl.training.learner import PolicyLearner, loss_norm
from agentrl.training.samples import learner_logprobs
from agentrl.types import ContextReset, Segment, Trajectory
from environments.guess_number import GuessNumberEnv

SCORES = {"group_norm": lambda r, g: group_norm_scores(r, g, 1e-6), "rloo": rloo_scores,
          "dr_grpo": dr_grpo_scores, "reinforce_baseline": reinforce_baseline_scores}


def _loop_score(name: str, mine: float, others: list[float]) -> float:
    """One episode's score against the other episodes of its group, written out."""
    group = [mine] + others
    mean = sum(group) / len(group)
    if name in ("dr_grpo", "reinforce_baseline"):
        return mine - mean
    if len(group) == 1:
        return 0.0
    if name == "rloo":
        return mine - sum(others) / len(others)
    std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
    return (mine - mean) / (std + 1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(SCORES))
def test_episode_counted_scores_match_a_loop(name, seed):
    """Episodes of 1-3 rows in groups of 1-4 episodes, rows shuffled: each row gets its episode's score,
    the group statistics counting every episode once."""
    rng = random.Random(seed)
    episodes = [(g, rng.choice([0.0, 0.5, 1.0, rng.random()])) for g in range(4) for _ in range(rng.randint(1, 4))]
    rows = [e for e in range(len(episodes)) for _ in range(rng.randint(1, 3))]
    rng.shuffle(rows)
    ids = torch.tensor(rows)
    rewards = torch.tensor([episodes[e][1] for e in rows])
    groups = torch.tensor([episodes[e][0] for e in rows])
    out = episode_scores(SCORES[name], rewards, groups, ids)
    for i, e in enumerate(rows):
        g, mine = episodes[e]
        others = [r for k, (h, r) in enumerate(episodes) if h == g and k != e]
        assert out[i].item() == pytest.approx(_loop_score(name, mine, others), abs=1e-5), (i, e)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_seq_means_over_episode_rows_match_a_loop(mode, seed):
    """An episode split over rows weighs as one sequence: seq-mean-token-mean averages a row's tokens over
    its whole episode's, seq-mean-* divide by the episodes."""
    g = torch.Generator().manual_seed(seed)
    rows = [0, 0, 1, 2, 2, 2, 3]
    loss = torch.randn(len(rows), 6, generator=g)
    mask = (torch.rand(len(rows), 6, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    ids = torch.tensor(rows)
    per_episode_tokens = torch.zeros(4).index_add_(0, ids, mask.sum(-1))
    got = agg_loss(loss, mask, mode, num_seqs=4, seq_tokens=per_episode_tokens[ids])
    sums = [sum(float((loss[i] * mask[i]).sum()) for i, e in enumerate(rows) if e == k) for k in range(4)]
    counts = [sum(float(mask[i].sum()) for i, e in enumerate(rows) if e == k) for k in range(4)]
    expect = {"token-mean": sum(sums) / sum(counts), "seq-mean-token-mean": sum(s / c for s, c in zip(sums, counts)) / 4,
              "seq-mean-token-sum": sum(sums) / 4}[mode]
    assert got.item() == pytest.approx(expect, rel=1e-5)


def _exp(lengths: list[int], actions: list[int], episode_ids: list[int]) -> Experience:
    T = max(lengths)
    attn = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
    amask = torch.tensor([[1.0] * a + [0.0] * (T - 1 - a) for a in actions])
    B = len(lengths)
    return Experience(sequences=torch.zeros(B, T, dtype=torch.long), attention_mask=attn, action_mask=amask,
                      rewards=torch.zeros(B), group_ids=torch.zeros(B, dtype=torch.long),
                      episode_ids=torch.tensor(episode_ids))


def test_learner_normalisers_and_logged_samples_by_hand():
    exp = _exp([10, 7, 12], [2, 3, 4], [0, 0, 1])  # episode 0 is two samples
    norm = loss_norm(exp, 16)
    assert norm["num_tokens"] == 9 and norm["num_seqs"] == 2 and norm["max_len"] == 16
    assert norm["episode_tokens"].tolist() == [5.0, 4.0]
    m = sample_metrics(exp, AlgoConfig())
    assert m == {"samples/count": 3.0, "samples/tokens": 29.0, "samples/max_tokens": 12.0, "samples/per_episode": 1.5}
    one = _exp([10, 7], [2, 3], [0, 1])  # one sample per episode: the normalisers of before
    assert loss_norm(one, 16) == {"num_tokens": 5.0, "num_seqs": 2, "max_len": 16}
    assert sample_metrics(one, AlgoConfig())["samples/per_episode"] == 1.0


def _old_layout(trajs: list[Trajectory], pad: int) -> dict[str, torch.Tensor]:
    """Experience.from_trajectories as it was before episodes could be several samples, written as a loop."""
    rows = [t.prompt_ids + t.response_ids for t in trajs]
    T = max(len(r) for r in rows)
    seq = [r + [pad] * (T - len(r)) for r in rows]
    am, lp = [[0.0] * (T - 1) for _ in rows], [[0.0] * (T - 1) for _ in rows]
    for b, t in enumerate(trajs):
        pos = len(t.prompt_ids)
        for s in t.segments:
            for j, _ in enumerate(s.token_ids):
                if s.is_action:
                    am[b][pos + j - 1] = 1.0
                    lp[b][pos + j - 1] = s.logprobs[j]
            pos += len(s.token_ids)
    return {"sequences": torch.tensor(seq), "attention_mask": torch.tensor([[int(i < len(r)) for i in range(T)]
                                                                            for r in rows]),
            "action_mask": torch.tensor(am), "engine_logprobs": torch.tensor(lp),
            "rewards": torch.tensor([t.reward for t in trajs]), "group_ids": torch.tensor([t.group_id for t in trajs]),
            "response_length": torch.tensor([float(t.num_action_tokens) for t in trajs])}


def test_episodes_without_resets_lay_out_as_before():
    trajs = [Trajectory(prompt_ids=[5, 6, 7][:k + 1], reward=float(k), task_id="t", group_id=k // 2,
                        segments=[Segment([10 + k] * (k + 1), True, [-0.1 * (k + 1)] * (k + 1)), Segment([3, 4], False),
                                  Segment([20, 21], True, [-0.5, -0.25])], turn_rewards=[0.0, float(k)])
             for k in range(4)]
    exp = Experience.from_trajectories(trajs, pad_token_id=0)
    old = _old_layout(trajs, 0)
    for name in ("sequences", "attention_mask", "action_mask", "engine_logprobs", "rewards", "group_ids"):
        assert torch.equal(getattr(exp, name), old[name].to(getattr(exp, name).dtype)), name
    assert torch.equal(exp.info["response_length"], old["response_length"])
    assert not exp.several_samples_per_episode and exp.episode_ids.tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------- records and learner log-probs of rebuilt contexts


@pytest.fixture(scope="module")
def tok() -> Any:
    corpus = [GuessNumberEnv(rounds=4)._prompt(), "1 is too low. 2 is too high. Round 1 of 4, 3 left.",
              "Round 2 of 4: the number is from 10 to 40, 3 left.", COMPACT_INSTRUCTION] * 4
    return train_tokenizer(corpus, 320)


@pytest.fixture(scope="module")
def compacted(tok: Any) -> Trajectory:
    """A scripted GuessNumber episode under compaction at 400 tokens (read-only in the tests)."""
    env = GuessNumberEnv(rounds=4, guesses=6, high=50, feedback="direction", reference_policy="uniform")
    ex = MultiTurnExecutor(env, None, tok, SamplingParams(max_new_tokens=4),
                           context=ContextPolicy("compact", 400, turn_tokens=4, summary_tokens=40))
    [traj] = ex.run_scripted([env.sample_task(env.np_random)], lambda e: e.reference_action())
    return traj


def test_run_scripted_plays_under_the_context_policy(compacted):
    """The warm start's scripted episodes go through the run's context policy: a compaction request is
    answered by the env's reference summary, and every context fits."""
    traj = compacted
    assert traj.resets and all(r.reason == "compact" for r in traj.resets)
    assert traj.info["compactions"] == len(traj.resets) and not traj.info.get("failed")
    assert all(s.startswith("Round ") and " left." in s for s in traj.info["summaries"])
    for prompt, segs in traj.samples():
        assert len(prompt) + sum(len(s.token_ids) for s in segs) <= 400
    assert len(traj.turn_rewards) == traj.info["turns"] and traj.reward == pytest.approx(sum(traj.turn_rewards))


def test_records_and_learner_logprobs_keep_every_context(tok, compacted):
    from transformers import LlamaConfig, LlamaForCausalLM

    traj = compacted
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=400))
    learner = PolicyLearner(model, LearnerConfig(call_tokens=0), AlgoConfig())
    [scores] = learner_logprobs(learner, [traj], tok.pad_token_id)
    actions = [s for _, segs in traj.samples() for s in segs if s.is_action]
    assert [len(x) for x in scores] == [len(s.token_ids) for s in actions]
    prompt, segs = traj.samples()[-1]  # the last context, scored alone
    alone = learner.logprobs(Experience.from_trajectories(
        [Trajectory(prompt_ids=prompt, segments=segs, reward=0.0, task_id="t", group_id=0)], tok.pad_token_id))[0]
    pos, expect = len(prompt), []
    for s in segs:
        if s.is_action:
            expect.append(alone[pos - 1:pos - 1 + len(s.token_ids)].tolist())
        pos += len(s.token_ids)
    got = scores[-len(expect):]
    assert all(a == pytest.approx(b, abs=1e-5) for a, b in zip(got, expect))

    record = episode_record(traj, tok, step=3, learner_logprobs=scores, policy_version=3)
    assert [s.role for s in record.segments].count("prompt") == 1 + len(traj.resets)
    assert [s.token_ids for s in record.segments if s.role == "prompt"] == [p for p, _ in traj.samples()]
    assert [s.token_ids for s in record.segments if s.role == "action"] == [s.token_ids for s in actions]
    assert all(s.learner_logprobs is not None for s in record.segments if s.role == "action")
    assert record.response.count("[context rebuilt: compact]") == len(traj.resets)
    assert record.info["context_resets"] == ["compact"] * len(traj.resets)
    back = EpisodeRecord.from_dict(record.to_dict())
    assert [s.token_ids for s in back.segments] == [s.token_ids for s in record.segments]


def test_a_reset_without_turns_counts_as_its_own_sample():
    """A rewritten history (rollout.samples=turn): the episode's samples are its first context then each reset."""
    t = Trajectory(prompt_ids=[1, 2], segments=[Segment([3], True, [-0.1])], reward=1.0, task_id="t", group_id=0,
                   turn_rewards=[0.0, 1.0], resets=[ContextReset("rewrite", [9, 8, 7], [Segment([4, 5], True, [-0.2, -0.3])])])
    exp = Experience.from_trajectories([t], pad_token_id=0)
    assert exp.episode_ids.tolist() == [0, 0] and exp.action_mask.sum(-1).tolist() == [1.0, 2.0]
    assert exp.turn_ids[0].tolist()[:2] == [-1, 0] and exp.turn_ids[1].tolist()[2:4] == [1, 1]
    assert t.num_action_tokens == 3


def test_sft_examples_of_a_compacted_episode_are_its_contexts(tok, compacted):
    """The warm start trains on scripted episodes: packed or not, every context is its own example and
    every action token of the episode carries the loss once."""
    from agentrl.training.supervised import pack

    traj = compacted
    contexts = traj.samples()
    batch = pack([traj], tok.pad_token_id, pack_length=2048)
    assert batch.action_mask.sum().item() == traj.num_action_tokens
    assert int((batch.position_ids == 0).sum()) >= len(contexts)  # each example restarts its positions
    lengths = sorted(len(p) + sum(len(s.token_ids) for s in segs) for p, segs in contexts)
    assert int(batch.attention_mask.shape[-1]) >= lengths[-1]
    assert int((batch.sequences != tok.pad_token_id).sum()) == sum(lengths)


def test_the_overlong_penalty_sees_turns_of_every_context():
    from agentrl.rollout.dynamic_sampling import apply_overlong_penalty

    t = Trajectory(prompt_ids=[1], segments=[Segment([3, 3], True)], reward=1.0, task_id="t", group_id=0,
                   resets=[ContextReset("compact", [1, 9], [Segment([4] * 8, True)])])
    apply_overlong_penalty([t], max_tokens=8, buffer=4, penalty=1.0)  # the 8-token turn is in the second context
    assert t.info["overlong_penalty"] == -1.0 and t.reward == 0.0


class _CountedGuess(GuessNumberEnv):
    """GuessNumber that counts its open copies (an episode's copy is open from reset to close)."""

    open_now = 0
    most_open = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        type(self).open_now += 1
        type(self).most_open = max(type(self).most_open, type(self).open_now)
        return super().reset(seed=seed, options=options)

    def close(self) -> None:
        type(self).open_now -= 1
        super().close()


def test_run_scripted_keeps_at_most_a_chunk_of_episodes_open(tok: Any) -> None:
    """Thousands of warm-start episodes (each may hold a workspace) run a chunk at a time, in task
    order, with distinct groups, and every copy is closed."""
    env = _CountedGuess(rounds=1, guesses=6, high=50, feedback="direction")
    ex = MultiTurnExecutor(env, None, tok, SamplingParams(max_new_tokens=4))
    tasks = [env.sample_task(np.random.default_rng(i)) for i in range(7)]
    trajs = ex.run_scripted(tasks, lambda e: e.reference_action(), chunk=3)
    assert [t.task_id for t in trajs] == [t.id for t in tasks]
    assert sorted(t.group_id for t in trajs) == list(range(7))
    assert all(t.reward > 0 and not t.info.get("failed") for t in trajs)
    assert _CountedGuess.most_open == 3 and _CountedGuess.open_now == 0
