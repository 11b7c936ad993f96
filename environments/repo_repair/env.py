"""``agentrl/RepoRepair-v0``: fix a synthetic bug in a real Python project, graded by the project's own tests.

Tasks come from ``environments/data/repo_repair/tasks.jsonl.gz`` (built by
``scripts/build_repo_repair.py`` from pinned PyPI sdists; see :mod:`environments.repo_repair.build`):
each is one small AST mutation of one of the projects of :mod:`environments.repo_repair.projects` that
makes at least one of its tests fail, with an issue-like instruction (the failing behaviour and a
reproduction script; never the diff or a test name). The agent gets the project in ``/app`` (a git
repository, the bug committed) without the test modules that would fail, and the tools of
:mod:`environments.workspace_tools`. At grading the project's whole suite (its shipped copy, in
``/tests``) replaces whatever the agent left in its test directory and runs on the agent's code
(:mod:`environments.repo_repair.runner`); the reward is 1 when every test that passes on the pristine
project passes, so deleting the broken feature does not pass. ``split``: ``train`` or ``test`` (by
file: the test split's mutated files are never in train) or ``all``.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.env import TEXT_CHARSET, EnvError
from agentrl.types import Task
from environments import testee
from environments.generated import BASE_IMAGE, GeneratedEnv, task_toml
from environments.harbor.task import write_task
from environments.repo_repair import runner
from environments.repo_repair.projects import DATA_DIR, PROJECTS, Project, project_files, unpack

TASKS_FILE = DATA_DIR / "tasks.jsonl.gz"
SPLITS = ("train", "test", "all")
PATCH_END = "AGENTRL_PATCH_END"


def load_rows(path: Path = TASKS_FILE) -> list[dict[str, Any]]:
    """The shipped task rows (see ``scripts/build_repo_repair.py``)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


_CHARSET = frozenset(TEXT_CHARSET)


def in_text_space(text: str) -> str:
    """``text`` with the characters outside the env's text space (CJK, emoji: a few reproductions of idna's
    tests hold them) written as Python escapes, which mean the same inside the string literals they are in."""
    return "".join(c if c in _CHARSET else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                   for c in text)


def test_sh(project: Project) -> str:
    return f"""#!/bin/bash
# RepoRepair-v0 verifier: the project's whole suite (the copy in /tests, not the agent's) on the agent's code;
# every test that passes on the pristine project must pass (runner.py --grade: the suite runs in a child,
# as the testee, and reports on a channel of its own; an early exit reports nothing). No site-packages (-S).
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0
rm -rf /app/{project.tests} && mkdir -p /app/{project.tests} && cp -r /tests/suite/. /app/{project.tests}/
if python3 -S /tests/runner.py --grade --root /app --tests {project.tests} --source {project.source} \\
        --expect /tests/expected.json; then
    echo 1 > /logs/verifier/reward.txt
fi
"""


class RepoRepairEnv(GeneratedEnv):
    """Fix a synthetic bug in a real Python project (cachetools, idna, Markdown, more-itertools), graded by
    its own test suite. ``split``: train, test or all; ``projects``: keep only these; ``limit``: the first
    N tasks. Other keywords are :class:`WorkspaceEnv`'s."""

    unchanged_reward = 0.0  # the build kept a mutation only when some project test fails with it

    def __init__(self, split: str = "train", projects: list[str] | None = None, limit: int | None = None, *,
                 backend: str = "local", max_turns: int = 30, tool_parser: str = "hermes",
                 command_timeout_s: float = 120.0, max_output_chars: int = 8000, max_calls_per_turn: int = 8,
                 system_prompt: str | None = None, pool_size: int = 0, grade_cache: bool = True,
                 grader_pool: int = 0, recycle: bool = True, render_mode: str | None = None) -> None:
        super().__init__(name="RepoRepair-v0", backend=backend, max_turns=max_turns, tool_parser=tool_parser,
                         command_timeout_s=command_timeout_s, max_output_chars=max_output_chars,
                         max_calls_per_turn=max_calls_per_turn, system_prompt=system_prompt, pool_size=pool_size,
                         grade_cache=grade_cache, grader_pool=grader_pool, recycle=recycle, cache_size=256,
                         render_mode=render_mode)
        if split not in SPLITS:
            raise EnvError(f"RepoRepair-v0: unknown split {split!r}; valid: {', '.join(SPLITS)}")
        unknown = sorted(set(projects or []) - set(PROJECTS))
        if unknown:
            raise EnvError(f"RepoRepair-v0: unknown project {unknown[0]!r}; projects: {', '.join(sorted(PROJECTS))}")
        if not TASKS_FILE.exists():
            raise EnvError(f"RepoRepair-v0: {TASKS_FILE} is missing (python scripts/build_repo_repair.py build)")
        rows = [r for r in load_rows() if (split == "all" or r["split"] == split)
                and (projects is None or r["project"] in projects)][:limit]
        if not rows:
            raise EnvError(f"RepoRepair-v0: no task in split {split!r} for projects {projects}")
        self.split, self.rows = split, {r["id"]: r for r in rows}
        self.tasks = [self._task(r) for r in rows]

    def _task(self, row: dict[str, Any]) -> Task:
        return Task(id=row["id"], prompt=self.prompt(in_text_space(row["instruction"])), answer=None,
                    metadata={k: row[k] for k in ("project", "version", "file", "function", "kind", "split")})

    def sample_task(self, rng: np.random.Generator) -> Task:
        return self.tasks[int(rng.integers(len(self.tasks)))]

    def task_named(self, name: str) -> Task:
        if name not in self.rows:
            raise KeyError(f"no RepoRepair-v0 task {name!r} in split {self.split!r}")
        return self._task(self.rows[name])

    # ------------------------------------------------------------------ the task directory
    def pristine(self, project: Project) -> Path:
        """The project's shipped copy, unpacked once per env (task directories hard-link its files)."""
        return self.cache.shared(project.key, lambda d: unpack(project, d))

    def write_task(self, task: Task, out: Path) -> None:
        row = self.rows[task.id]
        project = PROJECTS[row["project"]]
        src = self.pristine(project)
        mutated = _patched(src / row["file"], row["patch"])
        hidden = set(row["hidden_tests"])
        toml = task_toml(agent_timeout_s=1800, verifier_timeout_s=600, memory_mb=1024, storage_mb=512,
                         metadata={"category": "repo_repair", "project": project.name, "version": project.version,
                                   "kind": row["kind"], "split": row["split"]})
        dockerfile = (f"FROM {BASE_IMAGE}\nENV GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.com "
                      f"GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.com\nWORKDIR /app\nCOPY repo/ /app/\n"
                      f'RUN git init -q -b main . && git add -A && git commit -q -m "{project.name} {project.version}"\n')
        solve = (f"#!/bin/bash\n# The oracle: undo the synthetic bug (the task's patch, reversed).\nset -e\ncd /app\n"
                 f"patch -p1 -R <<'{PATCH_END}'\n{row['patch']}{PATCH_END}\n")
        write_task(out, row["instruction"], toml, {"Dockerfile": dockerfile},
                   {"test.sh": test_sh(project), "runner.py": Path(runner.__file__).read_text(encoding="utf-8"),
                    "testee.py": Path(testee.__file__).read_text(encoding="utf-8"),
                    "expected.json": json.dumps(self.expected(project)) + "\n"}, {"solve.sh": solve})
        for rel in project_files(project):
            if rel not in hidden and rel != row["file"]:
                _link(src / rel, out / "environment" / "repo" / rel)
        (out / "environment" / "repo" / row["file"]).write_text(mutated, encoding="utf-8")
        for rel in project_files(project):
            if rel.startswith(project.tests + "/"):
                _link(src / rel, out / "tests" / "suite" / rel[len(project.tests) + 1:])

    def expected(self, project: Project) -> list[str]:
        """The tests that pass on the pristine project (every task's verifier expects them to pass)."""
        return _expected(project)

    def reference_calls(self, task: Task) -> list[tuple[str, dict[str, Any]]]:
        """One ``str_replace`` that puts the original lines back (old_str made unique in the file)."""
        row = self.rows[task.id]
        src = self.pristine(PROJECTS[row["project"]])
        before = (src / row["file"]).read_text(encoding="utf-8")
        after = _patched(src / row["file"], row["patch"])
        old, new = _unique_edit(after, before)
        return [("str_replace", {"path": row["file"], "old_str": old, "new_str": new})]


_EXPECTED: dict[str, list[str]] = {}


def _expected(project: Project) -> list[str]:
    """Read from the shipped ``projects.json`` (written by the build script's baseline run)."""
    if project.name not in _EXPECTED:
        pins = json.loads((DATA_DIR / "projects.json").read_text())
        _EXPECTED[project.name] = pins[project.name]["passing_tests"]
    return _EXPECTED[project.name]


def _link(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        dest.write_bytes(src.read_bytes())


def _patched(path: Path, patch: str) -> str:
    """``path``'s text with a one-file unified diff applied (the build script's patches: exact context)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    out, i = [], 0
    hunk_lines = patch.splitlines(keepends=True)
    k = 0
    while k < len(hunk_lines):
        line = hunk_lines[k]
        if not line.startswith("@@"):
            k += 1
            continue
        start = int(line.split()[1].split(",")[0][1:])
        out += lines[i:start - 1]
        i = start - 1
        k += 1
        while k < len(hunk_lines) and not hunk_lines[k].startswith("@@"):
            body = hunk_lines[k]
            if body.startswith(" ") or body.startswith("-"):
                if lines[i] != body[1:]:
                    raise ValueError(f"{path}: the patch does not apply at line {i + 1}")
                i += 1
                if body.startswith(" "):
                    out.append(body[1:])
            elif body.startswith("+"):
                out.append(body[1:])
            k += 1
    return "".join(out + lines[i:])


def _unique_edit(text: str, original: str) -> tuple[str, str]:
    """(old_str, new_str): the changed lines of ``text`` and their original, widened by whole lines
    until ``old_str`` occurs once in ``text``."""
    a, b = text.splitlines(keepends=True), original.splitlines(keepends=True)
    first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    tail = 0
    while tail < min(len(a), len(b)) - first - 1 and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi_a, hi_b = first, len(a) - tail, len(b) - tail
    while True:
        old = "".join(a[lo:hi_a])
        if text.count(old) == 1 or (lo == 0 and hi_a == len(a)):
            return old, "".join(b[lo:hi_b])
        lo, hi_a, hi_b = max(0, lo - 1), min(len(a), hi_a + 1), min(len(b), hi_b + 1)
