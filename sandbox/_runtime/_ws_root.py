"""A local workspace's walls: its cgroups, namespaces and root filesystem (standard library only).

Process tree (the host side starts ``_workspace.py``, which calls :func:`enter`):

- the **waiter** stays in the host's pid namespace: it makes the workspace's cgroups (memory, pids,
  cpu), forks the init, waits for it, and removes the cgroups once it is gone;
- the **init** is pid 1 of a new pid namespace, in new mount, ipc, uts and (unless the internet is
  allowed) network namespaces. It builds the root filesystem and pivots into it, then serves the
  host's requests. When it exits, for whatever reason (the host closed its pipe, died, or a TTL),
  the kernel kills every process of the namespace, and the private mounts (the tree's tmpfs
  included) go with the namespace: nothing of the workspace is left on the host.

The root is a tmpfs of ``storage_mb`` holding the tree. The host's ``/usr`` is bind-mounted
read-only and ``nosuid`` (bash, coreutils, grep, sed, awk, find, diff, patch, git, python3), with
``/usr/local`` covered by an empty tmpfs; ``/bin``, ``/lib``, ``/lib64``, ``/sbin`` are links into it
as on a merged-/usr system; ``/etc`` is generated (passwd, group, hosts) plus read-only binds of
the few host files tools need (the alternatives links, the loader cache, Python's Debian config).
Nothing else of the host is there: not the repository, not /root, /home or /srv, not the task's
tests or solution.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import time

from _isolation import (  # type: ignore[import-not-found]
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    mount,
)

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1
MNT_DETACH = 2
CGROUP_PREFIX = "agentrl-ws-"
ETC_BINDS = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "python3", "python3.11", "python3.12",
             "python3.13", "localtime", "mime.types", "gitconfig", "inputrc")
DEVICES = ("null", "zero", "full", "random", "urandom")


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


# ------------------------------------------------------------------ cgroups
def cgroup_dirs(name: str) -> dict[str, str]:
    """Controller -> the workspace's cgroup directory (v1: one per controller; v2: one)."""
    with open("/proc/self/cgroup") as f:
        lines = [ln.strip().split(":", 2) for ln in f if ln.strip()]
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        path = "/sys/fs/cgroup" + next(p for h, _c, p in lines if h == "0").rstrip("/") + "/" + name
        return {"memory": path, "pids": path, "cpu": path}
    own = {c: p for _h, c, p in lines}
    out = {}
    for ctl in ("memory", "pids", "cpu"):
        key = next((c for c in own if ctl in c.split(",")), ctl)
        base = f"/sys/fs/cgroup/{ctl}"
        if os.path.isdir(base):
            out[ctl] = base + own.get(key, "/").rstrip("/") + "/" + name
    return out


def remove_stale_cgroups() -> None:
    """Remove workspace cgroups whose waiter is gone (a SIGKILLed one never removed its own)."""
    for path in set(cgroup_dirs("x").values()):
        base = os.path.dirname(path)
        for entry in os.listdir(base) if os.path.isdir(base) else ():
            if entry.startswith(CGROUP_PREFIX) and not os.path.exists(f"/proc/{entry.rsplit('-', 1)[1]}"):
                try:
                    os.rmdir(os.path.join(base, entry))
                except OSError:
                    pass


def make_cgroups(limits: dict, owner: int) -> dict[str, str]:
    """The workspace's cgroups (``agentrl-ws-OWNER-WAITER``: the pids of the process that opened it
    and of its waiter) with its memory, pids and cpu limits; {} where they cannot be made."""
    try:
        remove_stale_cgroups()
        dirs = cgroup_dirs(f"{CGROUP_PREFIX}{owner}-{os.getpid()}")
        v2 = len(set(dirs.values())) == 1
        for path in set(dirs.values()):
            os.makedirs(path, exist_ok=True)
        mem = str(int(limits["memory_mb"]) << 20)
        quota = str(max(1000, int(float(limits["cpus"]) * 100000)))
        settings = ([("memory", "memory.max", mem), ("memory", "memory.swap.max", "0"),
                     ("pids", "pids.max", str(limits["max_processes"])), ("cpu", "cpu.max", f"{quota} 100000")]
                    if v2 else
                    [("memory", "memory.limit_in_bytes", mem), ("pids", "pids.max", str(limits["max_processes"])),
                     ("cpu", "cpu.cfs_period_us", "100000"), ("cpu", "cpu.cfs_quota_us", quota)])
        for ctl, name, value in settings:
            if ctl in dirs:
                try:
                    with open(os.path.join(dirs[ctl], name), "w") as f:
                        f.write(value)
                except OSError:
                    if ctl != "cpu":  # cpu limits are best effort; memory and pids are walls
                        raise
        return dirs
    except (OSError, StopIteration):
        return {}


def remove_cgroups(dirs: dict[str, str]) -> None:
    """Remove the cgroups once their processes are gone (the kernel empties them asynchronously)."""
    deadline = time.monotonic() + 5.0
    for path in set(dirs.values()):
        while True:
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)


def cgroup_fds(dirs: dict[str, str]) -> list[int]:
    """Open ``cgroup.procs`` of each cgroup: a child writes ``0`` there to join (before it drops root)."""
    return [os.open(os.path.join(p, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for p in set(dirs.values())]


# ------------------------------------------------------------------ the waiter and the init
def enter(cfg: dict) -> list[int]:
    """Split into the waiter (which never returns) and the init, which returns the cgroup fds its
    children join, inside the built root."""
    dirs = make_cgroups(cfg["limits"], int(cfg.get("owner", 0)))
    unshare(CLONE_NEWPID)
    pid = os.fork()
    if pid:
        _wait(pid, dirs)
    _libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)  # the waiter is gone: so are we
    fds = cgroup_fds(dirs)
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (0 if cfg["limits"]["allow_internet"] else CLONE_NEWNET)
    unshare(flags)
    _libc.sethostname(b"workspace", 9)
    if not cfg["limits"]["allow_internet"]:
        loopback_up()
    build_root(cfg)
    return fds


def _wait(pid: int, dirs: dict[str, str]) -> None:
    """The waiter: pass a SIGTERM on as SIGKILL to the init, wait for it, remove the cgroups, exit."""
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for fd in (0, 1):
        os.close(fd)  # the init's pipes: the host sees their end when the init ends
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    remove_cgroups(dirs)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if status else 0)


def renew(cfg: dict) -> None:
    """Walls for the runtime's next episode, once every process of the last has ended (``reset``): new ipc
    and network namespaces (nothing an agent left in either, a SysV segment, a POSIX queue, an abstract
    socket, reaches the next episode) and a fresh root built as the first was, from the current root's
    read-only parts (the pid namespace, the cgroups and this process stay)."""
    internet = cfg["limits"]["allow_internet"]
    unshare(CLONE_NEWIPC | (0 if internet else CLONE_NEWNET))
    if not internet:
        loopback_up()
    build_root(cfg, renewing=True)


def loopback_up() -> None:
    """Bring ``lo`` up in the new network namespace (its own loopback; the host's is not reachable)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, siocgifflags, req))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


# ------------------------------------------------------------------ the root filesystem
def build_root(cfg: dict, renewing: bool = False) -> None:
    """Build the workspace's root on a tmpfs and pivot into it (see the module docstring); ``renewing``: from
    a root built before (its ``/usr`` bind already holds the empty ``/usr/local``)."""
    uid, storage = cfg["uid"], int(cfg["limits"]["storage_mb"])
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    new = "/tmp"  # a mount point that exists everywhere; the host's /tmp is untouched (private mounts)
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, f"size={storage}m,mode=755")
    for d, mode in (("usr", 0o755), ("etc", 0o755), ("proc", 0o555), ("dev", 0o755), ("tmp", 0o1777),
                    ("var", 0o755), ("var/tmp", 0o1777), ("run", 0o755), ("run/agentrl", 0o700),
                    ("root", 0o700), ("logs", 0o755), ("logs/agent", 0o755), ("logs/verifier", 0o755),
                    ("home", 0o755), ("tests", 0o755), (".oldroot", 0o700)):
        os.mkdir(f"{new}/{d}", mode)
        os.chmod(f"{new}/{d}", mode)  # mkdir applies the umask
    for d in ("run/agentrl", "root", "logs/agent", "logs/verifier"):
        os.chown(f"{new}/{d}", uid, uid)
    _bind_ro("/usr", f"{new}/usr")
    if os.path.isdir("/usr/local") and not renewing:
        mount("tmpfs", f"{new}/usr/local", "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=16k,mode=755")
    for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.islink(f"/{d}"):
            os.symlink(os.readlink(f"/{d}"), f"{new}/{d}")
        elif os.path.isdir(f"/{d}"):
            os.mkdir(f"{new}/{d}")
            _bind_ro(f"/{d}", f"{new}/{d}")
    _etc(f"{new}/etc", uid)
    _dev(f"{new}/dev")
    _libc.pivot_root(new.encode(), f"{new}/.oldroot".encode())
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    os.rmdir("/.oldroot")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")  # the agent sees its own only


def _bind_ro(src: str, dst: str) -> None:
    mount(src, dst, None, MS_BIND | MS_REC)
    mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _etc(etc: str, uid: int) -> None:
    files = {"passwd": f"root:x:0:0:root:/root:/bin/bash\nagent:x:{uid}:{uid}:agent:/root:/bin/bash\n"
                       "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
             "group": f"root:x:0:\nagent:x:{uid}:\nnogroup:x:65534:\n",
             "hosts": "127.0.0.1 localhost workspace\n::1 localhost\n", "hostname": "workspace\n",
             "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n", "resolv.conf": ""}
    for name, text in files.items():
        with open(f"{etc}/{name}", "w") as f:
            f.write(text)
    for name in ETC_BINDS:
        src = f"/etc/{name}"
        if os.path.islink(src) and not os.path.isdir(src):
            os.symlink(os.readlink(src), f"{etc}/{name}")
        elif os.path.isdir(src):
            os.mkdir(f"{etc}/{name}")
            _bind_ro(src, f"{etc}/{name}")
        elif os.path.isfile(src):
            open(f"{etc}/{name}", "w").close()
            _bind_ro(src, f"{etc}/{name}")


def _dev(dev: str) -> None:
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for name in DEVICES:
        open(f"{dev}/{name}", "w").close()
        mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    os.mkdir(f"{dev}/shm", 0o1777)
    os.chmod(f"{dev}/shm", 0o1777)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
