"""Hostile programs against the local backend: each asserts the outcome and a clean host afterwards."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from sbhelpers import ROOMY, SHORT, assert_host_clean

import sandbox
from sandbox.local import SERVER, LocalSandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the isolation guarantees need root (CI runs as root)")
MARK = f"agentrl-sbx-{uuid.uuid4().hex[:8]}"  # names of files the attacks try to leave behind


@dataclass
class Attack:
    name: str
    code: str
    statuses: tuple[str, ...]
    check: Callable[[sandbox.ExecutionResult], None] | None = None

    @property
    def limits(self) -> sandbox.Limits:
        """SHORT for an attack that may run until it is stopped, else ROOMY (see sbhelpers)."""
        return SHORT if "timeout" in self.statuses else ROOMY

    @property
    def max_s(self) -> float:
        """How long the sandbox may take to answer: the limit plus room for a busy machine."""
        return self.limits.timeout_s + 10.0


def _no_host_file(*paths: str) -> Callable[[sandbox.ExecutionResult], None]:
    def check(res: sandbox.ExecutionResult) -> None:
        for p in paths:
            assert not os.path.exists(p), p
    return check


def _stdout_is(expected: str) -> Callable[[sandbox.ExecutionResult], None]:
    def check(res: sandbox.ExecutionResult) -> None:
        assert res.stdout.strip() == expected, (res.stdout, res.stderr)
    return check


def _stderr_has(text: str) -> Callable[[sandbox.ExecutionResult], None]:
    def check(res: sandbox.ExecutionResult) -> None:
        assert text in res.stderr, res.stderr
    return check


def _truncated_at(cap: int) -> Callable[[sandbox.ExecutionResult], None]:
    def check(res: sandbox.ExecutionResult) -> None:
        assert res.stdout_truncated and len(res.stdout.encode()) <= cap
    return check


CAP = sandbox.Limits().max_output_bytes
# What a job may see of root's 0700 home: only the way to the interpreter, when that lives there
# (e.g. ['.pyenv']); nothing at all (PermissionError) when it lives elsewhere.
_UNDER_ROOT = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(SERVER))}
ROOT_VIEW = str(sorted({p.split(os.sep)[2] for p in _UNDER_ROOT if p.startswith("/root/")})).replace("[]", "")
# Made by the host_secrets fixture, not at import: a run that selects none of these tests (make
# test's slow pass) would leave it behind.
SECRET_DIR = os.path.join(tempfile.gettempdir(), f"{MARK}-secret")
SECRET_FILE = os.path.join(SECRET_DIR, "token")
ATTACKS = [
    Attack("infinite_loop", "while True: pass", ("timeout",)),
    Attack("sleep", "import time; time.sleep(60)", ("timeout",)),
    Attack("ignore_sigterm", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "while True: time.sleep(1)", ("timeout",)),
    Attack("disable_alarms", "import signal\nsignal.alarm(0)\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
           "signal.setitimer(signal.ITIMER_REAL, 0)\nwhile True: pass", ("timeout",)),
    Attack("regex_hang", "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')", ("timeout",)),
    Attack("memory_bomb_one", "x = bytearray(8 * 1024 ** 3)", ("memory",)),
    Attack("memory_bomb_grow", "l = []\nwhile True: l.append(bytearray(10 ** 7))", ("memory",)),
    Attack("memory_bomb_children", textwrap.dedent("""
        import os, time
        for _ in range(8):
            if os.fork() == 0:
                x = bytearray(200 * 1024 ** 2)
                for i in range(0, len(x), 4096): x[i] = 1
                time.sleep(5)
                os._exit(0)
        for _ in range(8): os.wait()
        """), ("memory", "killed", "timeout", "error")),
    Attack("fork_bomb", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
           ("timeout", "error", "killed", "memory")),
    Attack("thread_bomb", "import threading, time\nwhile True: threading.Thread(target=time.sleep, "
           "args=(60,), daemon=True).start()", ("error", "memory")),
    Attack("output_flood", "while True: print('x' * 1000)", ("timeout",), _truncated_at(CAP)),
    Attack("huge_line", "import sys\nsys.stdout.write('a' * 10 ** 8)", ("ok", "timeout"), _truncated_at(CAP)),
    Attack("stderr_flood", "import sys\nwhile True: sys.stderr.write('e' * 4096)", ("timeout",),
           lambda r: r.stderr_truncated and len(r.stderr.encode()) <= CAP),
    Attack("write_etc", f"open('/etc/{MARK}', 'w').write('x')", ("error",),
           _no_host_file(f"/etc/{MARK}")),
    Attack("write_repo", f"open('{os.getcwd()}/{MARK}', 'w').write('x')", ("error",),
           _no_host_file(f"{os.getcwd()}/{MARK}")),
    Attack("write_tmp_and_shm", f"for d in ('/tmp', '/dev/shm', '/var/tmp'):\n"
           f"    open(d + '/{MARK}', 'w').write('x')\nprint('written')", ("ok",),
           _no_host_file(f"/tmp/{MARK}", f"/dev/shm/{MARK}", f"/var/tmp/{MARK}")),
    Attack("big_file", "open('f', 'wb').write(b'x' * (64 * 1024 ** 2))", ("error", "killed")),
    Attack("read_secret_file", f"print(open('{SECRET_FILE}').read())", ("error",)),
    Attack("read_root_and_shadow", "import os\nprint(sorted(os.listdir('/root')))\n"
           "open('/etc/shadow').read()", ("error",), _stdout_is(ROOT_VIEW)),
    Attack("env_secrets", "import os, glob\nleaks = [k for k in os.environ if 'SECRET' in k]\n"
           "for p in glob.glob('/proc/*/environ'):\n    try: leaks += [p] if b'SECRET' in "
           "open(p, 'rb').read() else []\n    except OSError: pass\nprint(leaks)", ("ok",),
           _stdout_is("[]")),
    Attack("proc_sees_only_itself", "import os\nprint([p for p in os.listdir('/proc') if p.isdigit()])",
           ("ok",), _stdout_is("['1']")),
    Attack("no_interfaces_no_routes", "import socket\nprint([n for _, n in socket.if_nameindex()], "
           "len(open('/proc/net/route').read().splitlines()[1:]))", ("ok",), _stdout_is("['lo'] 0")),
    Attack("socket_outside", "import socket, errno\ns = socket.socket()\ns.settimeout(0.2)\n"
           "try: s.connect(('192.0.2.1', 80))\nexcept OSError as e: print(e.errno == errno.ENETUNREACH)",
           ("ok",), _stdout_is("True")),
    Attack("subprocess_shell", "import subprocess\nprint(subprocess.run(['sh', '-c', 'id -u; echo hi'], "
           "capture_output=True, text=True).stdout.split())", ("ok",),
           lambda r: r.stdout.strip() != "['0', 'hi']" and "hi" in r.stdout),
    Attack("shell_background_job", "import os\nos.system('sleep 100 &')\nprint('left')", ("ok",)),
    Attack("daemon_outlives_job", textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(3)
                open('/tmp/{MARK}-daemon', 'w').write('still here')
            os._exit(0)
        print('parent done')
        """), ("ok",), _no_host_file(f"/tmp/{MARK}-daemon")),
    Attack("deep_recursion", "import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n): return f(n + 1)\nf(0)",
           ("killed", "memory", "error", "timeout")),
    Attack("recursion_error", "def f(n): return f(n + 1)\nf(0)", ("error",), _stderr_has("RecursionError")),
    Attack("ctypes_segfault", "import ctypes\nctypes.string_at(0)", ("killed",),
           lambda r: r.exit_code == -11),
    Attack("kill_everything", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('alive')",
           ("ok", "killed", "error")),
    Attack("become_root", "import os\nos.setuid(0)", ("error",), _stderr_has("PermissionError")),
    Attack("mount_and_unshare", "import os\nprint(os.system('mount -t tmpfs x /mnt 2>/dev/null'), "
           "os.system('unshare -n true 2>/dev/null'))", ("ok",),
           lambda r: "0" not in r.stdout.split()),
    Attack("open_files", "fs = [open('/dev/null') for _ in range(10000)]", ("error",),
           _stderr_has("Too many open files")),
    Attack("many_processes", "import subprocess\nps = [subprocess.Popen(['sleep', '30']) for _ in range(200)]",
           ("error",)),
]


@pytest.fixture(scope="module")
def loopback_listener() -> socket.socket:
    """A TCP listener on the host's 127.0.0.1 that no job may reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.setblocking(False)
    yield srv
    srv.close()


@pytest.fixture(scope="module", autouse=True)
def host_secrets() -> None:
    """A root-only secret file and a secret in the host environment."""
    os.mkdir(SECRET_DIR, 0o700)  # root only
    with open(SECRET_FILE, "w") as f:
        f.write("hunter2")
    os.environ["AGENTRL_TEST_SECRET"] = "hunter2"
    yield
    os.environ.pop("AGENTRL_TEST_SECRET", None)
    os.unlink(SECRET_FILE)
    os.rmdir(SECRET_DIR)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack(local: sandbox.Sandbox, attack: Attack) -> None:
    start = time.monotonic()
    res = local.run(attack.code, limits=attack.limits)
    assert res.status in attack.statuses, (res.status, res.stderr[-2000:])
    assert time.monotonic() - start < attack.max_s
    if attack.check is not None:
        assert attack.check(res) is not False
    assert_host_clean(local)


def test_attack_count() -> None:
    assert len(ATTACKS) >= 30


def test_loopback_unreachable(local: sandbox.Sandbox, loopback_listener: socket.socket) -> None:
    port = loopback_listener.getsockname()[1]
    res = local.run(f"import socket\ns = socket.socket()\ns.settimeout(0.5)\ns.connect(('127.0.0.1', {port}))")
    assert res.status == "error" and "OSError" in res.stderr
    with pytest.raises(BlockingIOError):
        loopback_listener.accept()
    assert_host_clean(local)


def test_server_survives_attacks(local: sandbox.Sandbox) -> None:
    assert local.run("print(6 * 7)").stdout == "42\n"


def test_attacks_eight_at_a_time() -> None:
    """A batch of attacks with 8 jobs running at once on 8 servers; then the host is clean."""
    batch = [a for a in ATTACKS if a.name in {
        "infinite_loop", "sleep", "memory_bomb_one", "fork_bomb", "thread_bomb", "output_flood",
        "write_tmp_and_shm", "daemon_outlives_job", "ctypes_segfault", "env_secrets",
        "subprocess_shell", "kill_everything", "deep_recursion", "regex_hang", "shell_background_job",
        "proc_sees_only_itself"}]
    with LocalSandbox(ROOMY, workers=8, preload=()) as sb:
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(lambda _: sb.run("pass").ok, range(8)))  # start the 8 servers
            start = time.monotonic()
            results = list(pool.map(lambda a: sb.run(a.code, limits=a.limits), batch))
        wall = time.monotonic() - start
        for attack, res in zip(batch, results):
            assert res.status in attack.statuses, (attack.name, res.status, res.stderr[-500:])
            if attack.check is not None:
                assert attack.check(res) is not False, attack.name
        # In parallel, not one after another: both sides of this grow alike when the machine is busy.
        assert wall < sum(r.duration_s for r in results) / 2, wall
        assert_host_clean(sb)
