"""The core data path on the tiny model: engine, executor, Experience layout, learner."""

import copy

import numpy as np
import pytest
import torch

from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.models import load_causal_lm, load_tokenizer
from agentrl.rollout.engines import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors import SingleTurnExecutor
from agentrl.training.experience import Experience
from agentrl.training.learner import PolicyLearner, sequence_logprobs
from agentrl.types import Segment, Trajectory


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    path, env = tiny_arith
    tok = load_tokenizer(path)
    torch.manual_seed(0)
    return load_causal_lm(path, device="cpu"), tok, env


def test_loop_sampler_matches_hf_generate_greedy(tiny):
    model, tok, _ = tiny
    prompts = [tok(p)["input_ids"] for p in ["1+2=", "12+34=", "99+9=", "5+67="]]
    a = HFEngine(model, tok).generate(prompts, SamplingParams(max_new_tokens=12, temperature=0))
    b = HFEngine(model, tok, sampler="generate").generate(prompts, SamplingParams(max_new_tokens=12, temperature=0))
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for x, y in zip(a, b):
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


def test_engine_logprobs_match_a_full_forward(tiny):
    model, tok, _ = tiny
    prompts = [tok(p)["input_ids"] for p in ["1+2=", "12+34=", "7+7="]] * 3
    out = HFEngine(model, tok).generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.7, seed=1))
    for p, c in zip(prompts, out):
        seq = torch.tensor([p + c.token_ids])
        lp, _ = sequence_logprobs(model, seq, torch.ones_like(seq), temperature=0.7)
        assert lp[0, len(p) - 1:].tolist() == pytest.approx(c.logprobs, abs=1e-4)
        assert c.finish_reason == ("stop" if c.token_ids[-1] == tok.eos_token_id else "length")
        assert len(c.token_ids) <= 6


def test_top_k_one_is_greedy(tiny):
    model, tok, _ = tiny
    prompts = [tok("12+34=")["input_ids"]] * 4
    eng = HFEngine(model, tok)
    g = eng.generate(prompts, SamplingParams(max_new_tokens=5, temperature=0))
    k = eng.generate(prompts, SamplingParams(max_new_tokens=5, temperature=1.0, top_k=1))
    p = eng.generate(prompts, SamplingParams(max_new_tokens=5, temperature=1.0, top_p=1e-6))
    assert [c.token_ids for c in g] == [c.token_ids for c in k] == [c.token_ids for c in p]


def test_executor_groups_and_token_exact_trajectories(tiny):
    model, tok, env = tiny
    ex = SingleTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=4), n_samples=3)
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    tasks = [env.sample_task(rng) for _ in range(4)]
    trajs = ex.run(tasks, group_offset=10)
    assert [t.group_id for t in trajs] == [10] * 3 + [11] * 3 + [12] * 3 + [13] * 3
    for t, task in zip(trajs, [x for x in tasks for _ in range(3)]):
        assert t.task_id == task.id
        assert t.prompt_ids == tok(task.prompt, add_special_tokens=False)["input_ids"]
        assert len(t.segments[0].logprobs) == len(t.segments[0].token_ids)
        assert t.reward in (0.0, 1.0)


def test_executor_survives_a_crashing_env(tiny):
    model, tok, env = tiny

    class Boom(type(env)):
        def score(self, action, task):
            raise RuntimeError("verifier exploded")

    boom = Boom(template="{expr}=")
    ex = SingleTurnExecutor(boom, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=3), n_samples=2)
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    trajs = ex.run([boom.sample_task(rng)])
    assert all(t.reward == 0.0 and t.info["failed"] and "exploded" in t.info["error"] for t in trajs)


def test_experience_layout_is_token_exact():
    t1 = Trajectory([1, 2, 3], [Segment([4, 5], True, [-0.1, -0.2]), Segment([6], False),
                                Segment([7], True, [-0.3])], 1.0, "a", 0)
    t2 = Trajectory([1], [Segment([9], True, [-0.5])], 0.0, "b", 1)
    exp = Experience.from_trajectories([t1, t2], pad_token_id=0)
    assert exp.sequences.tolist() == [[1, 2, 3, 4, 5, 6, 7], [1, 9, 0, 0, 0, 0, 0]]
    assert exp.attention_mask.tolist() == [[1] * 7, [1, 1, 0, 0, 0, 0, 0]]
    # action position t predicts token t+1: tokens 4,5 at positions 2,3; 7 at position 5
    assert exp.action_mask.tolist() == [[0, 0, 1, 1, 0, 1], [1, 0, 0, 0, 0, 0]]
    assert exp.engine_logprobs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2, 0, -0.3])
    parts = exp.split(1)
    assert len(parts) == 2 and parts[1].trim().sequences.shape == (1, 2)
    assert parts[1].trim().action_mask.shape == (1, 1)


def _batch(tok, env, n=16):
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    ts = [env.sample_task(rng) for _ in range(n)]
    trajs = [Trajectory(tok(t.prompt)["input_ids"], [Segment(tok(t.answer)["input_ids"] + [tok.eos_token_id], True)],
                        float(i % 2), t.id, i // 4) for i, t in enumerate(ts)]
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)
    exp.advantages = torch.randn(exp.action_mask.shape, generator=torch.Generator().manual_seed(0)) * exp.action_mask
    return exp


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_gradient_accumulation_is_invariant(tiny, agg):
    """One optimizer step with 1 x 16 samples equals 8 micro-batches of 2 (STYLE 11)."""
    model, tok, env = tiny
    exp = _batch(tok, env)
    results = []
    for micro in (16, 2):
        m = copy.deepcopy(model)
        learner = PolicyLearner(m, LearnerConfig(lr=1e-2, micro_batch_size=micro, grad_clip=0.0),
                                AlgoConfig(loss_agg=agg))
        metrics = learner.train_step(exp)
        results.append((metrics["policy_loss"], [p.grad.clone() for p in m.parameters()]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-4, abs=1e-6)
    for a, b in zip(results[0][1], results[1][1]):  # the accumulated gradient of the one step
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_old_logprobs_only_needed_for_several_steps(tiny):
    model, tok, env = tiny
    one = PolicyLearner(model, LearnerConfig(), AlgoConfig())
    assert not one.needs_old_logprobs(256)
    assert PolicyLearner(model, LearnerConfig(ppo_epochs=2), AlgoConfig()).needs_old_logprobs(256)
    assert PolicyLearner(model, LearnerConfig(mini_batch_size=64), AlgoConfig()).needs_old_logprobs(256)
    exp = _batch(tok, env, 4)
    assert one.logprobs(exp).shape == exp.action_mask.shape
