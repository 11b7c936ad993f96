"""Asynchronous rollouts (``rollout.async``): the staleness bound, partial rollouts across a weight
update, per-token versions in Experience, and failed samples kept out of the loss; on a real tiny
model and the real HF engine."""

from __future__ import annotations

import copy
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "environments"))
import flaky_envs  # noqa: E402

from agentrl.config import load_config  # noqa: E402
from agentrl.rollout.async_rollout import RolloutBatch, RolloutWorker, VersionedEngine  # noqa: E402
from agentrl.rollout.engines.base import SamplingParams  # noqa: E402
from agentrl.rollout.env_pool import EnvPool  # noqa: E402
from agentrl.rollout.worker_process import ProcessRolloutWorker  # noqa: E402
from agentrl.training.experience import Experience  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, env = tiny_arith
    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir), env


def _engine(model, tok) -> VersionedEngine:
    from agentrl.rollout.engines.hf import HFEngine

    return VersionedEngine(HFEngine(copy.deepcopy(model), tok))


@pytest.mark.parametrize("kind,k", [("thread", 0), ("thread", 1), ("thread", 2), ("process", 0), ("process", 2)])
def test_no_batch_is_more_than_max_staleness_versions_old(tiny, kind, k):
    """The thread and the process worker keep the same schedule (the process one gets its weights
    through shared memory, and its engine reports the version it generated with)."""
    model, tok, _ = tiny
    engine = _engine(model, tok)
    prompt = tok("12+34=")["input_ids"]

    def produce() -> RolloutBatch:
        engine.generate([prompt], SamplingParams(max_new_tokens=2))
        weight = next(engine.engine.model.parameters()).flatten()[0].item()
        return RolloutBatch([], ["one sample"], {"version": engine.version, "weight": weight})

    if kind == "thread":
        worker = RolloutWorker(produce, engine, max_staleness=k)
    else:
        worker = ProcessRolloutWorker(produce, engine, k, weights=model.named_parameters)
    published = {0: next(model.parameters()).flatten()[0].item()}
    seen = []
    for v in range(6):  # the learner at version v trains on the next batch, then publishes v + 1
        made = worker.next(v)
        seen.append(made.metrics["version"])
        assert v - k <= seen[-1] <= v
        if v == 0:  # before any new weights: the worker makes exactly k batches ahead, then waits
            deadline = time.monotonic() + 60
            while worker.buffered_samples() < k and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
            assert worker.buffered_samples() == k
        assert made.metrics["weight"] == published[seen[-1]]  # the weights of the version it reports
        newer = copy.deepcopy(model)
        with torch.no_grad():
            next(newer.parameters()).add_(0.01 * (v + 1))
        published[v + 1] = next(newer.parameters()).flatten()[0].item()
        engine.stage_weights(newer.named_parameters(), v + 1)
    worker.close()
    if k == 0:
        assert seen == list(range(6))  # max_staleness 0 is the synchronous schedule
    else:
        assert seen[:k + 1] == [0] * (k + 1)  # the batches made ahead used the weights of version 0



def test_a_failed_weight_load_reaches_the_learner_with_its_cause(tiny):
    """An error while the worker takes new weights (here: staged tensors the engine has no parameter
    for) is raised by ``next`` itself, not as a bare "the rollout worker stopped"."""
    model, tok, _ = tiny
    engine = _engine(model, tok)
    prompt, produced = tok("12+34=")["input_ids"], []

    def produce() -> RolloutBatch:
        engine.generate([prompt], SamplingParams(max_new_tokens=2))  # loads staged weights first
        produced.append(engine.version)
        return RolloutBatch([], [], {})

    worker = RolloutWorker(produce, engine, max_staleness=0)
    worker.next(0)
    engine.stage_weights([("no.such.weight", torch.zeros(1))], 1)
    with pytest.raises(KeyError, match="no.such.weight"):
        worker.next(1)
    worker.close()
    assert produced == [0]

def test_a_partial_rollout_continues_under_new_weights_and_keeps_its_versions(tiny):
    from agentrl.rollout.executors import MultiTurnExecutor

    model, tok, _ = tiny
    engine = _engine(model, tok)
    newer = copy.deepcopy(model)
    with torch.no_grad():
        for p in newer.parameters():
            p.add_(0.05)
    env = flaky_envs.TwoTurnArithmetic(template="{expr}=")

    def publish() -> None:  # the learner finishes an update while the episodes wait for their env
        engine.stage_weights(newer.named_parameters(), 1)  # before this episode's env answers (idempotent)

    env.on_first_step = publish
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=3), n_samples=3,
                           pool=EnvPool(workers=4))
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    trajs = ex.run([env.sample_task(rng)])
    assert all(t.info["action_versions"] == [0, 1] and not t.info.get("failed") for t in trajs)
    assert torch.equal(next(engine.engine.model.parameters()), next(newer.parameters()))
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)
    for b, t in enumerate(trajs):  # every generated token carries the version of its turn
        first, second = (len(s.token_ids) for s in t.segments if s.is_action)
        got = exp.versions[b][exp.action_mask[b].bool()].tolist()
        assert got == [0] * first + [1] * second


def test_failed_samples_are_not_in_the_loss(tmp_path):
    """One env hangs past env.step_timeout_s, one raises: the step finishes, and the learner's batch
    holds the other 14 samples only (their groups' baselines are computed without them)."""
    from agentrl.training.trainer import Trainer

    sys.path.insert(0, str(ROOT / "tests" / "environments"))
    cfg = load_config(ROOT / "examples" / "configs" / "cpu_demo.yaml", [
        "model.warm_start.enabled=false", "env.id=flaky_envs:FlakyArithmetic",
        "env.kwargs={digits: 2, template: '{expr}=', bare_answer: true, hang_at: 3, raise_at: 9, hang_s: 60}",
        "env.step_timeout_s=2", "rollout.env_workers=4", "data.prompts_per_step=4", "rollout.n_samples=4",
        "data.eval_tasks=2", "rollout.max_new_tokens=4", "algo.drop_zero_std_groups=false",
        "log.progress=false", "log.tensorboard=false", "learner.total_steps=1"])
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    seen: list[Experience] = []
    train_step = trainer.learner.train_step
    trainer.learner.train_step = lambda exp, **kw: (seen.append(exp), train_step(exp, **kw))[1]
    flaky_envs.reset_counter()
    metrics = trainer.step()
    assert metrics["failed/count"] == 2 and metrics["failed/dropped"] == 2
    [exp] = seen
    assert len(exp) == metrics["samples_used"] == 14
    sizes = Counter(exp.group_ids.tolist())
    assert sum(sizes.values()) == 14 and all(1 <= n <= 4 for n in sizes.values())


def test_one_optimizer_step_needs_no_old_logprob_forward(tiny):
    """With one optimizer step per batch the old log-probs are the learner's own, detached: the update
    (and the off-policy correction against stale engine log-probs) is the same as with a separate
    old-log-prob forward, so rollout.async skips that forward."""
    from agentrl.config import AlgoConfig, LearnerConfig
    from agentrl.rollout.executors import SingleTurnExecutor
    from agentrl.training.learner import PolicyLearner

    model, tok, env = tiny
    ex = SingleTurnExecutor(env, _engine(model, tok), tok, SamplingParams(max_new_tokens=3), n_samples=4)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    exp = Experience.from_trajectories(ex.run([env.sample_task(rng) for _ in range(2)]), tok.pad_token_id)
    exp.advantages = torch.randn(exp.action_mask.shape) * exp.action_mask
    exp.engine_logprobs = exp.engine_logprobs - 0.3 * torch.rand(exp.engine_logprobs.shape)  # a stale engine
    algo = AlgoConfig(tis_cap=2.0)
    params = []
    for with_old in (False, True):
        m = copy.deepcopy(model)
        learner = PolicyLearner(m, LearnerConfig(lr=1e-2, micro_batch_size=3), algo)
        assert not learner.needs_old_logprobs(len(exp))
        e = copy.copy(exp)
        e.old_logprobs = learner.logprobs(e) if with_old else None
        stats = learner.train_step(e)
        assert 0.0 < stats["mismatch/logprob_abs_diff_max"] and 0.0 < stats["mismatch/is_weight_mean"]
        params.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    torch.testing.assert_close(params[0], params[1], atol=1e-6, rtol=0)
    assert (params[0] - torch.cat([p.detach().flatten() for p in model.parameters()])).abs().max() > 1e-4  # it moved


def test_max_metrics_are_the_max_over_mini_batches(tiny):
    """``mismatch/logprob_abs_diff_max`` over two mini-batches is the larger of theirs, not their mean."""
    from agentrl.config import AlgoConfig, LearnerConfig
    from agentrl.rollout.executors import SingleTurnExecutor
    from agentrl.training.learner import PolicyLearner

    model, tok, env = tiny
    ex = SingleTurnExecutor(env, _engine(model, tok), tok, SamplingParams(max_new_tokens=3), n_samples=4)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    exp = Experience.from_trajectories(ex.run([env.sample_task(rng) for _ in range(2)]), tok.pad_token_id)
    exp.advantages = torch.randn(exp.action_mask.shape) * exp.action_mask
    exp.engine_logprobs = exp.engine_logprobs.clone()
    exp.engine_logprobs[4:] -= 2.0 * exp.action_mask[4:]  # only the second mini-batch is far off
    learner = PolicyLearner(copy.deepcopy(model), LearnerConfig(lr=1e-6, mini_batch_size=4, micro_batch_size=4),
                            AlgoConfig(tis_cap=2.0))
    stats = learner.train_step(exp)
    assert stats["mismatch/logprob_abs_diff_max"] > 1.9  # the mean of ~0 and ~2 would be ~1
    assert stats["mismatch/logprob_abs_diff_mean"] < 1.5
