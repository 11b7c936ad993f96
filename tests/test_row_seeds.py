"""Per-row sampling streams (``SamplingParams.row_seeds``): a prompt's sampled tokens depend on its own seed,
not on the prompts beside it in an engine call, so a multi-turn run replays under ``torch.manual_seed``
however its envs' timing batches the turns. Before, every call drew from torch's global RNG in batch order:
three runs of the same 32 jittery episodes under one seed shared 0 of 32 episodes."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from agentrl.models import tiny_model_dir
from agentrl.rollout.engines.base import SamplingParams, derive_seed
from agentrl.rollout.engines.hf import HFEngine, _sample, row_uniforms
from agentrl.rollout.env_pool import EnvPool
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from environments.guess_number import GuessNumberEnv

_jitter = random.Random()  # seeded by the OS: the env's timing differs from run to run


class JitteryGuess(GuessNumberEnv):
    """GuessNumber whose steps take 0-10 ms at random and whose feedback carries a draw of its ``np_random``."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        time.sleep(_jitter.uniform(0, 0.01))
        obs, reward, terminated, truncated, info = super().step(action)
        return f"{obs} {int(self.np_random.integers(0, 10))}", reward, terminated, truncated, info


def _env() -> JitteryGuess:
    return JitteryGuess(rounds=2, guesses=6, high=50, feedback="interval")


@pytest.fixture(scope="module")
def policy() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    env = _env()
    d = tiny_model_dir([env._prompt(), "31 is too low. It is from 32 to 50. Round 1 of 2, 5 left. 7"] * 4,
                       hidden_size=64, num_heads=2, num_layers=2, intermediate_size=128)  # 4x fewer FLOPs a token
    return AutoModelForCausalLM.from_pretrained(d), AutoTokenizer.from_pretrained(d)


def test_derive_seed_is_a_fixed_function_of_its_parts() -> None:
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3) == 6839638155163434425  # the same in every process
    seeds = {derive_seed(b, g, s, t) for b in range(3) for g in range(4) for s in range(4) for t in range(3)}
    assert len(seeds) == 3 * 4 * 4 * 3  # any part changed, another seed
    assert derive_seed(1, 2) != derive_seed(2, 1) and derive_seed(0, 1) != derive_seed(0, 1, 0)
    assert all(0 <= s < 2**63 for s in seeds) and derive_seed(-5, 2**62) >= 0


def test_given_uniforms_pick_each_token_by_its_exact_quantile() -> None:
    """Stratified uniforms (i + 0.5) / N through the inverse CDF: each token is picked N * p times, to one
    row, for plain, top-k and top-p sampling; its log-prob is that of logits / temperature."""
    torch.manual_seed(0)
    logits = torch.randn(1, 12) * 2
    N = 10_000
    u = ((torch.arange(N) + 0.5) / N)[:, None]
    for params in (SamplingParams(temperature=0.7), SamplingParams(top_k=4), SamplingParams(top_p=0.8)):
        tok, lp = _sample(logits.expand(N, -1), params, u)
        logp = torch.log_softmax(logits[0] / params.temperature, -1)
        p = logp.exp()
        if params.top_k:
            p = torch.where(p >= p.topk(params.top_k).values[-1], p, torch.zeros_like(p))
        if params.top_p < 1:
            sp, idx = p.sort(descending=True)
            p = torch.zeros_like(p).scatter(0, idx, sp.masked_fill(sp.cumsum(0) - sp > params.top_p, 0.0))
        counts = torch.bincount(tok, minlength=12).float()
        assert (counts - N * p / p.sum()).abs().max() <= 1.0, params
        assert torch.allclose(lp, logp[tok])


def test_row_uniforms_are_each_seed_s_stream_whatever_the_length() -> None:
    short = row_uniforms(SamplingParams(max_new_tokens=5, row_seeds=(7, 8)), 2)
    long = row_uniforms(SamplingParams(max_new_tokens=40, row_seeds=(8, 7, 9)), 3)
    assert short.shape == (2, 5) and torch.equal(long[1, :5], short[0]) and torch.equal(long[0, :5], short[1])
    assert row_uniforms(SamplingParams(temperature=0, row_seeds=(1,)), 1) is None  # greedy draws nothing
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        row_uniforms(SamplingParams(row_seeds=(1, 2)), 3)


@pytest.mark.parametrize("static", [True, False])
def test_a_row_samples_the_same_tokens_whatever_rows_share_its_call(policy: tuple[Any, Any], static: bool) -> None:
    """The same prompt under the same row seed: alone, among 15 other rows (some sharing its prompt, so
    decoded from one prefilled cache; rows ending at different steps, so the static decoder compacts), in
    another order, in chunks of 3 (``max_batch_size``): the same completion. Another seed: another one."""
    model, tok = policy
    engine = HFEngine(model, tok)
    engine.static = engine.static and static
    prompts = [tok(t)["input_ids"] for t in ("Round 1 of 2", "31 is too low.", "It is from 32 to 50.", "5 left")]
    batch = [prompts[i % 4] for i in range(16)]
    seeds = tuple(100 + i for i in range(16))
    # one token in 8 ends a row: rows end at different steps, so the static decoder compacts its batch
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=tuple(range(3, len(tok), 8)))
    together = engine.generate(batch, replace(params, row_seeds=seeds))
    assert not static or engine._decoder.compactions > 0
    torch.manual_seed(123)  # the global RNG plays no part
    for i in (0, 5, 15):
        alone = engine.generate([batch[i]], replace(params, row_seeds=(seeds[i],)))[0]
        assert alone.token_ids == together[i].token_ids
        assert np.allclose(alone.logprobs, together[i].logprobs, atol=1e-4)
    order = list(reversed(range(16)))
    engine.max_batch_size = 3
    shuffled = engine.generate([batch[i] for i in order],
                               replace(params, row_seeds=tuple(seeds[i] for i in order)))
    assert [c.token_ids for c in shuffled] == [together[i].token_ids for i in order]
    assert len({len(c.token_ids) for c in together}) > 1  # rows did end at different steps
    other = engine.generate(batch, replace(params, row_seeds=tuple(s + 1 for s in seeds)))
    assert sum(a.token_ids != b.token_ids for a, b in zip(together, other)) >= 12
    with pytest.raises(ValueError, match="one per prompt"):
        engine.generate(batch, SamplingParams(row_seeds=(1,)))


def _play(policy: tuple[Any, Any], seed: int) -> list[tuple[int, ...]]:
    model, tok = policy
    env = _env()
    tasks = [env.sample_task(np.random.default_rng(i)) for i in range(8)]
    pool = EnvPool(workers=4)
    try:
        ex = MultiTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=8), n_samples=4, pool=pool)
        torch.manual_seed(seed)
        return [tuple(t.response_ids) for t in ex.run(tasks)]
    finally:
        pool.close()


def test_a_multi_turn_run_replays_under_its_seed_whatever_its_envs_timing(policy: tuple[Any, Any]) -> None:
    """32 episodes of 4 env workers whose steps take 0-10 ms at random (so every run batches its turns
    differently) and whose feedback draws from the env copy's ``np_random``: three runs under one seed play
    the same 32 episodes token for token; another seed plays others."""
    first = _play(policy, 0)
    assert _play(policy, 0) == first and _play(policy, 0) == first
    other = _play(policy, 1)
    assert sum(a != b for a, b in zip(first, other)) >= 24
    assert len(set(first)) >= 24  # the samples of a group differ from each other


def test_held_out_evaluations_at_any_step_sample_an_unchanged_policy_s_episodes_alike(tmp_path: Any) -> None:
    """The trainer's held-out evaluations sample under the same seed at every step: an unchanged policy plays
    the same episodes at step 0 and step 7 (so the lift before -> after RL, paired by task, moves only where
    the policy did). Before, the seed had the step in it and the envs' timing set the batches."""
    from agentrl.config import load_config
    from agentrl.rollout.build import sampling_params
    from agentrl.training.trainer import Trainer

    cfg = load_config(None, [
        "env.id=agentrl/GuessNumber-v0", "env.kwargs={rounds: 2, guesses: 6, high: 50, feedback: interval}",
        "model.warm_start.enabled=false", "model.tiny.hidden_size=64", "model.tiny.num_heads=2",
        "model.tiny.intermediate_size=128", "data.eval_tasks=8", "rollout.max_new_tokens=6",
        "rollout.env_workers=4", "log.progress=false", "log.tensorboard=false", "checkpoint.save_final=false"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    try:
        params = sampling_params(cfg)
        first = [t.response_ids for t in trainer._held_out("sampling", 2000, 2, params)]
        trainer.step_idx = 7
        assert [t.response_ids for t in trainer._held_out("sampling", 2000, 2, params)] == first
        assert len(first) == 16 and len(set(map(tuple, first))) >= 12  # sampled: the episodes differ
    finally:
        trainer.rollouts.close()


def test_a_single_turn_sample_does_not_depend_on_how_the_engine_chunks_the_batch(policy: tuple[Any, Any]) -> None:
    """16 tasks x 4 samples under one seed: the same 64 responses whether the engine decodes them in one batch
    or in chunks of 5 (each sample draws from its own stream; before, the chunks drew from one stream in turn,
    so the chunk size changed every sample after the first chunk)."""
    from agentrl.rollout.executors.single_turn import SingleTurnExecutor
    from environments.arithmetic import ArithmeticEnv

    model, tok = policy
    env = ArithmeticEnv(digits=2, operators="+", terms=2, template="{expr}=", bare_answer=True)
    tasks = [env.sample_task(np.random.default_rng(i)) for i in range(16)]

    def play(chunk: int, seed: int) -> list[tuple[int, ...]]:
        engine = HFEngine(model, tok, max_batch_size=chunk)
        ex = SingleTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=6), n_samples=4)
        torch.manual_seed(seed)
        return [tuple(t.response_ids) for t in ex.run(tasks)]

    whole = play(512, 0)
    assert play(5, 0) == whole
    assert len(set(whole)) >= 48 and sum(a != b for a, b in zip(whole, play(512, 1))) >= 48
