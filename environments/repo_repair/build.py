"""Building RepoRepair-v0's task set from the pinned projects (``scripts/build_repo_repair.py`` drives it).

For each project, from its shipped copy:
1. the **baseline**: the whole suite runs once, profiled (:mod:`.runner`): the tests that pass are the
   ones every task's verifier expects to pass, and each test's list of called project functions says
   which tests a mutation can affect;
2. **candidates**: every mutation site of the package's files (:mod:`.mutations`), shuffled with the
   seed and interleaved by kind, so each kind is tried as often as the others;
3. **validation**: a candidate is applied and the tests that called one of its enclosing functions
   (every test, when the site runs at import) run; it is kept when at least one of them fails and none
   runs past the timeout (at most ``per_function`` tasks per function);
4. an **issue text** (:mod:`.issue`): a failing test becomes a standalone reproduction, kept only when
   it fails on the mutated project and passes on the pristine one; the failing behaviour is shown,
   never the diff or the test's name;
5. **splits** by file: a project's files go to train or test whole, so the test split holds files never
   trained on.
Everything is a function of the shipped copies and the seed: the same inputs give the same rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from environments.repo_repair.issue import issue_text, reproduce
from environments.repo_repair.mutations import Mutation, find_mutations, unified_diff
from environments.repo_repair.projects import (
    PYTHON,
    Project,
    mutated_ns,
    source_files,
    suite_env,
    unpack,
    write_source,
)

RUNNER = Path(__file__).resolve().parent / "runner.py"
SUITE_TIMEOUT_S = 120.0


@dataclass
class Baseline:
    """The pristine suite: tests that pass, the functions each test called, those importing it called."""

    passing: list[str]
    calls: dict[str, set[tuple[str, int]]]
    import_calls: set[tuple[str, int]]
    seconds: float


def run_suite(root: Path, project: Project, ids: Iterable[str] | None = None, profile: bool = False,
              timeout_s: float = SUITE_TIMEOUT_S) -> dict | None:
    """The runner's record for ``root`` (None when it ran past ``timeout_s`` or crashed)."""
    with tempfile.TemporaryDirectory(prefix="agentrl-suite-") as tmp:
        cmd = [*PYTHON, str(RUNNER), "--root", str(root), "--tests", project.tests, "--source", project.source,
               "--json", f"{tmp}/out.json"]
        if ids is not None:
            Path(tmp, "ids").write_text("\n".join(ids) + "\n")
            cmd += ["--ids", f"{tmp}/ids"]
        if profile:
            cmd.append("--profile")
        try:
            subprocess.run(cmd, cwd=root, capture_output=True, timeout=timeout_s, env=suite_env())
        except subprocess.TimeoutExpired:
            return None
        out = Path(tmp, "out.json")
        return json.loads(out.read_text()) if out.exists() else None


def baseline(root: Path, project: Project) -> Baseline:
    record = run_suite(root, project, profile=True, timeout_s=10 * SUITE_TIMEOUT_S)
    if record is None:
        raise RuntimeError(f"{project.key}: the pristine suite did not finish")
    passing = sorted(t for t, outcome in record["results"].items() if outcome == "pass")
    calls = {t: {(f, n) for f, n in c} for t, c in record["calls"].items()}
    return Baseline(passing, calls, {(f, n) for f, n in record["import_calls"]}, record["seconds"])


def candidates(root: Path, project: Project, seed: int) -> list[Mutation]:
    """Every mutation site of the project, shuffled with ``seed`` and interleaved by kind."""
    by_kind: dict[str, list[Mutation]] = defaultdict(list)
    for rel in source_files(project):
        for m in find_mutations((root / rel).read_text(encoding="utf-8"), rel):
            by_kind[m.kind].append(m)
    rng = random.Random(f"{seed}:{project.key}")
    queues = []
    for kind in sorted(by_kind):
        items = sorted(by_kind[kind], key=lambda m: m.id)
        rng.shuffle(items)
        queues.append(items)
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop())
    return out


def affected_tests(base: Baseline, m: Mutation) -> list[str]:
    """The passing tests that can see ``m``: those that called a function enclosing it (all of them when
    the site is at module level, or in a function that importing the suite called)."""
    sites = {(m.file, line) for line in m.scope}
    if not sites or sites & base.import_calls:
        return list(base.passing)
    return [t for t in base.passing if base.calls.get(t, set()) & sites]


def validate(root: Path, project: Project, base: Baseline, m: Mutation) -> list[str] | None:
    """The tests ``m`` makes fail (None: none fails, or the run timed out). ``root`` is a private copy."""
    tests = affected_tests(base, m)
    if not tests:
        return None
    path = root / m.file
    pristine = path.read_text(encoding="utf-8")
    write_source(path, m.apply(pristine), mutated_ns())
    try:
        timeout = min(SUITE_TIMEOUT_S, 20 + base.seconds / 4)  # the profiled run is ~3x slower than a plain one
        record = run_suite(root, project, tests, timeout_s=timeout)
    finally:
        write_source(path, pristine)
    if record is None:
        return None
    failing = sorted(t for t in tests if record["results"].get(t) != "pass")
    return failing or None


def task_row(root: Path, project: Project, m: Mutation, failing: list[str]) -> dict | None:
    """The task of a validated mutation (None when no failing test gives a reproduction)."""
    pristine = (root / m.file).read_text(encoding="utf-8")
    repro = reproduce(root, project, m, failing)
    if repro is None:
        return None
    script, output = repro
    digest = hashlib.sha256(f"{project.key}:{m.id}".encode()).hexdigest()[:10]
    package = project.tests.strip("/").replace("/", ".") + "."  # doctests of the package's docstrings are in its source
    hidden = sorted({t.rsplit(".", 2)[0].replace(".", "/") + ".py" for t in failing if t.startswith(package)})
    return {"id": f"{project.key}-{digest}", "project": project.name, "version": project.version, "file": m.file,
            "function": m.function, "kind": m.kind, "line": m.line, "mutation": m.id,
            "patch": unified_diff(m.file, pristine, m.apply(pristine)), "fail_to_pass": failing,
            "hidden_tests": hidden, "instruction": issue_text(project, m, script, output), "split": None}


def build_project(project: Project, seed: int, target: int, per_function: int = 2, jobs: int = 2,
                  only: set[str] | None = None, log: Callable[[str], None] = print) -> tuple[list[dict], list[str]]:
    """Up to ``target`` task rows of one project (``only``: just these mutation ids, for checks), and the
    tests that pass on the pristine project."""
    with tempfile.TemporaryDirectory(prefix=f"agentrl-{project.key}-") as tmp:
        roots = [unpack(project, Path(tmp) / f"w{i}") for i in range(max(1, jobs))]
        base = baseline(roots[0], project)
        log(f"{project.key}: {len(base.passing)} tests pass ({base.seconds:.1f} s profiled)")
        queue = [m for m in candidates(roots[0], project, seed) if only is None or m.id in only]
        rows: list[dict] = []
        per_fn: Counter[tuple[str, str]] = Counter()
        tried = 0
        with ThreadPoolExecutor(len(roots)) as pool:
            while queue and len(rows) < target:
                batch = []
                while queue and len(batch) < 4 * len(roots):
                    m = queue.pop(0)
                    if per_fn[(m.file, m.function)] < per_function:
                        batch.append(m)
                chunks = [batch[i::len(roots)] for i in range(len(roots))]
                found = dict(zip(roots, pool.map(lambda rc: [(m, _keep(rc[0], project, base, m)) for m in rc[1]],
                                                 zip(roots, chunks))))
                results = {m.id: row for pairs in found.values() for m, row in pairs}
                for m in batch:
                    tried += 1
                    row = results[m.id]
                    if row is not None and per_fn[(m.file, m.function)] < per_function and len(rows) < target:
                        rows.append(row)
                        per_fn[(m.file, m.function)] += 1
                log(f"{project.key}: {len(rows)} tasks from {tried} candidates")
        return rows, base.passing


def _keep(root: Path, project: Project, base: Baseline, m: Mutation) -> dict | None:
    failing = validate(root, project, base, m)
    return task_row(root, project, m, failing) if failing else None


def assign_splits(rows: list[dict], seed: int, test_fraction: float = 0.2) -> None:
    """Set each row's ``split``: per project, whole files go to ``test`` until about ``test_fraction`` of
    its tasks are there (never its largest file, so every project trains too)."""
    by_project: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        by_project[r["project"]][r["file"]] += 1
    test_files: set[tuple[str, str]] = set()
    for name, counts in sorted(by_project.items()):
        total = sum(counts.values())
        largest = max(sorted(counts), key=lambda f: counts[f])
        order = sorted((f for f in counts if f != largest),
                       key=lambda f: hashlib.sha256(f"{seed}:{name}:{f}".encode()).hexdigest())
        taken = 0
        for f in order:
            if taken >= test_fraction * total:
                break
            if taken + counts[f] <= 1.75 * test_fraction * total:
                test_files.add((name, f))
                taken += counts[f]
    for r in rows:
        r["split"] = "test" if (r["project"], r["file"]) in test_files else "train"


def cpu_count() -> int:
    return max(1, min(4, os.cpu_count() or 1))
