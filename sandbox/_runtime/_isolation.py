"""Kernel isolation primitives for the supervisor: namespaces, mounts, cgroups, uid cleanup.

Standard library only (ctypes for unshare/mount); self-contained like `_supervisor`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile

from _leftovers import become_subreaper  # type: ignore[import-not-found]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SCRATCH_DIRS = ("/tmp", "/dev/shm", "/var/tmp")
UID_BASE = 200000
_libc = ctypes.CDLL(None, use_errno=True)


def _c(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""
    _check(_libc.mount(_c(src), _c(target), _c(fstype), ctypes.c_ulong(flags), _c(data)), f"mount {target}")


def setns(fd: int, nstype: int) -> None:
    """setns(2): join the namespace open at `fd`."""
    _check(_libc.setns(fd, nstype), "setns")


def unshare_job(iso: dict, network: bool) -> None:
    """In the job process: new mount, ipc and uts namespaces; the empty network namespace unless
    `network`. (The pid namespace was made by the server, around the fork.)"""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    if not network:
        setns(iso["netns_fd"], CLONE_NEWNET)


def probe(uid: int | None = None, container: bool = False) -> dict:
    """Find out once which isolation this process can apply; the result drives every job."""
    root = os.geteuid() == 0
    if root and uid is None:
        uid = UID_BASE + os.getpid()  # unique among live servers: RLIMIT_NPROC is per uid
    iso: dict = {"root": root, "uid": uid if root else None, "container": container,
                 "namespaces": False, "cgroup": None, "reveal": _hidden_paths()}
    become_subreaper()  # a job's orphans become ours to reap (see _leftovers)
    if root and not container:
        netns = _empty_netns()
        if netns is not None:
            iso.update(namespaces=True, netns_fd=netns, pidns_fd=os.open("/proc/self/ns/pid", os.O_RDONLY))
        iso["cgroup"] = _make_cgroups()
        enter_cgroup(iso)
    return iso


def _empty_netns() -> int | None:
    """A network namespace with no interface up, shared by this server's jobs (one at a time);
    None when the namespaces this backend needs cannot be made here."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        flags = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
        ok = _libc.unshare(flags) == 0
        os.write(ready_w, b"1" if ok else b"0")
        os.read(go_r, 1)
        os._exit(0)
    ok = os.read(ready_r, 1) == b"1"
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY) if ok else None
    os.write(go_w, b"x")
    os.waitpid(pid, 0)
    for f in (ready_r, ready_w, go_r, go_w):
        os.close(f)
    return fd


def _hidden_paths() -> list[list]:
    """Interpreter paths under a directory others cannot enter (e.g. /root/.pyenv), grouped by it."""
    wanted = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    wanted |= {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    groups: dict[str, list[str]] = {}
    for path in sorted(wanted):
        parts = path.split(os.sep)
        for i in range(2, len(parts) + 1):
            anc = os.sep.join(parts[:i])
            if not os.stat(anc).st_mode & 0o001:
                groups.setdefault(anc, [])
                if not any(path.startswith(p + os.sep) or path == p for p in groups[anc]):
                    groups[anc].append(path)
                break
    return [[top, paths] for top, paths in groups.items()]


def _make_cgroups() -> dict | None:
    """A memory and a pids cgroup (v1) or one v2 cgroup for this server; None when not writable."""
    name = f"agentrl-sandbox-{os.getpid()}"
    try:
        with open("/proc/self/cgroup") as f:
            lines = [ln.strip().split(":", 2) for ln in f if ln.strip()]
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            base = "/sys/fs/cgroup" + next(p for h, c, p in lines if h == "0")
            path = os.path.join(base, name)
            os.makedirs(path, exist_ok=True)
            return {"v": 2, "memory": path, "pids": path}
        own = {c: p for _h, c, p in lines}
        dirs = {}
        for ctl in ("memory", "pids"):
            base = f"/sys/fs/cgroup/{ctl}" + own.get(ctl, "/")
            _remove_stale(base)
            dirs[ctl] = os.path.join(base, name)
            os.makedirs(dirs[ctl], exist_ok=True)
        return {"v": 1, **dirs}
    except (OSError, StopIteration):
        return None


def _remove_stale(base: str) -> None:
    """Remove cgroups left by servers that died without cleaning up."""
    for entry in os.listdir(base):
        if entry.startswith("agentrl-sandbox-"):
            pid = int(entry.rsplit("-", 1)[1])
            if not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(os.path.join(base, entry))
                except OSError:
                    pass


def remove_cgroups(iso: dict) -> None:
    """Delete this server's cgroups (at exit)."""
    cg = iso.get("cgroup")
    for path in {cg["memory"], cg["pids"]} if cg else ():
        try:
            os.rmdir(path)
        except OSError:
            pass


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def set_cgroup_limits(iso: dict, limits: dict) -> None:
    """Apply the job's memory and pids limits to the server's cgroups (jobs run one at a time)."""
    cg = iso.get("cgroup")
    if not cg:
        return
    mem = (limits["memory_mb"] + 64) << 20
    if cg.get("applied") == (mem, limits["max_processes"]):
        return
    cg["applied"] = (mem, limits["max_processes"])
    if cg["v"] == 1:
        _write(os.path.join(cg["memory"], "memory.limit_in_bytes"), str(mem))
        _write(os.path.join(cg["pids"], "pids.max"), str(limits["max_processes"]))
    else:
        _write(os.path.join(cg["memory"], "memory.max"), str(mem))
        _write(os.path.join(cg["memory"], "memory.swap.max"), "0")
        _write(os.path.join(cg["pids"], "pids.max"), str(limits["max_processes"]))


def enter_cgroup(iso: dict) -> None:
    """Move the server into its cgroups once (moving each job costs milliseconds; forked jobs
    inherit them for free). The server is never the OOM killer's victim; its jobs always are."""
    cg = iso.get("cgroup")
    if cg:
        try:
            _write("/proc/self/oom_score_adj", "-1000")
        except OSError:
            pass  # without CAP_SYS_RESOURCE; the jobs' +1000 still makes them the victims
        for path in {cg["memory"], cg["pids"]}:
            _write(os.path.join(path, "cgroup.procs"), "0")


def prefer_oom_victim() -> None:
    """In the job: make it (and its children) the first choice of the OOM killer."""
    _write("/proc/self/oom_score_adj", "1000")


def oom_kills(iso: dict) -> int:
    """How many times the kernel's OOM killer has fired in the memory cgroup."""
    cg = iso.get("cgroup")
    if not cg:
        return 0
    name = "memory.oom_control" if cg["v"] == 1 else "memory.events"
    with open(os.path.join(cg["memory"], name)) as f:
        for line in f:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return 0


def make_workdir(iso: dict, ns: bool) -> str:
    """The job's working directory: on the private tmpfs with namespaces, else a fresh temp dir."""
    if ns:
        return "/tmp/work"
    return tempfile.mkdtemp(prefix="sandbox-")


def isolate_filesystem(iso: dict, ns: bool, limits: dict, workdir: str) -> str:
    """In the job's mount namespace: private /proc and scratch tmpfs, interpreter made readable."""
    if ns:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        size = f"size={limits['memory_mb']}m,mode=1777"
        for d in SCRATCH_DIRS:
            if os.path.isdir(d):
                mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, size)
        for top, paths in iso["reveal"]:
            handles = [os.open(path, os.O_PATH) for path in paths]  # reachable once `top` is covered
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
            for path, fd in zip(paths, handles):
                os.makedirs(path, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
                os.close(fd)
        os.mkdir(workdir, 0o700)
    return workdir


def cleanup(iso: dict, ns: bool, workdir: str) -> None:
    """After the job (without namespaces): remove its work dir and, in a container, its files."""
    if ns:
        return  # the tmpfs mounts died with the job's mount namespace
    uid = iso.get("uid")
    if uid is not None and iso.get("container"):
        for d in SCRATCH_DIRS:
            for entry in os.scandir(d) if os.path.isdir(d) else ():
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    _remove(entry.path)
    _remove(workdir)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
