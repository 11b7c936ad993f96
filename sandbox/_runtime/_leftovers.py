"""Ending what is left of a job that ran without a pid namespace, and waiting until it is gone.

Standard library only; self-contained like `_isolation`. With a pid namespace the kernel does this
itself: when the job's first process (the namespace's init) dies, every process in the namespace
is killed and released before that process can be reaped. Without one (in a container, or on a
host where namespaces cannot be made) nothing ends the job's other processes: they may have left
its process group (setsid), and a SIGKILLed process still exists, running its exit and then as a
zombie that holds a slot of the uid's RLIMIT_NPROC and of the pids cgroup, until it is reaped.

So the server is a child subreaper: every orphan of a job is re-parented to it (not to the
container's pid 1, which reaps on its own schedule), and `end_leftovers` kills the job's process
group, every process of its uid and the server's children, reaps them, and waits for exit events
until none is left. A result leaves the server only after that count is zero. It assumes that,
besides the job's leftovers, the server has no children at that point (one job at a time).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
WAIT_S = 10.0  # a killed process that takes longer than this to be gone is reported, not waited for
ROUND_S = 0.1  # the longest wait for one exit event before the leftovers are listed again
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Make orphaned descendants of this process its children, so it reaps them itself."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"PR_SET_CHILD_SUBREAPER: {os.strerror(err)}")


def end_leftovers(iso: dict, pid: int, wait_s: float = WAIT_S) -> int:
    """Kill what is left of job `pid` (already reaped) and reap it; return how many of its
    processes are still there when `wait_s` has run out (0: every one is gone, counted)."""
    deadline = time.monotonic() + wait_s
    kill_leftovers(iso, pid)
    while True:
        left = leftovers(iso)
        if not left:
            return 0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return len(left)
        _kill_and_wait(iso, left, min(remaining, ROUND_S))


def kill_leftovers(iso: dict, pid: int) -> None:
    """One sweep: SIGKILL the job's process group, every process of its uid and this server's
    children (job processes re-parented to it). With a uid, the sweep runs in a child that takes
    that uid, so it can signal nothing else, and kill(-1) reaches every process of the uid at once
    (the kernel makes it atomic with respect to fork: a fork bomb cannot slip a child past it)."""
    uid = iso.get("uid")
    if uid is None:
        _signal_group(pid)
    else:
        try:
            helper = os.fork()
        except OSError:
            helper = -1  # e.g. the pids limit is full; the per-process kills below still run
        if helper == 0:
            try:
                os.setresuid(uid, uid, uid)
                _signal_group(pid)
                os.kill(-1, signal.SIGKILL)  # every process of this uid except this one
            except OSError:
                pass
            os._exit(0)
        if helper > 0:
            os.waitpid(helper, 0)
    for child in children():
        try:
            os.kill(child, signal.SIGKILL)  # unreaped, so the pid cannot have been reused
        except ProcessLookupError:
            pass


def _signal_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def leftovers(iso: dict) -> dict[int, bool]:
    """After reaping every child that has ended: pid -> is-a-zombie for this server's children
    and every process of the job's uid. Empty when the job is entirely gone."""
    reap_children()
    found = dict.fromkeys(children(), False)
    uid = iso.get("uid")
    if uid is not None:
        found.update(dict.fromkeys(processes_of(uid), False))
    for pid in list(found):
        state = _state(pid)
        if state is None:
            del found[pid]
        else:
            found[pid] = state in "ZX"
    return found


def reap_children() -> None:
    """Reap every child of this process that has ended, without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def children() -> list[int]:
    """This process's children (any state)."""
    found: list[int] = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
        return found
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: look at every process's parent
        me = os.getpid()
        return [p for p in _pids() if _field(p, 1) == str(me)]


def processes_of(uid: int) -> list[int]:
    """Every process (any state) whose owner is `uid`."""
    found = []
    for pid in _pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found.append(pid)
        except OSError:
            pass
    return found


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _field(pid: int, index: int) -> str | None:
    """Field `index` after the command name of /proc/PID/stat (0: state, 1: ppid); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[index]
    except (OSError, IndexError):
        return None


def _state(pid: int) -> str | None:
    return _field(pid, 0)


def _kill_and_wait(iso: dict, left: dict[int, bool], timeout_s: float) -> None:
    """SIGKILL each live leftover through a pidfd (so a reused pid is never hit) and wait until
    one of them ends or `timeout_s` passes; return at once when a zombie child is there to reap."""
    uid, mine = iso.get("uid"), set(children())
    if any(zombie and pid in mine for pid, zombie in left.items()):
        return
    poller, fds = select.poll(), []
    for pid in (p for p, zombie in left.items() if not zombie):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # already gone
        fds.append(fd)
        try:
            if pid in mine or (uid is not None and os.stat(f"/proc/{pid}").st_uid == uid):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass  # ended meanwhile
        poller.register(fd, select.POLLIN)
    try:
        poller.poll(timeout_s * 1000)  # with no live leftover (only zombies): until they are reaped
    finally:
        for fd in fds:
            os.close(fd)
