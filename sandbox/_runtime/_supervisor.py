"""Runs one untrusted job in a forked child and reports what happened. Standard library only.

This file is self-contained: the fork-server imports it, and the Docker backend copies it into
containers and runs it as a script (`python3 _supervisor.py JOB.json UID` prints a result as JSON).

Per job the server S forks one child G (one fork of a big, warm process is the main cost):
G is pid 1 of a new pid namespace, with new mount and ipc namespaces, the server's empty network
namespace, private /proc, /tmp, /dev/shm; it joins the server's cgroups, sets rlimits, drops to a
non-root uid with a scrubbed environment and runs the program in-process (no exec). S enforces the
wall clock: SIGKILL to G ends its whole pid namespace, so nothing outlives the job. Without a pid
namespace (containers) S kills and reaps the rest itself before it answers (`_leftovers`).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import sys
import time

# Sibling modules, imported by their top-level names: this directory is sys.path[0] both in the
# fork-server and inside containers.
from _isolation import (  # type: ignore[import-not-found]
    CLONE_NEWPID,
    cleanup,
    isolate_filesystem,
    make_workdir,
    oom_kills,
    prefer_oom_victim,
    set_cgroup_limits,
    setns,
    unshare_job,
)
from _leftovers import end_leftovers, kill_leftovers  # type: ignore[import-not-found]
from _program import run_program, run_session  # type: ignore[import-not-found]

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)
REPORT_CAP = 1 << 20
SESSION_TIMEOUT_S = 24 * 3600.0


def _prctl(option: int, arg: int) -> None:
    _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


def run_job(job: dict, iso: dict) -> dict:
    """Run one job dict (code, stdin, files, limits, secret); return the result dict."""
    proc = start_job(job, iso)
    drain(proc, deadline=proc["start"] + job["limits"]["timeout_s"])
    return finish_job(proc)


def start_job(job: dict, iso: dict, session: bool = False) -> dict:
    """Fork the job process G; return the parent's bookkeeping dict."""
    limits = job["limits"]
    set_cgroup_limits(iso, limits)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    rep_r, rep_w = os.pipe()
    req_r, req_w = os.pipe() if session else (-1, -1)
    ns = iso["namespaces"]
    workdir = make_workdir(iso, ns)
    oom_before = oom_kills(iso)
    if ns:
        _libc.unshare(CLONE_NEWPID)  # the next child is pid 1 of a new pid namespace
    start = time.monotonic()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                _job_main(job, iso, (out_w, err_w, rep_w, req_r), session, workdir)
            except BaseException:
                import traceback

                traceback.print_exc()
            os._exit(71)
    finally:
        if ns:
            setns(iso["pidns_fd"], CLONE_NEWPID)  # back to our own namespace for later children
    for fd in (out_w, err_w, rep_w, req_r):
        if fd >= 0:
            os.close(fd)
    cap = limits["max_output_bytes"]
    return {
        "pid": pid, "pidfd": os.pidfd_open(pid), "start": start, "oom_before": oom_before,
        "iso": iso, "limits": limits, "workdir": workdir, "status": None, "timed_out": False,
        "bufs": {out_r: bytearray(), err_r: bytearray(), rep_r: bytearray()},
        "caps": {out_r: cap, err_r: cap, rep_r: REPORT_CAP},
        "seen": {out_r: 0, err_r: 0, rep_r: 0},
        "fds": {"out": out_r, "err": err_r, "rep": rep_r, "req": req_w},
        "open": {out_r, err_r, rep_r},
    }


def drain(proc: dict, deadline: float, until_report: bytes | None = None) -> bool:
    """Read the job's pipes until the job ends, `until_report` shows up in the report, or the
    deadline passes (the job is then killed and False returned)."""
    poller = select.poll()
    for fd in proc["open"]:
        poller.register(fd, select.POLLIN)
    if proc["status"] is None:
        poller.register(proc["pidfd"], select.POLLIN)
    rep = proc["fds"]["rep"]
    while proc["open"] or proc["status"] is None:
        left = deadline - time.monotonic()
        if left <= 0 and not proc["timed_out"]:
            kill(proc)
            proc["timed_out"] = True
            deadline = time.monotonic() + 5.0
            continue
        if left <= 0:
            break
        for fd, _ev in poller.poll(left * 1000):
            if fd == proc["pidfd"]:
                poller.unregister(fd)
                _reap(proc)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                proc["open"].discard(fd)
                continue
            _keep(proc, fd, chunk)
        if until_report is not None and until_report in proc["bufs"][rep]:
            return True
        if proc["status"] is not None and proc["open"] and not proc["iso"]["namespaces"]:
            kill_leftovers(proc["iso"], proc["pid"])  # escaped processes may hold the pipes
            _drain_now(proc)
    return not proc["timed_out"]


def _keep(proc: dict, fd: int, chunk: bytes) -> None:
    proc["seen"][fd] += len(chunk)
    room = proc["caps"][fd] - len(proc["bufs"][fd])
    if room > 0:
        proc["bufs"][fd] += chunk[:room]


def _reap(proc: dict) -> None:
    _, status, usage = os.wait4(proc["pid"], 0)
    proc["status"] = status
    proc["cpu"] = usage.ru_utime + usage.ru_stime
    os.close(proc["pidfd"])


def read_available(proc: dict) -> None:
    """Read whatever is buffered in the still-open pipes without blocking."""
    for fd in list(proc["open"]):
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, 65536):
                _keep(proc, fd, chunk)
            proc["open"].discard(fd)  # end of file
        except BlockingIOError:
            pass
        os.set_blocking(fd, True)


def _drain_now(proc: dict) -> None:
    """Read what is buffered, then stop reading (the writers are gone or escaped)."""
    read_available(proc)
    proc["open"].clear()


def kill(proc: dict) -> None:
    """SIGKILL the job; with namespaces its whole pid namespace goes with it."""
    if proc["status"] is None:
        os.kill(proc["pid"], signal.SIGKILL)  # still our unreaped child: the pid cannot be reused


def finish_job(proc: dict) -> dict:
    """Make sure the job is gone, clean up, close the pipes and classify the outcome."""
    if proc["status"] is None:
        kill(proc)
        _reap(proc)
    # With a pid namespace the kernel has ended every process of the job before G could be
    # reaped; without one, kill and reap the rest, and count them gone, before answering.
    left = 0 if proc["iso"]["namespaces"] else end_leftovers(proc["iso"], proc["pid"])
    _drain_now(proc)
    cleanup(proc["iso"], proc["iso"]["namespaces"], proc["workdir"])
    for fd in proc["bufs"]:
        os.close(fd)
    if proc["fds"]["req"] >= 0:
        os.close(proc["fds"]["req"])
    fds = proc["fds"]
    out, err = bytes(proc["bufs"][fds["out"]]), bytes(proc["bufs"][fds["err"]])
    status, code = classify(proc, err)
    return {
        "status": status, "exit_code": code,
        "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
        "stdout_truncated": proc["seen"][fds["out"]] > len(out),
        "stderr_truncated": proc["seen"][fds["err"]] > len(err),
        "duration_s": time.monotonic() - proc["start"],
        "report": bytes(proc["bufs"][fds["rep"]]).decode("utf-8", "replace"),
        "leftovers": left,  # > 0: processes of the job outlived it; the client retires this server
    }


def classify(proc: dict, err: bytes) -> tuple[str, int | None]:
    """Map the job's wait status to (status, exit_code)."""
    st = proc["status"]
    sig = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
    exit_code = -sig if sig else os.WEXITSTATUS(st)
    if proc["timed_out"]:
        return "timeout", exit_code
    if oom_kills(proc["iso"]) > proc["oom_before"]:
        return "memory", exit_code
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and proc["cpu"] >= proc["limits"]["cpu_s"]):
        return "timeout", exit_code
    if sig:
        return "killed", exit_code
    if exit_code == 0:
        return "ok", 0
    tail = err.rstrip().rsplit(b"\n", 1)[-1]
    if tail.startswith(b"MemoryError"):
        return "memory", exit_code
    return "error", exit_code


def _job_main(job: dict, iso: dict, fds: tuple, session: bool, workdir: str) -> None:
    """Body of G: isolate, drop privileges, then run the program (or the session loop)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    limits = job["limits"]
    if iso["namespaces"]:
        unshare_job(iso, network=limits["network"])
    prefer_oom_victim()
    isolate_filesystem(iso, iso["namespaces"], limits, workdir)
    _write_files(workdir, job, iso)
    _place_fds(fds, job, session)
    job["secret"] = None  # now only behind fd 3: no easy find through gc.get_objects()
    _set_rlimits(limits)
    uid = iso.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by the uid change
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                       "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})
    if session:
        run_session(workdir)
    run_program(os.path.join(workdir, "main.py"), workdir)


def _write_files(workdir: str, job: dict, iso: dict) -> None:
    """Write main.py and the job's files into the work dir, owned by the job's uid."""
    entries = dict(job["files"])
    entries["main.py"] = ["t", job["code"]]
    uid = iso.get("uid")
    for name, (kind, data) in entries.items():
        path = os.path.normpath(os.path.join(workdir, name))
        if not path.startswith(workdir + os.sep):
            raise ValueError(f"file name escapes the work dir: {name!r}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data.encode() if kind == "t" else bytes.fromhex(data))
    if uid is not None:
        for root, dirs, names in os.walk(workdir):
            for n in dirs + names:
                os.chown(os.path.join(root, n), uid, uid)
        os.chown(workdir, uid, uid)


def _place_fds(fds: tuple, job: dict, session: bool) -> None:
    """Make fds 0-4 stdin, stdout, stderr, the secret/requests and the report; close the rest."""
    out_w, err_w, rep_w, req_r = fds
    stdin = os.memfd_create("stdin")
    os.write(stdin, job["stdin"].encode())
    os.lseek(stdin, 0, os.SEEK_SET)
    if session:
        fd3 = req_r
    else:
        fd3 = os.memfd_create("secret")
        os.write(fd3, (job.get("secret") or "").encode())
        os.lseek(fd3, 0, os.SEEK_SET)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (stdin, out_w, err_w, fd3, rep_w)]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    for name in os.listdir("/proc/self/fd"):
        if int(name) >= 5:
            try:
                os.close(int(name))
            except OSError:
                pass  # the directory's own fd


def _set_rlimits(limits: dict) -> None:
    """Address space (on top of the current size), CPU, file size, open files, processes, no cores."""
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[0]) * resource.getpagesize()
    address = current + limits["memory_mb"] * (1 << 20)
    cpu = limits["cpu_s"]
    for res, soft, hard in (
        (resource.RLIMIT_AS, address, address),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, limits["max_file_bytes"], limits["max_file_bytes"]),
        (resource.RLIMIT_NOFILE, limits["max_open_files"], limits["max_open_files"]),
        (resource.RLIMIT_NPROC, limits["max_processes"], limits["max_processes"]),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        resource.setrlimit(res, (soft, hard))


def main() -> None:
    """Script entry (Docker backend): `_supervisor.py env UID` runs the job found in the
    SANDBOX_JOB_<i> environment variables (a JSON string in chunks) and prints the result."""
    from _isolation import probe  # type: ignore[import-not-found]

    keys = sorted((k for k in os.environ if k.startswith("SANDBOX_JOB_")), key=lambda k: int(k[12:]))
    job = json.loads("".join(os.environ.pop(k) for k in keys))
    iso = probe(uid=int(sys.argv[2]), container=True)
    result = run_job(job, iso)
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
