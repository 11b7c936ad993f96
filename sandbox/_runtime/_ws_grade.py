"""Grading inside a workspace: the verifier's shell as the grader, every program it starts as the testee.

Standard library only. The ``grade`` request runs ``tests/test.sh`` in a grading workspace (a fresh
one, holding the agent's sealed tree) so that the code under test can neither write nor lock the
reward channel, and the verifier's environment comes from nothing the agent wrote:

- **Two identities.** The verifier's shell (``/bin/bash /tests/test.sh``, by absolute path) runs as
  the *grader*, a uid of its own with the capabilities a verifier needs to read, write and signal
  the agent's files and processes (``GRADER_CAPS``) and no other; every program it starts switches
  to the *testee* (the uid that owns the tree) between fork and exec, after its redirections are
  open, with every capability cleared: the exec hook ``_testee.c``, loaded into the shell. A
  program the verifier marks ``AGENTRL_GRADER=1`` keeps the grader's identity (its own children are
  testees again). A probe before the script proves the switch: a program the shell starts must
  write where only the testee can and must fail where only the grader can; otherwise nothing is
  graded (fail closed: an image the hook cannot load into fails the sample loudly).
- **The reward channel.** ``/logs/verifier`` is the grader's (sticky and world-writable, so that a
  testee's report such as pytest's ``--ctrf`` file can land there), and ``reward.txt`` and
  ``reward.json`` exist from the start, empty and the grader's: a testee can create other files but
  can neither write, replace, remove nor lock these. They are read as root: regular files of the
  grader, at most ``REWARD_MAX`` bytes; an empty one was not written.
- **The environment** (``_ws_grade_env``). ``HOME`` is a fresh directory outside the tree; ``PATH`` (and
  ``LD_LIBRARY_PATH``) keep only directories that the agent could never write (root's, all the way
  up); ``/tmp`` is fresh (it is not part of the tree); ``/tests`` is the grader's, read-only to the
  testee; git reads no global configuration and is told to ignore every program the agent's
  repositories could name (fsmonitor, hooks, signature programs, filter, diff and merge drivers, ...).
- **Bounded.** The output is capped as a command's is; at the verifier's timeout, or when the shell
  exits, every process of the workspace is killed before the reward is read.
"""

from __future__ import annotations

import base64
import ctypes
import os
import select
import stat
import time

import _ws_files as files  # type: ignore[import-not-found]
from _ws_common import Capture, default_signals  # type: ignore[import-not-found]
from _ws_grade_env import EXT_DIFF, GRADER_DIR, environment, scan_tree  # type: ignore[import-not-found]
from _ws_tree import remove_tree, walk  # type: ignore[import-not-found]

GRADER_CAPS = (0, 1, 3, 5, 6, 7)  # CHOWN, DAC_OVERRIDE, FOWNER, KILL, SETGID, SETUID
REWARD_FILES = ("reward.txt", "reward.json")
REWARD_MAX = 65536
_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def grade(rt, req: dict) -> dict:  # noqa: ANN001 - the workspace's Runtime
    """Run the verifier (``req``: ``argv``, ``timeout_s``, the exec hook) as the grader, its programs
    as the testee; its exit code (None past the timeout), output, reward files and, when it cannot
    be trusted, the problem."""
    rt.stop_shell()
    files.end_all(rt.keep, rt.reap)
    g, t = rt.grader_uid, rt.uid
    prepare(g, t, base64.b64decode(req["hook"]))
    drivers, removed = scan_tree(rt.roots())
    env = environment(rt.env, t, drivers)
    r, w = os.pipe()
    cap = Capture(int(rt.limits["max_output_bytes"]))
    start = time.monotonic()
    pid = start_grader(list(req["argv"]), env, rt.workdir, g, rt.cgroup_fds, w)
    os.close(w)
    try:
        code = wait_grader(pid, r, cap, start + float(req["timeout_s"]))
    finally:
        files.end_all(rt.keep, rt.reap)  # the shell, its background and every testee left
        os.close(r)
    output, truncated = cap.result(0)
    if removed:
        output = f"[agentrl: {removed} link(s) into the grader's directories were removed before grading]\n" + output
    out = {"exit_code": code, "output": output, "truncated": truncated, "timed_out": code is None,
           "duration_s": time.monotonic() - start, "rewards": {}, "problem": None}
    try:
        out["files"] = sorted(os.listdir("/logs/verifier"))[:200]  # the verifier's reports, by name
    except OSError:
        out["files"] = []
    if code is not None:
        out["problem"] = probe_failure(t)
        try:
            out["rewards"] = read_rewards(g)
        except OSError as e:
            out["problem"] = out["problem"] or str(e)
    return out


# ------------------------------------------------------------------ the grading workspace
def prepare(grader: int, testee: int, hook: bytes) -> None:
    """Lay out the grader's directories (see the module docstring)."""
    os.makedirs(GRADER_DIR, mode=0o755, exist_ok=True)
    for sub in ("home", "private", "probe"):
        if os.path.isdir(f"{GRADER_DIR}/{sub}"):
            remove_tree(f"{GRADER_DIR}/{sub}")
    _mkdir(f"{GRADER_DIR}/home", testee, 0o700)
    _mkdir(f"{GRADER_DIR}/probe", testee, 0o700)
    _mkdir(f"{GRADER_DIR}/private", grader, 0o700)
    _write(f"{GRADER_DIR}/testee.so", hook, 0, 0o644)
    _write(f"{GRADER_DIR}/probe.sh", PROBE.encode(), 0, 0o644)
    _write(EXT_DIFF, b'#!/bin/sh\nexec diff -u -- "$2" "$5"\n', 0, 0o755)
    logs = "/logs/verifier"
    if os.path.isdir(logs) and not os.path.islink(logs):
        remove_tree(logs)
    elif os.path.lexists(logs):
        os.unlink(logs)
    os.makedirs("/logs", exist_ok=True)
    os.chown("/logs", 0, 0)  # not the testee's: it could swap /logs/verifier for a directory of its own
    os.chmod("/logs", 0o755)
    _mkdir(logs, grader, 0o1777)
    for name in REWARD_FILES:
        _write(f"{logs}/{name}", b"", grader, 0o644)
    for path, st in walk(["/tests"]):  # the tests are the grader's: readable, never writable, by the testee
        os.lchown(path, grader, grader)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022)


def _mkdir(path: str, owner: int, mode: int) -> None:
    os.mkdir(path, mode)
    os.chown(path, owner, owner)
    os.chmod(path, mode)


def _write(path: str, data: bytes, owner: int, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chown(path, owner, owner)
    os.chmod(path, mode)


PROBE = f"""unset BASH_ENV
/bin/sh -c ': > {GRADER_DIR}/probe/ok; : > {GRADER_DIR}/private/probe' 2>/dev/null
if [ ! -e {GRADER_DIR}/probe/ok ] || [ -O {GRADER_DIR}/probe/ok ] || [ -e {GRADER_DIR}/private/probe ]; then
    echo "agentrl: the verifier's programs would not run as the testee here; nothing is graded" >&2
    exit 97
fi
"""


def probe_failure(testee: int) -> str | None:
    """Why the probe shows that the verifier's programs did not run as the testee (None: they did). The
    probe itself (``PROBE``, run by the verifier's shell before the script) stops the script then."""
    try:
        st = os.lstat(f"{GRADER_DIR}/probe/ok")
    except OSError:
        return "a program the verifier's shell started did not run (no /bin/sh, or the exec hook refused it)"
    if st.st_uid != testee:
        return "a program the verifier's shell started did not run as the testee (the exec hook did not load)"
    if os.path.lexists(f"{GRADER_DIR}/private/probe"):
        return "a program the verifier's shell started could write the grader's files"
    return None


# ------------------------------------------------------------------ running it
def start_grader(argv: list[str], env: dict[str, str], cwd: str, grader: int, cgroup_fds: list[int],
                 out_w: int) -> int:
    """Fork the verifier's shell as the grader (see the module docstring); its pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        default_signals()
        for fd in cgroup_fds:
            os.write(fd, b"0")
        os.setsid()
        _become_grader(grader)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.closerange(3, 1 << 16)
        for d in (cwd, "/"):
            try:
                os.chdir(d)
                break
            except OSError:
                continue
        os.execve(argv[0], argv, env)
    except BaseException as e:  # noqa: BLE001 - said on the output, then the child ends
        os.write(2, f"agentrl: the verifier could not start: {e}\n".encode())
    finally:
        os._exit(127)


def _become_grader(grader: int) -> None:
    """Drop to the grader's uid keeping ``GRADER_CAPS`` (ambient, so that bash holds them across exec)."""
    mask = sum(1 << c for c in GRADER_CAPS)
    for cap in range(64):  # the bounding set (needs CAP_SETPCAP: a container's is already small)
        if cap not in GRADER_CAPS:
            _libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    _check(_libc.prctl(8, 1, 0, 0, 0), "PR_SET_KEEPCAPS")
    os.setgroups([])
    os.setresgid(grader, grader, grader)
    os.setresuid(grader, grader, grader)
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    data[0].effective = data[0].permitted = data[0].inheritable = mask
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    for cap in GRADER_CAPS:
        _check(_libc.prctl(47, 2, cap, 0, 0), "PR_CAP_AMBIENT_RAISE")
    _check(_libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def wait_grader(pid: int, out_r: int, cap, deadline: float) -> int | None:  # noqa: ANN001 - a Capture
    """Read the verifier's output into ``cap`` until its shell exits (its exit code) or the deadline
    (None). Background processes that keep the output open do not hold it up. The shell's exit wakes the
    wait at once (a pidfd, where the kernel and Python have one; else a poll every 50 ms, 5 ms after EOF)."""
    pidfd = _pidfd(pid)
    eof = False
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                while not eof and select.select([out_r], [], [], 0)[0]:
                    data = os.read(out_r, 65536)
                    if not data:
                        break
                    cap.add(data)
                return os.waitstatus_to_exitcode(status)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            watched = ([] if eof else [out_r]) + ([] if pidfd is None else [pidfd])
            if not watched:  # output ended, no pidfd: poll the exit
                time.sleep(min(left, 0.005))
                continue
            ready = select.select(watched, [], [], left if pidfd is not None else min(left, 0.05))[0]
            if out_r in ready:
                data = os.read(out_r, 65536)
                if data:
                    cap.add(data)
                else:
                    eof = True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits), or None (Python < 3.9, Linux < 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def read_rewards(grader: int) -> dict[str, str | None]:
    """The text of each reward file the verifier wrote (None: not written), read as root and refused
    unless it is a regular file of the grader's of at most ``REWARD_MAX`` bytes."""
    out: dict[str, str | None] = {}
    for name in REWARD_FILES:
        path = f"/logs/verifier/{name}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            out[name] = None
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != grader:
                raise OSError(f"/logs/verifier/{name} is not the grader's file")
            data = f.read(REWARD_MAX + 1)
        if len(data) > REWARD_MAX:
            raise OSError(f"/logs/verifier/{name} is larger than {REWARD_MAX} bytes")
        out[name] = data.decode("utf-8", "replace") if data.strip() else None
    return out
