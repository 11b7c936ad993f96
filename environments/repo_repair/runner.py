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
``xfail``, ``xpass``). ``--expect`` reads the ids that must pass and exits 0 only when every one ran
and passed.

**Grading** (``--grade --expect FILE``, what a task's ``tests/test.sh`` runs): this process never
imports the project. It runs the suite in a child (``--report``) through ``testee.py`` (copied
beside this file): under agentrl's grader the child runs as the testee, so the agent's code it
imports can neither write the reward nor signal or trace this process; the child reads a nonce
before it imports anything and sends its results, with the nonce, on a channel of its own; this
process exits 0 only when that report names every expected test as passed. A child that exits early
(``os._exit(0)`` on import), crashes or hangs reports nothing and fails. Code that runs inside the
child can still forge its report (it can read the nonce from the child's memory): the suite imports
the agent's code, so that is not a wall, and docs/workspaces.md says so.
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
    p.add_argument("--grade", action="store_true", help="run the suite in a child, as the testee (see above)")
    p.add_argument("--report", action="store_true", help="(the child) report on AGENTRL_REPORT_FD")
    p.add_argument("--timeout", type=float, default=480.0)
    a = p.parse_args(argv)
    if a.grade:
        return grade(a)
    nonce = sys.stdin.readline().strip() if a.report else ""  # before anything of the project is imported
    ids = None
    if a.ids:
        with open(a.ids, encoding="utf-8") as f:
            ids = [line.strip() for line in f if line.strip()]
    record = run(a.root, a.tests, a.source, ids, a.profile)
    if a.report:
        data = (nonce + "\n" + json.dumps(record["results"])).encode()
        fd = int(os.environ["AGENTRL_REPORT_FD"])
        while data:
            data = data[os.write(fd, data):]
        return 0
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(record, f)
    if not a.expect:
        bad = sum(v in ("fail", "error") for v in record["results"].values())
        print(f"{len(record['results'])} tests: {len(record['results']) - bad} passed or skipped, {bad} failed")
        return 1 if bad else 0
    return verdict(record["results"], a.expect)


def verdict(results: dict[str, str], expect: str) -> int:
    """0 when every expected test passed (the failing ones are printed), else 1."""
    with open(expect, encoding="utf-8") as f:
        expected = json.load(f)
    failing = [t for t in expected if results.get(t) != "pass"]
    for t in failing[:20]:
        print(f"NOT PASSING ({results.get(t, 'did not run')}): {t}")
    print(f"{len(expected) - len(failing)} passed, {len(failing)} failed")
    return 1 if failing else 0


def grade(a: argparse.Namespace) -> int:
    """Run the suite in a child as the testee and judge its report (see the module docstring)."""
    import importlib.util

    here = os.path.abspath(__file__)
    spec = importlib.util.spec_from_file_location("agentrl_testee", os.path.join(os.path.dirname(here), "testee.py"))
    testee = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(testee)
    boot = f"import runpy, sys; sys.argv[0] = {here!r}; runpy.run_path({here!r}, run_name='__main__')"
    argv = [sys.executable, "-I", "-S", "-c", boot, "--root", a.root, "--tests", a.tests, "--source", a.source,
            "--report"]
    code, output, report = testee.run(argv, cwd=a.root, timeout_s=a.timeout, report=True)
    print(output[-4000:], end="" if output.endswith("\n") or not output else "\n")
    try:
        results = json.loads(report) if report else None
    except ValueError:
        results = None
    if not isinstance(results, dict):
        why = "ran past its time" if code is None else f"exited {code}"
        print(f"the suite reported nothing (it {why}): no test counts as passed")
        results = {}
    return verdict(results, a.expect)


if __name__ == "__main__":
    sys.exit(main())
