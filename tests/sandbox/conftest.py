"""Fixtures for the sandbox tests: real fork-servers, a real Docker daemon, and host-cleanliness checks."""

from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sbhelpers import ROOMY

import sandbox
from sandbox.local import LocalSandbox

HUMANEVAL = Path(__file__).resolve().parents[2] / "environments" / "data" / "HumanEval.jsonl.gz"


@pytest.fixture(scope="session")
def humaneval() -> list[dict]:
    """The 164 HumanEval problems."""
    with gzip.open(HUMANEVAL, "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def local() -> sandbox.Sandbox:
    """A local sandbox with two warm fork-servers; roomy wall-clock limits (a job that should
    time out passes `limits=SHORT`)."""
    sb = LocalSandbox(ROOMY, workers=2)
    # Start both servers now (sympy preloaded: seconds on a busy machine), so that no test's own
    # timing includes a server start.
    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(lambda _: sb.run("pass").ok, range(2)))
    yield sb
    sb.close()
