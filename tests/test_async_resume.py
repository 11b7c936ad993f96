"""An asynchronous run (rollout.async, max_staleness 1) survives SIGKILL: after ``--resume`` no
sample is lost and none is used twice.

The rollout worker runs a batch ahead, so at a checkpoint one batch is buffered or in flight. The
checkpoint stores the task position after the last batch *trained on*; the resumed run regenerates
the dropped batch from the same tasks. ``tasks/drawn`` (tasks behind the batches trained so far)
must then be exactly ``step x prompts_per_step`` at every step of the stitched run.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.runs.checkpoint import latest_checkpoint, load_trainer_state
from agentrl.runs.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "configs" / "cpu_demo.yaml"
P = 3
ARGS = ["model.warm_start.enabled=false", f"data.prompts_per_step={P}", "rollout.n_samples=3", "data.eval_tasks=4",
        "rollout.max_new_tokens=4", "log.progress=false", "log.tensorboard=false", "learner.max_seconds=0",
        "algo.drop_zero_std_groups=false", "algo.entropy_coef=0.05", "learner.lr=1e-3", "learner.total_steps=6",
        "checkpoint.every=2", "checkpoint.keep=5", "rollout.async=true", "rollout.max_staleness=1",
        "algo.tis_cap=2.0"]


def _train(run: Path, *extra: str, background: bool = False):
    cmd = [sys.executable, "-m", "agentrl.cli", "train", str(DEMO), *ARGS, *extra]
    log = open(run.parent / f"{run.name}.log", "a")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if background:
        return proc
    assert proc.wait(timeout=900) == 0, (run.parent / f"{run.name}.log").read_text()[-3000:]
    return proc


@pytest.mark.slow  # two training processes
def test_sigkill_of_an_async_run_then_resume_loses_and_repeats_nothing(tmp_path):
    run = tmp_path / "run"
    proc = _train(run, "--run-dir", str(run), background=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:  # kill mid-step 4, the worker ahead on 5
        if (run / "metrics.jsonl").exists() and any(r.get("step") == 3 and "reward/mean" in r
                                                    for r in read_metrics(run)):
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    saved = load_trainer_state(latest_checkpoint(run))
    assert saved["step"] == 2 and saved["tasks"]["drawn"] == 2 * P  # the position after the trained batches
    assert saved["async_dropped_samples"] >= 0

    _train(run, "--resume", str(run))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4, 5, 6]  # every step once
    assert [r["tasks/drawn"] for r in train] == [P * s for s in range(1, 7)]  # no task lost, none twice
    assert all(r["samples_used"] == P * 3 for r in train)
    assert all(r["staleness/max"] <= 1 for r in train)
    assert all("mismatch/logprob_abs_diff_max" in r for r in train)
    assert latest_checkpoint(run).name == "step_000006"
