"""Concurrent env steps: the worker pool, the event loop for ``async def step``, the per-step
deadline (a hung env fails only its episode and its worker is replaced), on the pool alone and
through both executors with a real tiny model."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flaky_envs  # noqa: E402

from agentrl.rollout.engines.base import SamplingParams  # noqa: E402
from agentrl.rollout.env_pool import EnvPool, StepTimeout  # noqa: E402


def test_pool_runs_calls_concurrently_and_keeps_order():
    pool = EnvPool(workers=8)
    meet = threading.Barrier(8, timeout=30)  # passes only when all 8 calls run at the same time
    out = pool.map(lambda i: (meet.wait(), i)[1], [(i,) for i in range(8)])
    assert [p.result() for p in out] == list(range(8)) and pool.max_running == 8
    pool.close()


def test_inline_pool_runs_in_the_caller():
    pool = EnvPool(workers=1)
    assert pool.inline
    [p] = pool.map(lambda: threading.current_thread(), [()])
    assert p.result() is threading.current_thread()


def test_a_hung_call_times_out_and_its_worker_is_replaced():
    release = threading.Event()
    pool = EnvPool(workers=2, timeout_s=1.0)
    hung = pool.submit(release.wait, 60)
    fine = pool.submit(lambda: "ok")
    pool.wait_all([hung, fine])
    assert fine.result() == "ok"
    with pytest.raises(StepTimeout, match="deadline"):
        hung.result()
    assert pool.replaced == 1
    # the pool still has two live workers (the hung one is still blocked): two calls meet
    meet = threading.Barrier(2, timeout=30)
    assert sorted(p.result() for p in pool.map(meet.wait, [(), ()])) == [0, 1]
    assert not release.is_set()
    release.set()
    pool.close()


def test_errors_are_outcomes_not_crashes():
    pool = EnvPool(workers=3)

    def boom():
        raise ValueError("env exploded")

    a, b = pool.map(boom, [()]) + pool.map(lambda: 1, [()])
    with pytest.raises(ValueError, match="exploded"):
        a.result()
    assert b.result() == 1
    pool.close()


def test_coroutine_calls_run_on_the_event_loop_with_a_deadline():
    pool = EnvPool(workers=1, timeout_s=2.0)
    arrived = []

    async def nap(i):
        arrived.append(i)
        while i and len(arrived) < 10:  # returns only once all ten coroutines have started
            await asyncio.sleep(0.01)
        await asyncio.sleep(3600 if i == 0 else 0)
        return i

    out = pool.map(nap, [(i,) for i in range(10)])
    assert [p.result() for p in out[1:]] == list(range(1, 10)) and pool.max_running == 10
    with pytest.raises(StepTimeout):
        out[0].result()
    pool.close()


# ---------------------------------------------------------------- through the executors


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, _ = tiny_arith
    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


def test_single_turn_executor_fails_only_the_hung_and_the_raising_episode(tiny):
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.executors import SingleTurnExecutor

    model, tok = tiny
    flaky_envs.reset_counter()
    env = flaky_envs.FlakyArithmetic(hang_at=1, raise_at=4, hang_s=60.0, template="{expr}=")
    ex = SingleTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=3), n_samples=4,
                            pool=EnvPool(workers=8, timeout_s=2.0))
    start = time.monotonic()
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    trajs = ex.run([env.sample_task(rng) for _ in range(3)])
    assert time.monotonic() - start < 30  # the hung step was cut at its deadline
    failed = [t for t in trajs if t.info.get("failed")]
    assert len(trajs) == 12 and len(failed) == 2
    assert sorted(t.info["error"].split(":")[0] for t in failed) == ["RuntimeError", "StepTimeout"]
    assert all(t.reward == 0.0 for t in failed) and ex.pool.replaced == 1


def test_multi_turn_executor_steps_async_envs_concurrently(tiny):
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.executors import MultiTurnExecutor

    model, tok = tiny
    flaky_envs.reset_counter()
    env = flaky_envs.AsyncSleepArithmetic(delay_s=0.2, hang_at=0, template="{expr}=")
    ex = MultiTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=3), n_samples=6,
                           max_turns=2, pool=EnvPool(workers=1, timeout_s=2.0))
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    trajs = ex.run([env.sample_task(rng)])
    assert ex.pool.max_running == 6  # every episode's step was in flight at once
    failed = [t for t in trajs if t.info.get("failed")]
    assert len(failed) == 1 and "StepTimeout" in failed[0].info["error"]
    assert all(len(t.turn_rewards) == 1 and t.info["end_reason"] == "terminated" for t in trajs if t not in failed)


def test_an_env_that_cannot_be_copied_steps_one_call_at_a_time(tiny, caplog):
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.executors import SingleTurnExecutor

    model, tok = tiny
    env = flaky_envs.FlakyArithmetic(template="{expr}=")
    env.handle = threading.Lock()  # e.g. a connection: deepcopy refuses it
    ex = SingleTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=3), n_samples=4,
                            pool=EnvPool(workers=4))
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    trajs = ex.run([env.sample_task(rng) for _ in range(2)])
    assert len(trajs) == 8 and not any(t.info.get("failed") for t in trajs)
    assert "cannot be copied" in caplog.text


def test_a_forked_child_starts_its_own_workers():
    """The rollout worker process is forked from a trainer whose pool has threads already: the child
    (where those threads do not exist) starts fresh ones instead of queueing to dead ones."""
    import multiprocessing as mp

    pool = EnvPool(workers=2)
    assert [p.result() for p in pool.map(lambda a: a + 1, [(1,), (2,)])] == [2, 3]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=lambda: q.put([p.result() for p in pool.map(lambda a: a * 2, [(1,), (2,), (3,)])]))
    child.start()
    assert q.get(timeout=30) == [2, 4, 6]
    child.join(timeout=30)
    assert child.exitcode == 0
    pool.close()
