"""The package as a user installs it: a wheel built from the source tree, installed into a fresh venv
outside the repository, lists the envs and trains two demo steps from a directory that holds no
source.

The fresh venv gets agentrl only from the wheel. Its dependencies are the ones already installed for
the tests (each entry of this interpreter's site-packages linked into the new one, agentrl's own
editable install left out), so nothing is downloaded: ``pip install --no-index`` then also checks
that the wheel's declared dependencies are met by what is installed (measured: a fresh install of the
core stack from PyPI takes ~25 s plus torch and ~1.5 GB, and tests use the network only on loopback).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", ".cache", "build", "dist", ".pytest_cache", ".ruff_cache", "__pycache__"}
SKIP_AT_ROOT = {"runs"}  # the checkout's run directories, not agentrl/runs/


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600, stderr: bool = False) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + (out.stderr if stderr else "")


def clean_env(home: Path) -> dict[str, str]:
    """The user's environment: no PYTHONPATH, caches in the temporary home, the CPU stack's variables."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(AGENTRL_CACHE=str(home / "cache"), HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1",
               OMP_NUM_THREADS="1", PIP_NO_INPUT="1")
    return env


def build_wheel(out: Path, env: dict[str, str]) -> Path:
    """Build from a copy of the source tree (the build writes build/ and *.egg-info beside the sources)."""
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=lambda d, names: [n for n in names if n in SKIP or n.endswith(".egg-info")
                                                        or n in SKIP_AT_ROOT and Path(d) == ROOT])
    log = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w",
               str(out / "dist"), str(src)], cwd=out, env=env, stderr=True)
    assert "deprecat" not in log.lower(), log[-3000:]  # e.g. project.license as a table (before SPDX strings)
    (wheel,) = (out / "dist").glob("agentrl-*.whl")
    return wheel


def fresh_venv(where: Path) -> Path:
    """A new venv whose site-packages links every installed distribution of this one but agentrl."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(where), "platbase": str(where)}))
    mine = Path(sysconfig.get_path("purelib"))
    for entry in mine.iterdir():
        if "agentrl" in entry.name.lower() or entry.name.startswith("__editable__"):
            continue  # this checkout's editable install: the wheel must stand alone
        target = site / entry.name
        if not target.exists():
            target.symlink_to(entry)
    return where / "bin" / "python"


def test_the_wheel_installed_outside_the_repository_lists_envs_and_trains(tmp_path):
    env = clean_env(tmp_path)
    wheel = build_wheel(tmp_path, env)
    names = zipfile.ZipFile(wheel).namelist()
    info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    for path in ("licenses/LICENSE", "licenses/NOTICE", "licenses/licenses/MBPP-CC-BY-4.0.txt"):
        assert f"{info}/{path}" in names
    assert "environments/data/gsm8k_test.jsonl" in names and "sandbox/_runtime/_server.py" in names
    assert {"sandbox/_runtime/_testee.c", "sandbox/_runtime/_testee_files.c", "sandbox/_runtime/_testee.h"} <= set(names)
    # RepoRepair-v0's task set, its pinned projects' shipped copies and their licenses
    for path in ("tasks.jsonl.gz", "projects.json", "projects/cachetools-5.5.0.tar.gz", "licenses/idna-3.10-LICENSE.md"):
        assert f"environments/data/repo_repair/{path}" in names, path
    meta = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta

    python = fresh_venv(tmp_path / "venv")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "-q", str(wheel)],
        cwd=tmp_path, env=env)
    work = tmp_path / "user"  # a directory that holds no source: nothing imports from the checkout
    work.mkdir()
    where = run([str(python), "-c", "import agentrl, environments, rewards, sandbox; "
                 "print('\\n'.join(m.__file__ for m in (agentrl, environments, rewards, sandbox)))"], work, env)
    assert all(line.startswith(str(tmp_path / "venv")) for line in where.split()), where
    agentrl = str(tmp_path / "venv" / "bin" / "agentrl")
    listed = run([agentrl, "envs", "list"], work, env)
    assert "agentrl/GSM8K-v0" in listed and "agentrl/HumanEval-v0" in listed and "agentrl/Arithmetic-v0" in listed

    shutil.copy(ROOT / "examples" / "configs" / "cpu_demo.yaml", work / "cpu_demo.yaml")
    out = run([agentrl, "train", "cpu_demo.yaml", "learner.total_steps=2", "model.warm_start.enabled=false",
               "data.eval_tasks=16", "data.prompts_per_step=8", "log.eval_every=0", "log.tensorboard=false",
               "log.progress=false", "algo.drop_zero_std_groups=false"], work, env)  # an untrained model scores 0:
    # keep its groups, so both steps run the learner
    metrics = [json.loads(line) for line in (work / "runs" / "cpu_demo" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss/policy_loss" in m] == [1, 2], out
    assert "in 2 steps" in out
    assert (work / "runs" / "cpu_demo" / "config.yaml").exists()
    if os.geteuid() == 0:  # graded by the installed sandbox (its runtime and exec hook come from the wheel)
        shutil.copytree(ROOT / "examples" / "tasks" / "word-frequency", work / "task")
        checked = run([agentrl, "tasks", "check", "task", "--json"], work, {**env, "AGENTRL_CACHE": str(tmp_path / "c")})
        assert json.loads(checked.strip().splitlines()[-1])["oracle"] == 1.0, checked
