"""Run a project's unittest suite and say, test by test, what happened (standard library only).

RepoRepair-v0 uses this file twice: the build script (``scripts/build_repo_repair.py``) runs it on
the pristine project and on each mutation, and every task's verifier runs a copy of it from
``/tests`` (``tests/test.sh``) on the agent's final tree. Usage::

    python3 runner.py --root DIR --tests tests [--source src] [--ids FILE] [--profile]
                      [--json OUT] [--expect FILE]

``--root`` is the project (the top-level directory of discovery), ``--tests`` its test directory
(relative to the root), ``--source`` where its package lives (``.`` or ``src``; put first on
``sys.path``). ``--ids`` runs only the test ids listed in FILE (one per line). ``--profile`` also
records, per test, which functions of the project's source it called (``[file, first line]`` of
each code object), and which ones importing the suite called: the build script picks the tests a
mutation can affect from this. ``--json`` writes ``{"results": {id: outcome}, "calls": ...,
"import_calls": ..., "seconds": ...}`` (outcome: ``pass``, ``fail``, ``error``, ``skip``,
``xfail``, ``xpass``). ``--expect`` (grading) reads the ids that must pass and exits 0 only when
every one ran and passed.

A verifier that runs the agent's code can be fooled by that code (a library that patches unittest
as it is imported): checking every expected id by name raises the bar, it is not a wall.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest


class Recorder(unittest.TestResult):
    """Outcome per test id, and (profiling) the project functions each test called."""

    def __init__(self, source_dir: str | None, root: str) -> None:
        super().__init__()
        self.root = root
        self.outcomes: dict[str, str] = {}
        self.calls: dict[str, list[list]] = {}
        self.source_dir = source_dir
        self.current: set[tuple[str, int]] = set()

    def profiler(self, frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(self.source_dir):
                self.current.add((os.path.relpath(code.co_filename, self.root), code.co_firstlineno))

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        super().startTest(test)
        self.current = set()
        if self.source_dir:
            sys.setprofile(self.profiler)

    def stopTest(self, test: unittest.TestCase) -> None:  # noqa: N802
        if self.source_dir:
            sys.setprofile(None)
            self.calls[test.id()] = sorted([f, n] for f, n in self.current)
        self.outcomes.setdefault(test.id(), "pass")
        super().stopTest(test)

    def addFailure(self, test, err) -> None:  # noqa: ANN001, N802
        super().addFailure(test, err)
        self.outcomes[test.id()] = "fail"

    def addError(self, test, err) -> None:  # noqa: ANN001, N802
        super().addError(test, err)
        self.outcomes[getattr(test, "id", lambda: str(test))()] = "error"

    def addSkip(self, test, reason) -> None:  # noqa: ANN001, N802
        super().addSkip(test, reason)
        self.outcomes[test.id()] = "skip"

    def addExpectedFailure(self, test, err) -> None:  # noqa: ANN001, N802
        super().addExpectedFailure(test, err)
        self.outcomes[test.id()] = "xfail"

    def addUnexpectedSuccess(self, test) -> None:  # noqa: ANN001, N802
        super().addUnexpectedSuccess(test)
        self.outcomes[test.id()] = "xpass"

    def addSubTest(self, test, subtest, err) -> None:  # noqa: ANN001, N802
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.outcomes[test.id()] = "fail" if issubclass(err[0], test.failureException) else "error"


def flatten(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    out = []
    for item in suite:
        out += flatten(item) if isinstance(item, unittest.TestSuite) else [item]
    return out


def run(root: str, tests: str, source: str = ".", ids: list[str] | None = None, profile: bool = False
        ) -> dict:
    """Discover and run the suite (see the module docstring); the JSON-able record."""
    root = os.path.realpath(root)
    source_dir = os.path.normpath(os.path.join(root, source))
    sys.path.insert(0, source_dir)
    if root != source_dir:
        sys.path.insert(0, root)
    start = time.monotonic()
    recorder = Recorder(source_dir + os.sep if profile else None, root)
    import_calls: set[tuple[str, int]] = set()
    if profile:
        recorder.current = import_calls
        sys.setprofile(recorder.profiler)
    package = tests.strip("/").replace("/", ".") + "."
    if ids is not None and all(i.startswith(package) for i in ids):  # import only the modules these tests are in
        loaded = unittest.TestLoader().loadTestsFromNames(sorted(ids))
    else:
        loaded = unittest.TestLoader().discover(os.path.join(root, tests), top_level_dir=root)
    sys.setprofile(None)
    cases = flatten(loaded)
    if ids is not None:
        wanted = set(ids)
        cases = [c for c in cases if c.id() in wanted]
    unittest.TestSuite(cases).run(recorder)
    return {"results": recorder.outcomes, "calls": recorder.calls,
            "import_calls": sorted([f, n] for f, n in import_calls), "seconds": round(time.monotonic() - start, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="run a project's unittest suite, test by test")
    p.add_argument("--root", required=True)
    p.add_argument("--tests", required=True)
    p.add_argument("--source", default=".")
    p.add_argument("--ids")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json")
    p.add_argument("--expect")
    a = p.parse_args(argv)
    ids = None
    if a.ids:
        with open(a.ids, encoding="utf-8") as f:
            ids = [line.strip() for line in f if line.strip()]
    record = run(a.root, a.tests, a.source, ids, a.profile)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(record, f)
    results = record["results"]
    if not a.expect:
        bad = sum(v in ("fail", "error") for v in results.values())
        print(f"{len(results)} tests: {len(results) - bad} passed or skipped, {bad} failed")
        return 1 if bad else 0
    with open(a.expect, encoding="utf-8") as f:
        expected = json.load(f)
    failing = [t for t in expected if results.get(t) != "pass"]
    for t in failing[:20]:
        print(f"NOT PASSING ({results.get(t, 'did not run')}): {t}")
    print(f"{len(expected) - len(failing)} passed, {len(failing)} failed")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
