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
from agentrl.rollout.build import make_env
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
        rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
        tasks = [local.sample_task(rng) for _ in range(6)]
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
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    t = local.sample_task(rng)
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


def test_a_server_that_ends_episodes_elsewhere_is_refused_at_start():
    """A server started with its defaults and a run with max_turns 2: episodes the run ended at its own
    max_turns were never graded by the server, reward 0 without a word (issue 46, finding 1)."""
    with serve_env("agentrl/CalculatorMath-v0") as (url, _):  # max_tool_calls 4 by default: 5 turns
        run = ["env.id=agentrl/CalculatorMath-v0", f"env.remote=[{url}]", "env.kwargs={max_tool_calls: 1}"]
        with pytest.raises(EnvError, match=f"{url} ends an episode after 5 turns, this run after 2") as e:
            make_env(load_config(None, run))
        assert "agentrl serve-env agentrl/CalculatorMath-v0 --kwargs '{\"max_tool_calls\": 1}'" in str(e.value)
        env = make_env(load_config(None, run[:2]))  # the same settings: accepted
        env.close()


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


def open_sessions(url: str) -> int:
    import httpx

    return int(httpx.get(url + "/health", timeout=5).json()["sessions"])


def settles(url: str, timeout_s: float = 10.0) -> bool:
    """Whether the server's open sessions come back to 0 within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while open_sessions(url):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_episode_that_timed_out_gives_its_session_back():
    """A step past the pool's timeout fails its episode and closes its connection, so the server ends the
    session (issue 43: the connection was dropped unclosed and the session held until the idle timeout)."""
    local = make("agentrl/Arithmetic-v0")
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    t = local.sample_task(rng)
    with serve_env("slow_envs:SlowArithmetic", "--idle-timeout", "600") as (a, _):
        env = remote([a], env_id="slow_envs:SlowArithmetic", timeout_s=0.5)
        episode = clone_env(env)
        episode.reset(options={"task": t})
        with pytest.raises(RemoteEnvError, match="failed during the episode"):
            episode.step("sleep 1.5; " + local.reference_answer(t))
        assert settles(a, 5.0), "the timed-out episode's session is still open"


def test_a_reset_that_timed_out_is_retried_elsewhere_and_its_session_closed():
    local = make("agentrl/Arithmetic-v0")
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    t = local.sample_task(rng)
    with serve_env("slow_envs:SlowArithmetic", "--kwargs", '{"reset_delay": 1.5}') as (slow, _), \
            serve_env("slow_envs:SlowArithmetic") as (fast, _):
        env = remote([slow, fast], env_id="slow_envs:SlowArithmetic", timeout_s=0.5)
        episode = clone_env(env)
        assert episode.reset(options={"task": t})[1]["env_server"] == fast  # slow was tried first
        assert episode.step(local.reference_answer(t))[1] == 1.0
        assert settles(slow, 5.0), "the slow server still holds the reset that timed out"


def test_a_connection_the_server_closed_while_idle_does_not_fail_the_next_episode():
    """The server closes a pooled connection at its idle timeout; the next reset takes another, on the same
    server, which is not marked down (issue 43: with one server, the episode failed)."""
    local = make("agentrl/Arithmetic-v0")
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    t = local.sample_task(rng)
    with serve_env("agentrl/Arithmetic-v0", "--idle-timeout", "0.5") as (a, _):
        env = remote([a])
        for _ in range(2):
            episode = clone_env(env)
            episode.reset(options={"task": t})
            assert episode.step(local.reference_answer(t))[1] == 1.0  # done: its connection is pooled
            time.sleep(1.2)  # past the server's idle timeout: it closed that connection
        assert env.pool.servers[0].failures == 0 and settles(a, 5.0)


def test_the_pool_under_a_chaos_schedule_loses_and_double_counts_nothing(tmp_path: Path):
    """Episodes in threads against two servers whose idle timeout is short, with step timeouts, reset
    timeouts, pauses past the idle timeout, and one server killed and restarted on its port: every episode
    ends exactly once (a reward, or a RemoteEnvError), no step runs twice on the servers, and every
    server's open sessions come back to 0."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    from servers import stop

    log = tmp_path / "steps.log"
    kwargs = f'{{"log": "{log}"}}'
    local = make("agentrl/Arithmetic-v0")
    rng = random.Random(0)
    with serve_env("slow_envs:SlowArithmetic", "--kwargs", kwargs, "--idle-timeout", "0.4") as (a, _), \
            serve_env("slow_envs:SlowArithmetic", "--kwargs", kwargs, "--idle-timeout", "0.4") as (b, proc_b):
        env = remote([a, b], env_id="slow_envs:SlowArithmetic", timeout_s=0.6, down_s=0.3)
        rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
        tasks = list({t.id: t for t in (local.sample_task(rng) for _ in range(64))}.values())[:24]
        assert len(tasks) == 24  # distinct ids: the step log counts steps by task id (a repeat read as a rerun)
        plan = [(k, rng.choice(["ok", "ok", "slow_step", "pause"])) for k in range(len(tasks))]
        ended: Counter = Counter()

        def episode(k: int, kind: str) -> str:
            time.sleep(0.05 * (k % 6))
            e = clone_env(env)
            try:
                e.reset(options={"task": tasks[k]})
                if kind == "pause":
                    time.sleep(0.6)  # past the servers' idle timeout, mid-episode: the session is gone
                answer = ("sleep 1; " if kind == "slow_step" else "") + local.reference_answer(tasks[k])
                out = "reward" if e.step(answer)[1] == 1.0 else "wrong"
            except RemoteEnvError:
                out = "failed"
            finally:
                e.close()
            ended[k] += 1
            return out

        with ThreadPoolExecutor(6) as pool:
            first = list(pool.map(lambda p: episode(*p), plan[:12]))
            stop(proc_b)  # b goes away between two waves, and comes back on its port
            port = b.rsplit(":", 1)[1]
            restarted = subprocess_serve(port, kwargs)
            try:
                second = list(pool.map(lambda p: episode(*p), plan[12:]))
                assert settles(a) and settles(b)
            finally:
                stop(restarted)
    results = first + second
    assert sorted(ended) == list(range(len(tasks))) and set(ended.values()) == {1}  # none lost, none twice
    for (k, kind), out in zip(plan, results):
        assert out == ("reward" if kind == "ok" else "failed"), (k, kind, out)
    steps = Counter(ln.split()[2] for ln in log.read_text().splitlines() if " start " in ln)
    assert all(n == 1 for n in steps.values())  # a step is never run twice


def subprocess_serve(port: str, kwargs: str):
    """``agentrl serve-env slow_envs:SlowArithmetic`` again on ``port`` (a server restarted where it was)."""
    import subprocess
    import sys
    import tempfile

    from servers import ROOT, SERVE_ENV, environ, wait_healthy

    with tempfile.TemporaryFile("w+") as log:  # its output to a file, never an unread pipe (servers.py)
        proc = subprocess.Popen([sys.executable, "-c", SERVE_ENV, "slow_envs:SlowArithmetic", "--port", port,
                                 "--kwargs", kwargs, "--idle-timeout", "0.4"], cwd=ROOT, env=environ(),
                                stdout=log, stderr=subprocess.STDOUT, text=True)
        wait_healthy(f"http://127.0.0.1:{port}", proc, log)
    return proc


def test_a_remote_env_warm_starts_on_its_local_twin():
    """Issue 46, finding 2: Terminal-v0 runs on env servers said "multi-turn env without a reference policy"
    though the env has one (an env server's protocol carries none). The warm start now plays the reference
    policy on the env.id the run builds locally, and says so."""
    from agentrl.training.warm_start import maybe_warm_start

    with serve_env("agentrl/CalculatorMath-v0") as (url, _):
        cfg = load_config(None, ["env.id=agentrl/CalculatorMath-v0", f"env.remote=[{url}]",
                                 "model.warm_start.enabled=true"])
        env = make_env(cfg)
        try:
            lines: list[str] = []
            got = maybe_warm_start(cfg, None, None, "tiny", env, lambda: env, log=lines.append, cached_only=True)
            assert got is None and any("its reference episodes play here, on agentrl/CalculatorMath-v0" in ln
                                       for ln in lines), lines
            assert not any("without a reference policy" in ln for ln in lines)
        finally:
            env.close()
