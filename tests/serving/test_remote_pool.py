"""``env.remote``: episodes spread over ``agentrl serve-env`` servers, least-loaded, resets retried on
another server, an episode whose server dies fails alone; a run with a server killed mid-run finishes."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from servers import serve_env

from agentrl.config import load_config
from agentrl.env import EnvError, make
from agentrl.rollout.env_pool import clone_env
from agentrl.rollout.remote_env import EnvServerPool, RemoteEnv, RemoteEnvError


def remote(urls: list[str], env_id: str = "agentrl/Arithmetic-v0", **kw) -> RemoteEnv:
    pool = EnvServerPool(urls, env_id=env_id, **kw)
    pool.check()
    return RemoteEnv(make(env_id), pool)


def test_episodes_spread_over_servers_and_score_as_here():
    local = make("agentrl/Arithmetic-v0")
    with serve_env("agentrl/Arithmetic-v0") as (a, _), serve_env("agentrl/Arithmetic-v0") as (b, _):
        env = remote([a, b])
        tasks = [local.sample_task(local.np_random) for _ in range(6)]
        copies = [clone_env(env) for _ in tasks]
        opened = [c.reset(options={"task": t}) for c, t in zip(copies, tasks)]  # six episodes in flight at once
        assert Counter(info["env_server"] for _, info in opened) == {a: 3, b: 3}  # least-loaded
        for (text, info), t in zip(opened, tasks):
            assert text == local.render_prompt(t) and info["task"] is t
        for k, (c, t) in enumerate(zip(copies, tasks)):
            answer = local.reference_answer(t) if k % 2 else "no"
            _, reward, terminated, truncated, _ = c.step(answer)
            assert (reward, terminated, truncated) == (float(k % 2), True, False)
            c.close()
        assert [s.active for s in env.pool.servers] == [0, 0]


def test_a_down_server_is_skipped_and_a_dead_one_fails_its_episode_only():
    local = make("agentrl/Arithmetic-v0")
    t = local.sample_task(local.np_random)
    with serve_env("agentrl/Arithmetic-v0") as (a, _), serve_env("agentrl/Arithmetic-v0") as (b, proc_b):
        env = remote([a, b])
        on_a, on_b = clone_env(env), clone_env(env)
        assert on_a.reset(options={"task": t})[1]["env_server"] == a
        assert on_b.reset(options={"task": t})[1]["env_server"] == b
        proc_b.kill()
        proc_b.wait(10)
        with pytest.raises(RemoteEnvError, match=f"env server {b} failed during the episode"):
            on_b.step("1")
        assert on_a.step(local.reference_answer(t))[1] == 1.0  # the other server's episode goes on
        for _ in range(3):  # new episodes go to the live server (b is marked down, then probed)
            c = clone_env(env)
            assert c.reset(options={"task": t})[1]["env_server"] == a
            c.close()
    with pytest.raises(RemoteEnvError, match="no env server could reset"):
        clone_env(env).reset(options={"task": t})


def test_a_multi_turn_episode_keeps_its_server_and_session():
    with serve_env("slow_envs:Guess") as (a, _), serve_env("slow_envs:Guess") as (b, _):
        env = remote([a, b], env_id="slow_envs:Guess")
        assert env.max_turns == 4
        task = make("slow_envs:Guess").sample_task(np.random.default_rng(0))
        episode = clone_env(env)
        _, info = episode.reset(options={"task": task})
        server = info["env_server"]
        low, high, replies = 0, 9, []
        for _ in range(4):
            guess = (low + high) // 2
            text, reward, terminated, truncated, step_info = episode.step(str(guess))
            replies.append(text)
            assert step_info["env_server"] == server  # every turn on the server that reset it
            if terminated or truncated:
                break
            low, high = (guess + 1, high) if text == "higher" else (low, guess - 1)
        assert terminated and reward == 1.0 and replies[-1] == "" and len(replies) <= 4
        episode.close()
        assert sum(s.active for s in env.pool.servers) == 0


def test_the_pool_checks_its_servers_at_start():
    with serve_env("agentrl/Countdown-v0") as (url, _):
        with pytest.raises(EnvError, match=f"{url} serves 'agentrl/Countdown-v0', but this run's env.id is"):
            EnvServerPool([url], env_id="agentrl/Arithmetic-v0").check()
    with pytest.raises(EnvError, match="give a list of http:// URLs"):
        EnvServerPool(["127.0.0.1:1"])
    with pytest.raises(EnvError, match="cannot reach http://127.0.0.1:9"):
        EnvServerPool(["http://127.0.0.1:9"], connect_timeout_s=2).check()


@pytest.mark.slow
def test_a_run_survives_a_server_killed_mid_run(tmp_path: Path):
    """Two servers; one killed while it holds episodes. The run finishes; its in-flight episodes are the
    failed ones (left out of the loss), every other episode trained once, none lost."""
    log = tmp_path / "steps.log"
    kwargs = f'{{"delay": 0.3, "log": "{log}"}}'
    with serve_env("slow_envs:SlowArithmetic", "--kwargs", kwargs) as (a, proc_a), \
            serve_env("slow_envs:SlowArithmetic", "--kwargs", kwargs) as (b, proc_b):
        cfg = load_config(None, [
            "env.id=slow_envs:SlowArithmetic", f"env.remote=[{a}, {b}]", "env.eval_kwargs={}", "env.dev_kwargs={}",
            "model.path=tiny", "model.device=cpu", "model.warm_start.enabled=false", "data.prompts_per_step=4",
            "data.eval_tasks=2", "rollout.n_samples=2", "rollout.max_new_tokens=6", "learner.total_steps=3",
            "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false", "rollout.env_workers=8",
            "model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_layers=2",
            "model.tiny.intermediate_size=128"])
        from agentrl.training.trainer import Trainer

        trainer = Trainer(cfg, run_dir=tmp_path / "run")
        generated: list = []
        run = trainer.executor.run
        trainer.executor.run = lambda *a, **k: generated.append(run(*a, **k)) or generated[-1]
        killed: list[int] = []

        def kill_b_mid_step() -> None:  # once b has started stepping an episode of step 2
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not killed:
                starts = [ln for ln in (log.read_text().splitlines() if log.exists() else [])
                          if ln.startswith(f"{proc_b.pid} start")]
                if len(generated) == 1 and starts and len(starts) > 4:
                    proc_b.kill()
                    killed.append(len(starts))
                time.sleep(0.01)

        watcher = threading.Thread(target=kill_b_mid_step)
        watcher.start()
        metrics = [trainer.step() for _ in range(3)]
        watcher.join(60)
        assert killed, "b was never killed"
    assert len(generated) == 3 and all(len(batch) == 8 for batch in generated)  # none lost
    failed = [t for batch in generated for t in batch if t.info.get("failed")]
    assert failed and all(t.info.get("error", "").startswith("RemoteEnvError") for t in failed)
    lines = log.read_text().splitlines()
    ended = Counter(ln.split()[0] for ln in lines if " end " in ln)
    reset_b = sum(1 for ln in lines if ln.startswith(f"{proc_b.pid} reset"))
    assert len(failed) == reset_b - ended[str(proc_b.pid)]  # the episodes b held when it died, and only those
    ok = [t for batch in generated for t in batch if not t.info.get("failed")]
    assert len(ok) == ended[str(proc_a.pid)] + ended[str(proc_b.pid)]  # every other episode stepped once
    assert [m["failed/dropped"] for m in metrics] == [float(sum(t.info.get("failed", False) for t in batch))
                                                       for batch in generated]
    assert [m["samples_used"] for m in metrics] == [sum(not t.info.get("failed") for t in batch)
                                                    for batch in generated]  # failed ones left the loss
    assert all(t.info["env_server"] == a for t in generated[2])  # after the kill, only a
