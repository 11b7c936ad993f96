"""The ``logprobs`` check: the learner's log-probs of played tokens (the trainer's path) against the engine's.

Real episodes: a tiny model (its final norm scaled up so that its logits spread like a trained model's, not
the near-uniform ones of a fresh initialisation) plays GuessNumber through the multi-turn executor on an
HFEngine. The engine sharing the learner's model passes; an engine on a copy with other weights fails and
names the weights; a bfloat16 engine against the float32 learner is flagged naming the dtypes. The statistics
against a plain Python loop on a random batch with degenerate rows, and the thresholds and causes on batches
with a known gap."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest
import torch

from agentrl.config import RunConfig
from agentrl.doctor.logprobs import (
    FAIL_MEAN,
    TURN_BINS,
    check_logprobs,
    learner_logprobs,
    likely_cause,
    mismatch_stats,
    played_dtypes,
)
from agentrl.doctor.play import Played
from agentrl.env import fixed_tasks
from agentrl.models import load_causal_lm, load_tokenizer, tiny_model_dir
from agentrl.rollout.context import marker_text
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.experience import Experience
from agentrl.types import Segment, Trajectory
from environments.guess_number import GuessNumberEnv

ENV = dict(rounds=2, guesses=3, high=50, feedback="direction")


@pytest.fixture(scope="module")
def learner() -> tuple[Any, Any]:
    """The learner's policy (float32) and its tokenizer."""
    env = GuessNumberEnv(**ENV)
    corpus = [env._prompt(), "1 is too low. 2 is too high. Round 1 of 3, 3 left.", env.reference_summary(),
              env.compaction_instruction, marker_text(3)] * 4
    path = tiny_model_dir(corpus, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=64,
                          max_position_embeddings=512)
    model = load_causal_lm(path, device="cpu")
    with torch.no_grad():
        model.model.norm.weight.mul_(4.0)  # logits of a few nats' spread, as a trained model's
    return model, load_tokenizer(path)


def play_on(learner: tuple[Any, Any], engine_model: Any, tasks: int = 2) -> Played:
    """``tasks`` x 2 episodes sampled by an HFEngine on ``engine_model``; the learner is the fixture's model."""
    model, tok = learner
    env = GuessNumberEnv(**ENV)
    engine = HFEngine(engine_model, tok)
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=6), n_samples=2)
    torch.manual_seed(0)
    chosen = fixed_tasks(env, tasks, seed=0)
    cfg = RunConfig()
    return Played(cfg=cfg, original=cfg, env=env, tokenizer=tok, model=model, engine=engine, executor=ex,
                  tasks=chosen, episodes=ex.run(chosen))


def run_check(played: Played):
    exp, lp = learner_logprobs(played)
    engine_dtype, learner_dtype = played_dtypes(played)
    return exp, lp, check_logprobs(exp, lp, engine_dtype=engine_dtype, learner_dtype=learner_dtype)


def test_engine_sharing_the_learner_passes(learner):
    played = play_on(learner, learner[0])
    exp, lp, c = run_check(played)
    assert c.status == "pass", c.summary
    assert played_dtypes(played) == ("float32", "float32")
    assert lp.shape == exp.action_mask.shape and len(exp) == len(played.episodes)
    assert c.details["tokens"] == exp.num_action_tokens and c.details["mean_abs"] < 1e-5
    assert c.details["ratio_outside"] == 0.0 and not c.advice


def test_engine_with_other_weights_fails_naming_the_weights(learner):
    other = copy.deepcopy(learner[0])
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in other.model.layers[0].parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    _, _, c = run_check(play_on(learner, other))
    assert c.status == "fail", c.summary
    assert "the weights differ" in c.summary and "sync" in c.advice
    assert c.details["mean_abs"] > FAIL_MEAN


def test_bfloat16_engine_is_flagged_naming_the_dtypes(learner):
    played = play_on(learner, copy.deepcopy(learner[0]).to(torch.bfloat16), tasks=1)
    _, _, c = run_check(played)
    assert c.status in ("warn", "fail"), c.summary
    assert "dtypes differ: the engine runs bfloat16, the learner float32" in c.summary
    assert "model.dtype" in c.advice


# ---------------------------------------------------------------- the statistics against a plain loop


def loop_stats(learner: list[list[float]], engine: list[list[float]], mask: list[list[int]],
               attn: list[list[int]], turns: list[list[int]]) -> dict[str, Any]:
    diffs, ratios, by_bin, by_pos = [], [], {}, []
    for b in range(len(mask)):
        start = None
        for t in range(len(mask[b])):
            if not mask[b][t]:
                start = None
                continue
            if start is None or turns[b][t] != turns[b][t - 1]:
                start = t
            d = learner[b][t] - engine[b][t]
            diffs.append(abs(d))
            ratios.append(math.exp(d))
            name = next(n for lo, hi, n in TURN_BINS if t - start >= lo and (hi is None or t - start < hi))
            by_bin.setdefault(name, []).append(abs(d))
            by_pos.append((sum(attn[b][:t + 2]) - 1, abs(d)))
    out: dict[str, Any] = {"tokens": len(diffs)}
    if diffs:
        mean = sum(ratios) / len(ratios)
        out.update(mean_abs=sum(diffs) / len(diffs), max_abs=max(diffs), ratio_mean=mean,
                   ratio_std=math.sqrt(sum((r - mean) ** 2 for r in ratios) / len(ratios)),
                   ratio_outside=sum(r < 0.8 or r > 1.25 for r in ratios) / len(ratios))
    out["by_turn_position"] = {n: (len(v), sum(v) / len(v)) for n, v in by_bin.items()}
    by_pos.sort(key=lambda x: x[0])  # stable: row-major among equal positions
    n, quarters, at = len(by_pos), [], 0
    for i in range(4):
        size = n // 4 + (i < n % 4)
        part = by_pos[at:at + size]
        at += size
        if part:
            quarters.append((part[0][0], part[-1][0], len(part), sum(v for _, v in part) / len(part)))
    out["by_context"] = quarters
    return out


def random_batch(seed: int) -> tuple[torch.Tensor, ...]:
    """(learner, engine, mask, attention_mask, turn_ids): rows of every kind (empty, one token, segments that
    touch with another turn, long runs past 16 tokens, padding)."""
    rng = random.Random(seed)
    B, T = 7, 160
    attn = torch.zeros(B, T, dtype=torch.long)
    mask, turns = torch.zeros(B, T - 1), torch.full((B, T - 1), -1, dtype=torch.long)
    for b in range(B):
        n = T if b == 0 else rng.randint(2, T)
        attn[b, :n] = 1
        if b == 1:
            continue  # no action tokens at all
        if b == 2:
            mask[b, n - 2], turns[b, n - 2] = 1, 0  # a single token
            continue
        t, turn = rng.randint(0, 5), 0
        while t < n - 1:
            length = rng.choice([1, 3, 20, 40])
            mask[b, t:min(t + length, n - 1)] = 1
            turns[b, t:min(t + length, n - 1)] = turn
            turn += 1
            t += length + rng.choice([0, 0, 4])  # 0: the next turn's segment touches this one
    engine = -torch.rand(B, T - 1, generator=torch.Generator().manual_seed(seed)) * 3
    learner = engine + torch.randn(B, T - 1, generator=torch.Generator().manual_seed(seed + 1)) * 0.2
    return learner, engine, mask, attn, turns


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stats_match_a_plain_loop(seed):
    learner, engine, mask, attn, turns = random_batch(seed)
    got = mismatch_stats(learner, engine, mask, attn, turns)
    want = loop_stats(learner.tolist(), engine.tolist(), mask.int().tolist(), attn.tolist(), turns.tolist())
    assert got["tokens"] == want["tokens"] and got["nonfinite"] == 0
    for k in ("mean_abs", "max_abs", "ratio_mean", "ratio_std", "ratio_outside"):
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k
    assert {n: (b["tokens"], pytest.approx(b["mean_abs"])) for n, b in got["by_turn_position"].items()} == \
        want["by_turn_position"]
    assert [(q["from"], q["to"], q["tokens"], pytest.approx(q["mean_abs"])) for q in got["by_context"]] == \
        want["by_context"]
    assert set(got["by_turn_position"]) == {"first", "2-16", "17-128"}


def test_stats_degenerate_batches():
    one = torch.zeros(2, 5)
    none = mismatch_stats(one, one, torch.zeros(2, 5))
    assert none["tokens"] == 0 and none["mean_abs"] is None and none["by_context"] == [] and not none["by_turn_position"]
    mask = torch.zeros(2, 5)
    mask[1, 3] = 1
    single = mismatch_stats(one + 0.5, one, mask)
    assert single["tokens"] == 1 and single["ratio_std"] == 0.0 and single["mean_abs"] == pytest.approx(0.5)
    assert single["by_turn_position"] == {"first": {"tokens": 1, "mean_abs": pytest.approx(0.5)}}
    assert len(single["by_context"]) == 1
    bad = one.clone()
    bad[1, 3] = float("nan")
    assert mismatch_stats(bad, one, mask)["nonfinite"] == 1


# ---------------------------------------------------------------- thresholds and causes on a known gap


def hand_batch(segments: int = 6, length: int = 40) -> Experience:
    """Two episodes of ``segments`` turns of ``length`` action tokens, engine log-prob -1.0 each."""
    def episode(g: int) -> Trajectory:
        segs = []
        for k in range(segments):
            segs += [Segment([5] * length, True, [-1.0] * length, turn=k), Segment([6, 7], False, turn=k)]
        return Trajectory([1, 2, 3], segs, 0.0, "t", g)
    return Experience.from_trajectories([episode(0), episode(1)], 0)


def with_gap(exp: Experience, gap: torch.Tensor) -> torch.Tensor:
    return torch.where(exp.action_mask > 0, exp.engine_logprobs + gap, torch.zeros_like(gap))


@pytest.mark.parametrize("gap,dtypes,status", [
    (1e-5, ("float32", "float32"), "pass"),
    (1e-2, ("bfloat16", "bfloat16"), "pass"),  # the same 16-bit dtype on both sides: within 3e-2
    (1e-2, ("float32", "float32"), "warn"),
    (1e-4, ("bfloat16", "float32"), "warn"),  # small here, but the dtypes differ
    (0.3, ("float32", "float32"), "fail"),
])
def test_thresholds(gap, dtypes, status):
    exp = hand_batch()
    signs = torch.where(torch.arange(exp.action_mask.shape[1]) % 2 == 0, 1.0, -1.0)
    c = check_logprobs(exp, with_gap(exp, gap * signs), engine_dtype=dtypes[0], learner_dtype=dtypes[1])
    assert c.status == status, c.summary
    assert (c.advice == "") == (status == "pass")


def test_causes():
    exp = hand_batch()
    A = exp.action_mask.shape[1]
    stats = lambda gap: mismatch_stats(with_gap(exp, gap), exp.engine_logprobs, exp.action_mask,  # noqa: E731
                                       exp.attention_mask, exp.turn_ids)
    starts = torch.zeros_like(exp.action_mask)
    starts[:, 2::42] = 0.5  # the first token of every turn (prompt of 3, turns of 40 + 2 feedback)
    assert int(((starts > 0) & (exp.action_mask > 0)).sum()) == 2 * 6
    assert "first tokens of turns" in likely_cause(stats(starts), "float32", "float32")
    growing = (torch.arange(A) / A * 0.5).expand_as(exp.action_mask)
    assert "grows along the context" in likely_cause(stats(growing), "float32", "float32")
    uniform = torch.full_like(exp.action_mask, 0.3)
    assert "the weights differ" in likely_cause(stats(uniform), "float32", "float32")
    assert likely_cause(stats(uniform), "float16", "float32").startswith("dtypes differ: the engine runs float16")
    nan = with_gap(exp, uniform)
    nan[0, 2] = float("nan")
    c = check_logprobs(exp, nan, engine_dtype="float32", learner_dtype="float32")
    assert c.status == "fail" and "NaN or infinite on 1 tokens" in c.summary


def test_no_generated_tokens_is_a_skip_and_only_nonfinite_ones_fail():
    exp = Experience.from_trajectories([Trajectory([1, 2, 3], [Segment([4], False)], 0.0, "t", 0)], 0)
    c = check_logprobs(exp, torch.zeros_like(exp.action_mask), engine_dtype="float32", learner_dtype="float32")
    assert c.status == "skip"
    one = Experience.from_trajectories([Trajectory([1, 2], [Segment([4], True, [-1.0])], 0.0, "t", 0)], 0)
    c = check_logprobs(one, torch.full_like(one.action_mask, float("-inf")), engine_dtype="float32",
                       learner_dtype="float32")
    assert c.status == "fail" and c.summary.startswith("every one of 1 generated tokens has a non-finite log-prob")
