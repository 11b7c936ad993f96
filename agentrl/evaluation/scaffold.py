"""Starting something new: ``agentrl init env NAME`` and ``agentrl tasks init NAME`` write a working start.

- ``init_env(dest)``: a folder holding a :class:`agentrl.TextEnv` module (``NAME_env.py``: sort three digits,
  with train/dev/test splits and a reference answer), its conformance test (``test_NAME_env.py``: Gymnasium's
  ``check_env``, the reference scores 1, garbage 0, same seed same task, splits disjoint), a config that
  trains it with the tiny model (``config.yaml``) and a README with the three commands. Every file is the
  user's to change: the task, the score, the config.
- ``init_task(dest)``: a Harbor task directory (``instruction.md``, ``task.toml``, ``environment/`` with a
  Dockerfile and its data, ``tests/test.sh`` and its checker, ``solution/solve.sh``) whose verifier follows
  the rules of a grader an RL policy cannot game (docs/workspaces.md): the checker lives under ``/tests``
  (the grader's), reads the agent's output as data and never runs the agent's code, writes the reward
  only once it has decided, and the expected answer is in ``/tests``, which the agent never sees. As
  written it passes ``agentrl tasks check`` (oracle 1, no-op 0) and ``agentrl tasks audit``.

Both refuse a destination that exists and is not an empty folder (nothing is overwritten).
"""

from __future__ import annotations

import re
from pathlib import Path

from agentrl.env import EnvError

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


def _names(dest: str) -> tuple[Path, str]:
    """The destination folder (checked empty or absent) and the name it gives (its last part)."""
    path = Path(dest)
    name = path.name
    if not NAME.match(name):
        raise EnvError(f"{name!r}: a name starts with a letter and holds only letters, digits, '-' and '_' "
                       "(at most 64)")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise EnvError(f"{path} exists and is not an empty folder: nothing was written (choose another NAME)")
    return path, name


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if rel.endswith(".sh"):
            target.chmod(0o755)


# ---------------------------------------------------------------------------------------------------- env
ENV_MODULE = '''"""{cls}: sort three digits ('3 1 2' -> '123'); reward 1 for the sorted digits.

Written by ``agentrl init env``: change ``sample_task`` (what a task is), ``score`` (what earns the
reward) and ``reference_answer`` (a correct answer: the warm start learns from it, the test checks it).
"""

from __future__ import annotations

from agentrl import RewardResult, Task, TextEnv

SPLITS = ("train", "dev", "test")


class {cls}(TextEnv):
    """Sort three digits; splits by the digits' value mod 7 (test: 0, dev: 1, train: the rest)."""

    def __init__(self, split: str = "train") -> None:
        super().__init__()
        if split not in SPLITS:
            raise ValueError(f"split must be one of {{SPLITS}}, got {{split!r}}")
        self.split = split

    def split_of(self, digits: str) -> str:
        return {{0: "test", 1: "dev"}}.get(int(digits) % 7, "train")

    def sample_task(self, rng) -> Task:
        while True:  # the same generator state gives the same task
            digits = "".join(str(d) for d in rng.integers(0, 10, size=3))
            if self.split_of(digits) == self.split:
                return Task(id=f"sort-{{digits}}", prompt=f"Sort {{' '.join(digits)}}:",
                            answer="".join(sorted(digits)))

    def reference_answer(self, task: Task) -> str:
        return task.answer

    def score(self, action: str, task: Task) -> RewardResult:
        ok = float(action.strip() == task.answer)
        return RewardResult(score=ok, components={{"correct": ok}})  # "correct" is what accuracy counts
'''

ENV_TEST = '''"""Conformance of {cls} (run: PYTHONPATH=. python -m pytest -q)."""

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl
from {module} import {cls}

GARBAGE = ["", " ", "\\n", "asdf", "1 2 3", "9999", "\\\\boxed{{}}", "The answer is banana."]


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_gymnasium_check_env(split: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a text space has no fixed size: gymnasium says so
        check_env({cls}(split=split), skip_render_check=True)


def test_reference_scores_one_and_garbage_zero() -> None:
    env = agentrl.make("{module}:{cls}")
    for seed in range(20):
        _, info = env.reset(seed=seed)
        task = info["task"]
        assert env.score(env.reference_answer(task), task).score == 1.0
        for bad in GARBAGE:
            assert env.score(bad, task).score == 0.0, bad


def test_same_seed_same_task_and_splits_disjoint() -> None:
    env = {cls}()
    assert env.reset(seed=3)[0] == env.reset(seed=3)[0]
    seen = {{s: {{{cls}(split=s).sample_task(np.random.default_rng(k)).id for k in range(200)}}
            for s in ("train", "dev", "test")}}
    assert not (seen["train"] & seen["test"]) and not (seen["train"] & seen["dev"]) and not (seen["dev"] & seen["test"])
'''

ENV_CONFIG = '''# Train {cls} with GRPO on CPU, the tiny model built here from the env's prompts and answers:
#   PYTHONPATH={dir} agentrl train {dir}/config.yaml
env:
  id: {module}:{cls}       # module:Class (the module must be importable: PYTHONPATH)
  eval_kwargs: {{split: test}}
  dev_kwargs: {{split: dev}}
model:
  path: tiny
  warm_start: {{max_steps: 200, eval_every: 50}}   # supervised on reference_answer() first
data:
  prompts_per_step: 16
  eval_tasks: 64
rollout:
  n_samples: 8
  max_new_tokens: 8        # answers are short
algo:
  estimator: group_norm    # GRPO
learner:
  lr: 3.0e-4               # the tiny model learns at a much larger rate than a pretrained one
  max_seconds: 60          # RL time budget
log:
  name: {module}
'''

ENV_README = '''# {cls}

Written by `agentrl init env {name}`. From the folder above this one:

```bash
PYTHONPATH={dir} python -m pytest -q {dir}          # the env's conformance test
PYTHONPATH={dir} agentrl doctor {dir}/config.yaml   # what a run would get wrong, before it runs
PYTHONPATH={dir} agentrl train {dir}/config.yaml    # GRPO with the tiny model, held-out accuracy at the end
```

`{module}.py` is the env: `sample_task` draws a task, `score` verifies an answer, `reference_answer`
gives a correct one (the warm start learns from it). Multi-turn envs, tools and agent tasks: the
project's README and docs/.
'''


def init_env(dest: str) -> int:
    """Write an env folder at ``dest`` (see the module docstring); prints what to run next."""
    path, name = _names(dest)
    module = re.sub(r"\W", "_", name.lower()).strip("_") + "_env"
    cls = "".join(p.capitalize() for p in re.split(r"[-_]+", name) if p) + "Env"
    fields = {"cls": cls, "module": module, "name": name, "dir": str(path)}
    _write(path, {f"{module}.py": ENV_MODULE.format(**fields), f"test_{module}.py": ENV_TEST.format(**fields),
                  "config.yaml": ENV_CONFIG.format(**fields), "README.md": ENV_README.format(**fields)})
    print(f"wrote {path}/: {module}.py ({cls}), test_{module}.py, config.yaml, README.md\n"
          f"  PYTHONPATH={path} python -m pytest -q {path}\n  PYTHONPATH={path} agentrl train {path}/config.yaml")
    return 0


# ---------------------------------------------------------------------------------------------------- task
NUMBERS = [17, 4, 256, 9, 73, 1024, 5, 38, 600, 21, 2, 88]

TASK_TOML = '''version = "1.0"

[metadata]
author_name = "you"
difficulty = "easy"
category = "text-processing"
tags = ["awk", "arithmetic"]

[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 30.0

[environment]
cpus = 1
memory_mb = 512
storage_mb = 64
'''

INSTRUCTION = '''# Add up the numbers

`/app/numbers.txt` holds one whole number per line. Write their sum to `/app/total.txt`, as the number
alone on one line.
'''

TEST_SH = '''#!/bin/bash
# Verifier (written by `agentrl tasks init`): /tests/check.py decides; it reads the agent's file as data and
# never runs the agent's code. The expected sum is in /tests, which the agent never sees.
mkdir -p /logs/verifier
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
'''

CHECK_PY = '''"""The checker: /app/total.txt must hold the expected sum (a number alone, spaces aside). Exit 0 or 1."""

import sys
from pathlib import Path

expected = Path("/tests/expected.txt").read_text().strip()
try:
    got = Path("/app/total.txt").read_text(errors="replace").strip()
except OSError as e:
    sys.exit(f"no /app/total.txt: {e.strerror}")
if got != expected:
    sys.exit(f"/app/total.txt holds {got[:40]!r}, not the sum")
print("the sum is right")
'''

DOCKERFILE = '''FROM ubuntu:24.04
WORKDIR /app
COPY numbers.txt /app/numbers.txt
'''

SOLVE_SH = '''#!/bin/bash
set -e
awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/total.txt
'''


def init_task(dest: str) -> int:
    """Write a Harbor task directory at ``dest`` (see the module docstring); prints what to run next."""
    path, _ = _names(dest)
    _write(path, {
        "task.toml": TASK_TOML, "instruction.md": INSTRUCTION, "environment/Dockerfile": DOCKERFILE,
        "environment/numbers.txt": "".join(f"{n}\n" for n in NUMBERS), "tests/test.sh": TEST_SH,
        "tests/check.py": CHECK_PY, "tests/expected.txt": f"{sum(NUMBERS)}\n", "solution/solve.sh": SOLVE_SH})
    print(f"wrote the task {path}/ (instruction.md, task.toml, environment/, tests/, solution/)\n"
          f"  agentrl tasks check {path}    # the oracle scores 1, a no-op agent 0\n"
          f"  agentrl tasks audit {path}    # known reward hacks against its verifier\n"
          f"  train on it: env.id: harbor:{path}")
    return 0
