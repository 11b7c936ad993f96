"""No process of a job outlives its result, in the local backend with and without namespaces.

The invariant: a sandbox answers only once every process of the job is gone (reaped, not only
killed: a zombie still holds a slot of the uid's process limit), so the host holds none of the
job uid's processes when the result arrives and the next job never meets one. The Docker backend's
counterpart is `test_docker.py::test_fork_bombs_in_a_row`.
"""

from __future__ import annotations

import os
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from sbhelpers import FORK_BOMB, OWN_PROCS_AND_FORKS, ROOMY, processes_of, sandbox_uids

import sandbox
from sandbox.local import SERVER, LocalSandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs get their own uid only as root (CI runs as root)")
ROUNDS = 8
DAEMON = textwrap.dedent("""
    import os, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(100)
        os._exit(0)
    print('left a daemon')
    """)


def _no_namespace_python(tmp: Path) -> str:
    """An interpreter wrapper that starts the fork-server as if namespaces could not be made
    (root in a container without CAP_SYS_ADMIN): jobs get a uid but no pid namespace."""
    boot = (f"import runpy, sys; sys.path.insert(0, {os.path.dirname(SERVER)!r}); import _isolation; "
            "_isolation._empty_netns = lambda: None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    wrapper = tmp / "python-no-namespaces"
    wrapper.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} -E -s -c \"{boot}\" \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def _bombs_in_a_row(sb: sandbox.Sandbox, rounds: int = ROUNDS) -> None:
    """Fork bombs one after another; after each result no process of the job's uid is left on
    the host, and the next job sees only itself and can start processes."""
    for i in range(rounds):
        bomb = sb.run(FORK_BOMB)
        assert bomb.status in ("timeout", "error", "killed", "memory"), (i, bomb.stderr[-500:])
        uids = sandbox_uids(sb)
        assert uids and (i, processes_of(uids)) == (i, [])
        after = sb.run(OWN_PROCS_AND_FORKS, limits=ROOMY)
        assert (i, after.stdout) == (i, "1 20\n"), after.stderr[-500:]
        assert processes_of(uids) == []


@pytest.mark.slow
def test_fork_bombs_in_a_row_local() -> None:
    with LocalSandbox(sandbox.Limits(timeout_s=1.0, memory_mb=256), workers=1, preload=()) as sb:
        assert sb.run("print(1)").stdout == "1\n"
        assert sb._all[0].info["namespaces"]  # type: ignore[attr-defined]
        _bombs_in_a_row(sb)
        assert len(sb._all) == 1  # type: ignore[attr-defined]  # one server all along, never replaced


def _no_namespace_sandbox(tmp_path: Path) -> LocalSandbox:
    sb = LocalSandbox(sandbox.Limits(timeout_s=1.0, memory_mb=256), workers=1, preload=(),
                      python=_no_namespace_python(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "namespaces are NOT available": meant
        assert sb.run("print(1)").stdout == "1\n"
    assert not sb._all[0].info["namespaces"] and sb._all[0].info["uid"]
    return sb


def test_daemon_does_not_outlive_its_job_without_namespaces(tmp_path: Path) -> None:
    with _no_namespace_sandbox(tmp_path) as sb:
        for _ in range(3):
            assert sb.run(DAEMON).stdout == "left a daemon\n"
            assert processes_of(sandbox_uids(sb)) == []
            assert sb.run(OWN_PROCS_AND_FORKS, limits=ROOMY).stdout == "1 20\n"


@pytest.mark.slow
def test_fork_bombs_in_a_row_without_namespaces(tmp_path: Path) -> None:
    with _no_namespace_sandbox(tmp_path) as sb:
        _bombs_in_a_row(sb)
        assert len(sb._all) == 1  # type: ignore[attr-defined]


def test_server_retired_when_processes_outlive_a_job() -> None:
    """A server that could not count a job's processes gone (it says how many are left) is not
    given another job: the sandbox replaces it."""
    with LocalSandbox(ROOMY, workers=1, preload=()) as sb:
        assert sb.run("pass").ok
        server = sb._all[0]  # type: ignore[attr-defined]
        real = server.request
        server.request = lambda obj, timeout_s: {**real(obj, timeout_s), "leftovers": 1}
        assert sb.run("print(1)").stdout == "1\n"
        assert not server.alive and server not in sb._all  # type: ignore[attr-defined]
        assert sb.run("print(2)").stdout == "2\n" and sb._all[0] is not server  # type: ignore[attr-defined]
