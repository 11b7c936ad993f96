"""Test runner for code rewards: runs a candidate program against tests inside a sandbox.

Three kinds of suites: MBPP-style assert lists (each assert is one test), HumanEval-style
`check(candidate)` (one test), and stdin/stdout cases (one run per case, compared outside the
sandbox). For the first two a harness runs inside the sandbox; a test counts as passed only when
the harness writes a line carrying this run's random nonce to a private fd after the test returned.
The nonce reaches the harness through a descriptor it reads and closes before any candidate code
runs, so exit codes, `sys.exit`, `os._exit`, printed markers and patched builtins, `check` or
`AssertionError` cannot fake a pass. See the package docstring for what is not covered.
"""

from __future__ import annotations

import ast
import atexit
import json
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .types import Limits, Sandbox

HARNESS = (Path(__file__).parent / "_harness.py").read_text()
PROTECTED_MODULES = (
    "math", "cmath", "re", "collections", "itertools", "functools", "string", "operator", "random",
    "typing", "json", "copy", "heapq", "bisect", "hashlib", "statistics", "fractions", "decimal",
    "numbers", "sys", "os", "posixpath", "time", "datetime",
)


@dataclass(frozen=True)
class IOCase:
    """One stdin/stdout test: run the program with `stdin`; pass when stdout matches."""

    stdin: str
    expected_stdout: str


@dataclass(frozen=True)
class TestSuite:
    """Tests for one candidate: exactly one of `asserts`, `check` (with `entry_point`) or `io`."""

    __test__ = False  # not a pytest class

    asserts: list[str] = field(default_factory=list)
    """MBPP style: each statement (typically `assert f(x) == y`) is one test."""
    setup: str = ""
    """Code run before the asserts (MBPP `test_setup_code`)."""
    check: str | None = None
    """HumanEval style: source defining `check(candidate)`; one test."""
    entry_point: str | None = None
    """Name of the candidate function passed to `check`."""
    io: list[IOCase] = field(default_factory=list)
    """stdin/stdout cases; each is one run of the program as `__main__`."""

    def __post_init__(self) -> None:
        kinds = [bool(self.asserts), self.check is not None, bool(self.io)]
        if sum(kinds) != 1:
            raise ValueError("TestSuite needs exactly one of asserts=, check= or io=")
        if self.check is not None and not self.entry_point:
            raise ValueError("TestSuite(check=...) needs entry_point=")

    def sources(self) -> list[str]:
        """The test statements the harness runs, one per test."""
        if self.check is not None:
            return [f"{self.check}\n\ncheck({self.entry_point})\n"]
        return list(self.asserts)

    def names(self) -> list[str]:
        """One name per test."""
        if self.check is not None:
            return ["check"]
        if self.io:
            return [f"io_{i}" for i in range(len(self.io))]
        return [f"assert_{i}" for i in range(len(self.asserts))]


@dataclass(frozen=True)
class TestOutcome:
    """The result of one test."""

    __test__ = False

    name: str
    passed: bool
    error: str = ""


@dataclass(frozen=True)
class TestReport:
    """Per-test results of one candidate."""

    __test__ = False

    outcomes: list[TestOutcome]
    status: str
    """Overall status of the execution: ok | error | timeout | memory | killed."""
    error: str = ""
    """Why tests could not run or failed as a whole (timeout, crash, stderr tail)."""

    @property
    def passed(self) -> int:
        """Number of tests passed."""
        return sum(o.passed for o in self.outcomes)

    @property
    def total(self) -> int:
        """Number of tests."""
        return len(self.outcomes)

    @property
    def fraction(self) -> float:
        """passed / total (0.0 for an empty suite)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        """True when there were tests and all passed."""
        return self.total > 0 and self.passed == self.total


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide local sandbox used when none is given (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            from .local import LocalSandbox

            _default = LocalSandbox()
            atexit.register(_default.close)
        return _default


def run_tests(
    code: str, suite: TestSuite, sandbox: Sandbox | None = None, limits: Limits | None = None
) -> TestReport:
    """Run `code` against `suite` in `sandbox` (default: the shared local one)."""
    sb = sandbox or default_sandbox()
    if suite.io:
        return _run_io(code, suite, sb, limits)
    nonce = secrets.token_hex(16)
    sources = suite.sources()
    spec = {"nonce": nonce, "code": code, "setup": suite.setup, "tests": sources,
            "protect": list(PROTECTED_MODULES)}
    raw = sb._execute(sb._job(HARNESS, limits=limits, secret=json.dumps(spec)))
    results = _parse_report(raw["report"], nonce)
    names = suite.names()
    status = raw["status"]
    missing = f"no result ({status})" if status != "ok" else "no result (the program exited early)"
    outcomes = [
        TestOutcome(names[i], *results.get(i, (False, missing))) for i in range(len(sources))
    ]
    error = "" if all(o.passed for o in outcomes) else _error_text(raw, outcomes)
    return TestReport(outcomes=outcomes, status=status, error=error)


def _parse_report(report: str, nonce: str) -> dict[int, tuple[bool, str]]:
    """The harness's lines that carry the nonce: {test index: (passed, error)}; first line wins."""
    results: dict[int, tuple[bool, str]] = {}
    for line in report.splitlines():
        parts = line.split(" ", 3)
        if len(parts) != 4 or not secrets.compare_digest(parts[0], nonce):
            continue
        index = int(parts[1])
        if index not in results:
            try:
                err = str(ast.literal_eval(parts[3]))
            except (ValueError, SyntaxError):
                err = parts[3]
            results[index] = (parts[2] == "1", err)
    return results


def _error_text(raw: dict, outcomes: list[TestOutcome]) -> str:
    if raw["status"] != "ok":
        return f"{raw['status']}: {raw['stderr'][-1000:]}".strip()
    first = next((o.error for o in outcomes if not o.passed), "")
    return first or raw["stderr"][-1000:]


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _run_io(code: str, suite: TestSuite, sb: Sandbox, limits: Limits | None) -> TestReport:
    outcomes, statuses = [], []
    for name, case in zip(suite.names(), suite.io):
        res = sb.run(code, stdin=case.stdin, limits=limits)
        statuses.append(res.status)
        same = _normalize(res.stdout) == _normalize(case.expected_stdout)
        passed = res.status == "ok" and same and not res.stdout_truncated
        error = "" if passed else (res.status if res.status != "ok" else "wrong output")
        if res.status != "ok" and res.stderr:
            error += ": " + res.stderr[-500:]
        outcomes.append(TestOutcome(name, passed, error))
    status = next((s for s in statuses if s != "ok"), "ok")
    error = next((o.error for o in outcomes if not o.passed), "")
    return TestReport(outcomes=outcomes, status=status, error=error)
