"""``agentrl/Terminal-v0``: procedural shell tasks over a generated file tree, graded by the final tree.

Each task comes from one of the families of :mod:`environments.terminal.families` (find and count,
grep and extract from logs, sort and deduplicate, rename and move by rule, delete by rule, archive and
checksum, permissions, fix a JSON, KEY=VALUE or INI config, make a failing shell or Python script
pass, replace words, sum a CSV column, ...) at a ``difficulty`` from 1 to 5: more files, deeper trees,
distractors a careless command catches, more steps. Unlimited tasks, the same for the same seed; each
falls in one split by a hash of its contents (80% train, 10% dev, 10% test), so held-out tasks never
appear in training.

The agent works in a workspace with the tools of :mod:`environments.workspace_tools` (multi-turn, see
:class:`environments.workspace_env.WorkspaceEnv`); the reward is 1 when every check of the task holds
on the final tree (:mod:`environments.terminal.checks`, run by the task's ``tests/test.sh`` in a fresh
workspace after the agent's processes are gone), else 0. It never looks at the transcript. Every task
is a Harbor task directory too (:mod:`environments.generated`), with its oracle as
``solution/solve.sh``: ``agentrl tasks export agentrl/Terminal-v0 OUT --n 50`` writes them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.env import EnvError
from agentrl.types import Task
from environments import testee
from environments.generated import BASE_IMAGE, GeneratedEnv, task_toml
from environments.harbor.task import write_task
from environments.terminal import checks
from environments.terminal.catalog import load_all
from environments.terminal.families import Draw, Generated

SPLITS = {"train": (0, 80), "dev": (80, 90), "test": (90, 100), "all": (0, 100)}
TEST_SH = """#!/bin/bash
# Terminal-v0 verifier: every check of spec.json must hold on the final tree (check.py says which fail).
# The checks are the grader's alone: the agent's scripts, which check.py runs as the testee, cannot read
# them (and so cannot print the expected output for the fresh inputs). -I -S: the standard library only
# (no site-packages, .pth files, PYTHON* variables or script directory on the path), and a faster start.
mkdir -p /logs/verifier
AGENTRL_GRADER=1 chmod -R go-rwx /tests 2>/dev/null
if python3 -I -S /tests/check.py /tests/spec.json; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


@functools.lru_cache(maxsize=4096)
def generate(family: str, difficulty: int, seed: int) -> Generated:
    """The task of ``family`` at ``difficulty`` for ``seed`` (the same arguments, the same task)."""
    return load_all()[family](Draw(np.random.default_rng(seed)), difficulty)


def split_of(g: Generated) -> str:
    """Which split a task belongs to (a stable hash of its instruction and files)."""
    h = hashlib.sha256(g.instruction.encode())
    for path in sorted(g.files):
        data = g.files[path]
        h.update(path.encode() + b"\0" + (data.encode() if isinstance(data, str) else data))
    bucket = int(h.hexdigest()[:8], 16) % 100
    return next(n for n, (lo, hi) in SPLITS.items() if n != "all" and lo <= bucket < hi)


class TerminalEnv(GeneratedEnv):
    """Shell tasks over a generated file tree (17 families, difficulty 1-5), graded by the final tree.

    ``difficulty``: a level or a list of levels (drawn uniformly); ``families``: the families to draw from
    (default all); ``split``: train, dev, test or all. Other keywords are :class:`WorkspaceEnv`'s.
    """

    def __init__(self, difficulty: int | list[int] = 1, families: list[str] | None = None, split: str = "train",
                 *, backend: str = "local", max_turns: int = 10, tool_parser: str = "hermes",
                 command_timeout_s: float = 30.0, max_output_chars: int = 4000, max_calls_per_turn: int = 8,
                 system_prompt: str | None = None, pool_size: int = 0, grade_cache: bool = True,
                 grader_pool: int = 0, recycle: bool = True, render_mode: str | None = None) -> None:
        super().__init__(name="Terminal-v0", backend=backend, max_turns=max_turns, tool_parser=tool_parser,
                         command_timeout_s=command_timeout_s, max_output_chars=max_output_chars,
                         max_calls_per_turn=max_calls_per_turn, system_prompt=system_prompt, pool_size=pool_size,
                         grade_cache=grade_cache, grader_pool=grader_pool, recycle=recycle, render_mode=render_mode)
        levels = [difficulty] if isinstance(difficulty, int) else list(difficulty)
        if not levels or any(not isinstance(d, int) or not 1 <= d <= 5 for d in levels):
            raise EnvError(f"Terminal-v0: difficulty must be 1-5 or a list of them, got {difficulty!r}")
        known = list(load_all())
        chosen = known if families is None else list(families)
        unknown = [f for f in chosen if f not in known]
        if unknown or not chosen:
            raise EnvError(f"Terminal-v0: unknown family {unknown[0] if unknown else '(none given)'!r}; "
                           f"families: {', '.join(known)}")
        if split not in SPLITS:
            raise EnvError(f"Terminal-v0: unknown split {split!r}; valid: {', '.join(SPLITS)}")
        self.levels, self.families, self.split = levels, chosen, split

    def sample_task(self, rng: np.random.Generator) -> Task:
        for _ in range(1000):
            family = self.families[int(rng.integers(len(self.families)))]
            level = self.levels[int(rng.integers(len(self.levels)))]
            seed = int(rng.integers(2**62))
            g = generate(family, level, seed)
            if self.split == "all" or split_of(g) == self.split:
                return self._task(family, level, seed, g)
        raise RuntimeError(f"no task found in split {self.split!r}")  # pragma: no cover - 10% splits are found

    def _task(self, family: str, level: int, seed: int, g: Generated) -> Task:
        return Task(id=f"terminal-{family}-d{level}-{seed:x}", prompt=self.prompt(g.instruction), answer=None,
                    metadata={"family": family, "difficulty": level, "seed": seed, "split": split_of(g)})

    def task_named(self, name: str) -> Task:
        try:
            prefix, rest = name.split("-", 1)
            family, level, seed = rest.rsplit("-", 2)
            if prefix != "terminal" or family not in load_all() or not level.startswith("d"):
                raise ValueError
            level_n, seed_n = int(level[1:]), int(seed, 16)
        except ValueError:
            raise KeyError(f"{name!r} is not a Terminal-v0 task id (terminal-FAMILY-dLEVEL-SEED)") from None
        return self._task(family, level_n, seed_n, generate(family, level_n, seed_n))

    def generated(self, task: Task) -> Generated:
        m = task.metadata
        return generate(m["family"], m["difficulty"], m["seed"])

    def write_task(self, task: Task, out: Path) -> None:
        g, m = self.generated(task), task.metadata
        environment: dict[str, str | bytes] = {f"app/{p}": data for p, data in g.files.items()}
        environment["Dockerfile"] = f"FROM {BASE_IMAGE}\nWORKDIR /app\n" + ("COPY app/ /app/\n" if g.files else "")
        spec = {"workdir": "/app", "checks": list(g.checks)}
        tests = {"test.sh": TEST_SH, "check.py": Path(checks.__file__).read_text(encoding="utf-8"),
                 "testee.py": Path(testee.__file__).read_text(encoding="utf-8"),
                 "spec.json": json.dumps(spec, indent=1, sort_keys=True) + "\n"}
        solve = "#!/bin/bash\n# The oracle of this task.\nset -e\ncd /app\n" + "\n".join(g.solution) + "\n"
        toml = task_toml(agent_timeout_s=300, verifier_timeout_s=60, memory_mb=512, storage_mb=256,
                         metadata={"category": "terminal", "family": m["family"], "difficulty": m["difficulty"],
                                   "seed": str(m["seed"]), "split": m["split"]})
        write_task(out, g.instruction + "\n", toml, environment, tests, {"solve.sh": solve})
        for p in g.files:  # write_task makes every .sh executable; a task's files start as the family says
            (out / "environment" / "app" / p).chmod(0o755 if p in g.executable else 0o644)

    def initial_tree_reward(self, task: Task) -> float | None:
        """0 when a check that only reads files fails on the task's own files (the verifier's
        ``run_checks`` without its command checks, on the task directory's ``environment/app``: what the
        workspace is built from), so an untouched final tree is scored without a grade; None (grade it)
        when only a command check can tell (the script-repair families)."""
        app = self.harbor_task(task).environment_dir / "app"
        if not app.is_dir():
            return None
        spec = {"workdir": str(app), "checks": list(self.generated(task).checks)}  # spec.json's checks, cached
        return 0.0 if checks.run_checks(spec, commands=False) else None

    def reference_calls(self, task: Task) -> list[tuple[str, dict[str, Any]]]:
        return [("bash", {"command": c}) for c in self.generated(task).solution]
