"""Run a program of the agent's tree from a verifier, as the testee, and end everything it left.

Standard library only: the shipped verifiers (Terminal-v0's ``check.py``, RepoRepair-v0's
``runner.py``) carry a copy of this file in their task's ``tests/`` and import it from there. Under
agentrl's grader (``sandbox.workspace.grading``) a verifier program started from ``/tests`` keeps
the grader's identity, and every program it starts with exec, as :func:`run` does, runs as the
testee: it can neither write the reward nor signal or trace the verifier. Elsewhere (Harbor running
an exported task) the same code runs everything as one user.

:func:`run` never waits on the program's output pipe (a daemon of the agent's that holds it open
cannot stall the verifier): it reads until the program itself exits or its time is up, then ends
what is left — under agentrl's grader every process of the testee (``kill -9 -1`` as the testee,
which reaches nothing of the grader's), elsewhere the program's session. A report channel
(``report=True``) gives the program a pipe of its own (``AGENTRL_REPORT_FD``), and a nonce on its standard input that it
reads before it imports anything of the agent's, so that a program killed early, or one that exits
0 at once, reports nothing; code that runs inside the program can still forge a report, which is
why a verdict that matters is best made on outputs, in a process of the grader's.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

UNDER_GRADER = "AGENTRL_TESTEE" in os.environ  # set by agentrl's grader for the verifier's own programs
OUTPUT_CAP = 1 << 20


def run(argv: list[str], *, cwd: str, timeout_s: float, stdin: bytes = b"", env: dict[str, str] | None = None,
        report: bool = False) -> tuple[int | None, str, str]:
    """Run ``argv`` in ``cwd`` as the testee: (exit code or None past ``timeout_s``, its output, what it
    reported on the channel: empty without ``report``). With ``report`` the program gets the write
    end of a pipe as ``AGENTRL_REPORT_FD`` and a nonce as the first line of its standard input; the
    report counts only when it starts with that nonce (returned without it)."""
    nonce = os.urandom(16).hex() if report else ""
    r, w = os.pipe() if report else (-1, -1)
    env = dict(os.environ if env is None else env)
    if report:
        env["AGENTRL_REPORT_FD"] = str(w)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(w,) if report else ())
    if report:
        os.close(w)
    try:
        proc.stdin.write((nonce + "\n").encode() * report + stdin)
        proc.stdin.close()
    except OSError:  # it exited before reading
        pass
    out_fd = proc.stdout.fileno()
    got = {fd: bytearray() for fd in (out_fd, r) if fd >= 0}
    code = _drain(proc, got, time.monotonic() + timeout_s)
    end(proc)
    proc.stdout.close()
    if report:
        os.close(r)
    said = bytes(got.get(r, b"")).decode("utf-8", "replace")
    first, _, rest = said.partition("\n")
    return code, bytes(got[out_fd]).decode("utf-8", "replace"), rest if report and first == nonce else ""


def _drain(proc: subprocess.Popen, got: dict[int, bytearray], deadline: float) -> int | None:
    """Read the pipes in ``got`` (at most ``OUTPUT_CAP`` bytes each) until the program exits (its exit
    code) or the deadline (None); never until their end, which a daemon of the program's may hold.
    The exit is seen at once through a pidfd (polled every 20 ms where there is none)."""
    try:
        exited = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        exited = -1
    open_fds = set(got)
    try:
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready = select.select(sorted(open_fds) + ([exited] if exited >= 0 else []), [], [],
                                  min(left, 0.02 if exited < 0 or not open_fds else left))[0]
            _read(got, open_fds, [fd for fd in ready if fd != exited])
        while open_fds:  # what it wrote before it exited is in the pipes now: take it, do not wait for more
            ready = select.select(sorted(open_fds), [], [], 0)[0]
            if not ready:
                break
            _read(got, open_fds, ready)
        return proc.returncode
    finally:
        if exited >= 0:
            os.close(exited)


def _read(got: dict[int, bytearray], open_fds: set[int], ready: list[int]) -> None:
    for fd in ready:
        data = os.read(fd, 65536)
        if not data:
            open_fds.discard(fd)
        elif len(got[fd]) < OUTPUT_CAP:
            got[fd] += data


def end(proc: subprocess.Popen) -> None:
    """End the program and everything it left (see the module docstring)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if UNDER_GRADER:  # every process of the testee, daemons that left the session included
        try:
            subprocess.run(["kill", "-9", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
