"""Training faults in the single-process driver: each case asserts what the run did and what it logged.

An env raising in ``step``; a reward server that is down, slow, answering garbage or hanging on a
verifier (retries with backoff, then a per-sample failure, or a clear stop with
``reward.remote_strict``); SIGTERM to the driver (checkpoint, exit 143, resume continues the run);
the sandbox's job or fork-server killed from outside.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from faultkit import DEMO, ROOT, SMALL, BadServer, free_port, reward_server, server_env, stop

from agentrl.config import load_config
from agentrl.runs.checkpoint import latest_checkpoint, load_trainer_state
from agentrl.training.trainer import Trainer
from agentrl.types import Task
from rewards.client import RemoteReward, RemoteRewardError

# one env instance: every third step raises (a third of the episodes: under a max_failure_rate of 0.5)
ENV = ["env.id=faultkit:FlakyArithmetic", "env.kwargs={digits: 2, operators: '+', terms: 2, template: '{expr}=', "
       "bare_answer: true}", "rollout.env_workers=1", "env.max_failure_rate=0.5"]


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _steps(run: Path) -> list[dict]:
    return [r for r in _rows(run) if "reward/mean" in r]


def _fit(tmp_path: Path, *overrides: str) -> tuple[dict, list[dict]]:
    cfg = load_config(DEMO, SMALL + ["learner.total_steps=1", *overrides])
    summary = Trainer(cfg, run_dir=tmp_path).fit()
    return summary, _steps(tmp_path)


def test_env_raising_in_step_fails_only_those_episodes(tmp_path, capsys):
    handler = signal.getsignal(signal.SIGTERM)
    summary, steps = _fit(tmp_path, *ENV, "learner.total_steps=2")
    assert summary["steps"] == 2 and len(steps) == 2 and "interrupted" not in summary
    assert signal.getsignal(signal.SIGTERM) is handler  # fit restores the SIGTERM handler it installed
    # every third env.step raises: 16 samples a step -> 5 or 6 failed, the rest scored
    assert all(5 <= r["failed/count"] <= 6 for r in steps)
    assert all(r["samples_used"] == 16 - r["failed/count"] for r in steps)  # failed samples never train
    err = capsys.readouterr().err  # the traceback once (here and in the run directory), then counts
    assert err.count("RuntimeError: injected env fault") == 1 and "faultkit.py:" in err and "x RuntimeError at" in err
    assert (tmp_path / "env_errors.log").read_text().count("injected env fault") >= 1
    assert latest_checkpoint(tmp_path) is not None  # the run finished and saved


def test_remote_reward_scores_every_sample(tmp_path):
    with reward_server("--plugin", "faultkit:hang_on", "--workers", "1") as (url, _):
        _, steps = _fit(tmp_path, f"reward.remote_url={url}", "reward.remote_reward=hang_on")
    assert steps[0]["reward/mean"] == 1.0 and steps[0]["failed/count"] == 0  # the server's score, not the env's


def test_guidance_scores_the_reference_episodes_as_the_policys(tmp_path):
    """algo.guide plays the env's reference answer for each group without a success; with a reward server the
    reference is scored by the server too (here 0 for everything), so it is no better and nothing is guided.
    Without the server the same untrained policy's groups are guided by the env's 1.0."""
    guided = ["algo.guide=true", "learner.total_steps=1"]
    _, plain = _fit(tmp_path / "env", *guided)
    assert plain[0]["reward/mean"] < 1.0 and plain[0]["guide/samples"] > 0 and plain[0]["guide/reward"] == 1.0
    with reward_server("--plugin", "faultkit:zero", "--workers", "1") as (url, _):
        _, steps = _fit(tmp_path / "server", *guided, f"reward.remote_url={url}", "reward.remote_reward=zero")
    assert steps[0]["reward/mean"] == 0.0 and steps[0]["guide/samples"] == 0.0


def test_remote_reward_down_marks_samples_failed_and_training_goes_on(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="agentrl.training.trainer")
    dead = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    summary, steps = _fit(tmp_path, f"reward.remote_url={dead}", "reward.retries=2")
    assert summary["steps"] == 1 and summary["eval_after"] >= 0  # the run went on to its end
    assert steps[0]["failed/count"] == 16 and steps[0]["reward/mean"] == 0
    assert "reward server failed; 16 samples marked failed" in caplog.text and "3 attempts" in caplog.text
    assert time.monotonic() - t0 < 120


def test_remote_reward_down_with_strict_stops_with_a_clear_error(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = load_config(DEMO, SMALL + ["learner.total_steps=1", f"reward.remote_url={dead}", "reward.retries=1",
                                     "reward.remote_strict=true"])
    with pytest.raises(RuntimeError, match="reward.remote_strict is set: .*failed after 2 attempts"):
        Trainer(cfg, run_dir=tmp_path).fit()


@pytest.mark.parametrize("mode", ["garbage", "short", "nan", "503", "slow"])
def test_client_retries_a_misbehaving_server_then_fails(mode):
    """Garbage JSON, a missing result, a NaN score, 503s, a server slower than the timeout."""
    with BadServer(mode, delay_s=2.0) as srv:
        with RemoteReward(srv.url, retries=2, backoff_s=0.05, timeout_s=0.5) as client:
            t0 = time.monotonic()
            with pytest.raises(RemoteRewardError, match="failed after 3 attempts"):
                client.score_batch(["1", "2"], [Task("a", "", "1"), Task("b", "", "2")])
        assert srv.hits == 3  # retried with backoff, then gave up
        assert time.monotonic() - t0 < 10


def test_remote_reward_garbage_in_training_is_a_per_sample_failure(tmp_path):
    with BadServer("garbage") as srv:
        _, steps = _fit(tmp_path, f"reward.remote_url={srv.url}", "reward.retries=1")
    assert steps[0]["failed/count"] == 16 and srv.hits == 2


def test_verifier_hanging_past_its_limit_fails_those_samples(tmp_path):
    """The reward server's per-item limit ends a hung verifier; the trainer records the failures."""
    with reward_server("--plugin", "faultkit:hang", "--workers", "1", "--item-timeout", "1") as (url, proc):
        t0 = time.monotonic()
        _, steps = _fit(tmp_path, f"reward.remote_url={url}", "reward.remote_reward=hang",
                        "data.prompts_per_step=1", "rollout.n_samples=2", "reward.timeout_s=120")
        assert time.monotonic() - t0 < 120
        assert proc.poll() is None  # the server survived
    assert steps[0]["failed/count"] == 2 and steps[0]["reward/mean"] == 0


def _wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) while waiting for {what}: "
                                 f"{proc.stderr.read()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _train(run: Path, *overrides: str, resume: bool = False) -> subprocess.Popen:
    flag = ["--resume", str(run)] if resume else ["--run-dir", str(run)]
    return subprocess.Popen([sys.executable, "-m", "agentrl.cli", "train", str(DEMO), *SMALL, *overrides, *flag],
                            cwd=ROOT, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.mark.slow
def test_sigterm_checkpoints_then_exits_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    proc = _train(run, "learner.total_steps=1000", "checkpoint.every=0")
    try:
        _wait_for(lambda: (run / "metrics.jsonl").exists() and len(_steps(run)) >= 2, 300, "two steps", proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err
    ckpt = latest_checkpoint(run)
    n = load_trainer_state(ckpt)["step"]
    assert n >= 2 and f"SIGTERM: checkpoint {ckpt.name} written at step {n}" in out
    assert "--resume" in out
    assert max(r["step"] for r in _steps(run)) == n  # nothing logged beyond what the checkpoint holds
    # resume: the run continues from the checkpoint to its (new) end, with no step lost or repeated
    again = _train(run, f"learner.total_steps={n + 2}", resume=True)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert [r["step"] for r in _steps(run)] == list(range(1, n + 3))
    assert load_trainer_state(latest_checkpoint(run))["step"] == n + 2


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_sandbox_job_killed_from_outside_is_a_failed_result_and_the_sandbox_goes_on():
    import sandbox

    with sandbox.get_sandbox("local", workers=1, timeout_s=30) as sb:
        assert sb.run("print(1)").stdout == "1\n"  # the fork-server is up
        server = sb._all[0].proc.pid  # noqa: SLF001 (the test needs the process it kills)
        out: list = []
        job = threading.Thread(target=lambda: out.append(sb.run("import time\nprint('start', flush=True)\n"
                                                                "time.sleep(25)")))
        t0 = time.monotonic()
        job.start()
        _wait_for(lambda: any("python" in " ".join(p.cmdline()) for p in _descendants(server)), 20, "the job")
        for p in _descendants(server):  # the job (and its supervisor), not the server
            p.kill()
        job.join(30)
        assert out and out[0].status in ("killed", "error") and time.monotonic() - t0 < 20
        assert sb.run("print(2)").stdout == "2\n"
        # the fork-server itself killed from outside: the next run starts a new one
        psutil.Process(sb._all[0].proc.pid).kill()  # noqa: SLF001
        sb._all[0].proc.wait(10)  # noqa: SLF001
        assert sb.run("print(3)").stdout == "3\n"
