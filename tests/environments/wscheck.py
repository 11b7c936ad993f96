"""Checks that workspaces leave nothing behind: no process of theirs, no cgroup of theirs.

A local workspace's processes run as a uid of its owner process's block (``sandbox.workspace.local``:
``UID_BASE + (owner pid % 100000) * 1000 + serial``) and its runtime makes cgroup directories named
``agentrl-ws-<runtime pid>``. Other sessions may run workspaces on this machine at the same time, so
these checks look at what belongs to one owner process, and at cgroup directories that appeared
during a test and are not another live process's.
"""

from __future__ import annotations

import glob
import os
import time

from sandbox.workspace.local import UID_BASE

CGROUP_GLOB = "/sys/fs/cgroup/**/agentrl-ws-*"


def workspace_processes(owner_pid: int) -> list[int]:
    """Pids of processes running as one of ``owner_pid``'s workspace uids."""
    lo = UID_BASE + (owner_pid % 100_000) * 1000
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except FileNotFoundError:
                continue
            if lo <= uid < lo + 1000:
                out.append(int(entry))
    return out


def cgroups() -> set[str]:
    return set(glob.glob(CGROUP_GLOB, recursive=True))


def _ours_or_dead(path: str) -> bool:
    """A workspace cgroup whose runtime is gone, or is a descendant of this process."""
    pid = int(path.rsplit("-", 1)[1])
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent pid
        except (FileNotFoundError, ProcessLookupError, ValueError):
            return pid == int(path.rsplit("-", 1)[1])  # the runtime itself is gone: a stale cgroup
        if pid == os.getpid():
            return True
    return False


def leftovers(before: set[str], owners: tuple[int, ...] = (), wait_s: float = 15.0) -> list[str]:
    """What workspaces of this process (and of ``owners``, e.g. a finished subprocess) left: processes,
    and cgroup directories made since ``before`` that are stale or ours. Waits up to ``wait_s`` for
    processes a closing workspace is still ending."""
    deadline = time.monotonic() + wait_s
    while True:
        procs = [p for owner in (os.getpid(), *owners) for p in workspace_processes(owner)]
        dirs = sorted(d for d in cgroups() - before if os.path.isdir(d) and _ours_or_dead(d))
        if not procs and not dirs or time.monotonic() > deadline:
            return [f"process {p}" for p in procs] + [f"cgroup {d}" for d in dirs]
        time.sleep(0.1)
