"""Helpers shared by the sandbox tests (imported by name: this directory is on sys.path)."""

from __future__ import annotations

import os

import sandbox

SCRATCH = ("/tmp", "/dev/shm", "/var/tmp")
# Wall-clock limits in these tests. A program that is meant to end gets ROOMY: on a busy machine
# (CI shares its cores) even a short program can take seconds of wall time, and a limit near its
# unloaded time makes the test fail by load. A program that is meant to be stopped (it never ends)
# gets SHORT: how long it runs does not change the outcome, only the test's duration.
ROOMY = sandbox.Limits(timeout_s=60.0, memory_mb=256)
SHORT = ROOMY.replace(timeout_s=2.0)


def broken_variant(problem: dict, i: int) -> str:
    """A deterministic wrong (or reward-hacking) program for problem `i`."""
    bodies = [
        "    return None\n",
        "    class _AlwaysEqual:\n        def __eq__(self, other):\n            return True\n"
        "        __ne__ = lambda self, other: False\n    return _AlwaysEqual()\n",
        "    print('PASSED')\n    import sys\n    sys.exit(0)\n",
        "    import os\n    os._exit(0)\n",
    ]
    return problem["prompt"] + bodies[i % len(bodies)]


def sandbox_uids(sb: sandbox.Sandbox) -> set[int]:
    """The uids jobs of this local sandbox run as."""
    servers = [s for s in getattr(sb, "_all", []) if s is not None]
    return {s.info["uid"] for s in servers if s.info.get("uid") is not None}


def processes_of(uids: set[int]) -> list[str]:
    """Host processes running as any of `uids` (should be none between jobs)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid in uids:
                found.append(pid)
        except FileNotFoundError:
            pass
    return found


def files_of(uids: set[int]) -> list[str]:
    """Entries in the host's scratch dirs owned by any of `uids` (should be none)."""
    found = []
    for d in SCRATCH:
        for entry in os.scandir(d):
            try:
                if entry.stat(follow_symlinks=False).st_uid in uids:
                    found.append(entry.path)
            except FileNotFoundError:
                pass
    return found


def assert_host_clean(sb: sandbox.Sandbox) -> None:
    """No process and no scratch file of the sandbox's uids is left on the host."""
    if os.geteuid() != 0:
        return  # without root jobs run as the caller's uid: nothing to tell apart (CI runs as root)
    uids = sandbox_uids(sb)
    assert uids, "expected the local sandbox to run jobs under a non-root uid"
    assert processes_of(uids) == []
    assert files_of(uids) == []


FORK_BOMB = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"

# Run as the job after another: how many processes of this uid it can see, zombies included (a
# zombie still holds a slot of the uid's process limit), and how many children it can then start
# and reap one after another (none when an earlier job's processes still fill the limit).
OWN_PROCS_AND_FORKS = """
import os
me = os.getuid()
seen = 0
for p in filter(str.isdigit, os.listdir('/proc')):
    try:
        seen += os.stat(f'/proc/{p}').st_uid == me
    except OSError:
        pass
forks = 0
try:
    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        forks += 1
except OSError:
    pass
print(seen, forks)
"""
