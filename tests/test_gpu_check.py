"""``scripts/gpu_check.sh``, the script a lent GPU runs first, rehearsed on CPU (``--device cpu``): it
lists its checks, refuses a machine without a GPU in one line unless told to rehearse, and writes
its JSON summary and log to ``$OUT`` with a status per check (the whole set ran by hand on CPU:
every check passes, tasks skipped where the command is missing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def run(*args: str, out: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", str(SCRIPT), sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_script_parses_and_lists_its_checks():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    out = subprocess.run([sys.executable, str(ROOT / "scripts/gpu_check.py"), "--list"], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["environment", "zero3", "vllm-sleep-reload", "weight-protocol", "ray-trainer", "grpo-hf",
                     "grpo-vllm", "memory-plan", "tasks"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine runs the checks for real")
def test_without_a_gpu_it_stops_at_once_unless_rehearsing(tmp_path):
    done = run(out=tmp_path, timeout=60)
    assert done.returncode == 1 and "FAIL: no nvidia-smi: this is not a GPU machine" in done.stderr


@pytest.mark.slow
def test_a_cpu_rehearsal_writes_the_summary_and_log(tmp_path):
    done = run("--", "--device", "cpu", "--steps", "2", "--only", "environment,grpo-hf,tasks", out=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {c["name"]: c["status"] for c in summary["checks"]}
    assert summary["device"] == "cpu" and summary["passed"]
    assert status["environment"] == status["grpo-hf"] == "pass" and status["tasks"] in ("pass", "skip")
    grpo = next(c for c in summary["checks"] if c["name"] == "grpo-hf")
    assert grpo["detail"]["steps"] == 2 and grpo["seconds"] > 0
    log = (tmp_path / "gpu_check.log").read_text()
    assert "PASS environment" in log and "ALL CHECKS PASSED" in log
