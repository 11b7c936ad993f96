"""``agentrl init env NAME`` and ``agentrl tasks init NAME``: what they write passes its own checks as written
(the env's conformance test and a run of its config; the task's ``tasks check`` and ``tasks audit``), and
nothing is ever overwritten."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AGENTRL = [sys.executable, "-m", "agentrl.cli"]


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **env})


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("init")
    r = run([*AGENTRL, "init", "env", "dice-sort"], where)
    assert r.returncode == 0, r.stderr
    assert "dice_sort_env.py (DiceSortEnv)" in r.stdout
    return where / "dice-sort"


def test_init_env_writes_an_env_whose_conformance_test_passes(env_dir: Path) -> None:
    assert sorted(p.name for p in env_dir.iterdir()) == ["README.md", "config.yaml", "dice_sort_env.py",
                                                          "test_dice_sort_env.py"]
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(env_dir)], env_dir.parent,
            PYTHONPATH=str(env_dir))
    assert r.returncode == 0 and "5 passed" in r.stdout, r.stdout[-2000:]


@pytest.mark.slow
def test_init_env_config_trains(env_dir: Path, tmp_path: Path) -> None:
    r = run([*AGENTRL, "train", str(env_dir / "config.yaml"), "--run-dir", str(tmp_path / "run"),
             "model.warm_start.max_steps=20", "model.warm_start.eval_every=10", "learner.total_steps=2",
             "data.eval_tasks=8"], env_dir.parent, PYTHONPATH=str(env_dir), OMP_NUM_THREADS="1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "held-out accuracy" in r.stdout and (tmp_path / "run" / "metrics.jsonl").exists()


def test_nothing_is_overwritten_and_bad_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.py").write_text("keep me\n")
    for args in (["init", "env", "taken"], ["tasks", "init", "taken"]):
        r = run([*AGENTRL, *args], tmp_path)
        assert r.returncode == 2 and "nothing was written" in r.stderr and len(r.stderr.splitlines()) == 1
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["mine.py"]
    assert (tmp_path / "taken" / "mine.py").read_text() == "keep me\n"
    r = run([*AGENTRL, "init", "env", "9lives"], tmp_path)
    assert r.returncode == 2 and "starts with a letter" in r.stderr and not (tmp_path / "9lives").exists()


def test_tasks_init_writes_a_task_that_checks_and_resists_the_audit(tmp_path: Path) -> None:
    r = run([*AGENTRL, "tasks", "init", "sum-numbers"], tmp_path)
    assert r.returncode == 0, r.stderr
    task = tmp_path / "sum-numbers"
    assert (task / "tests" / "test.sh").stat().st_mode & 0o111 and (task / "solution" / "solve.sh").exists()
    check = run([*AGENTRL, "tasks", "check", str(task)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    audit = run([*AGENTRL, "tasks", "audit", str(task), "-j", "2"], tmp_path)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
