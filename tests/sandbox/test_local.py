"""The local backend's API: results, limits, files, stdin, concurrency, sessions."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sbhelpers import assert_host_clean

import sandbox


def test_result_fields(local: sandbox.Sandbox) -> None:
    res = local.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (res.status, res.exit_code, res.stdout, res.stderr) == ("error", 3, "out\n", "err\n")
    assert not res.stdout_truncated and not res.stderr_truncated and res.duration_s > 0
    ok = local.run("print(sum(range(10)))")
    assert ok.ok and ok.status == "ok" and ok.exit_code == 0 and ok.stdout == "45\n"


def test_exception_traceback_is_the_programs(local: sandbox.Sandbox) -> None:
    res = local.run("def f():\n    raise ValueError('boom')\nf()")
    assert res.status == "error" and res.exit_code == 1
    assert res.stderr.startswith("Traceback") and "ValueError: boom" in res.stderr
    assert "_program.py" not in res.stderr


def test_stdin_files_and_private_workdir(local: sandbox.Sandbox) -> None:
    code = "import os, helper\nprint(input(), helper.VALUE, open('data/x.bin', 'rb').read(), os.listdir('.'))"
    res = local.run(code, stdin="hello\n", files={"helper.py": "VALUE = 7\n", "data/x.bin": b"\x00\x01"})
    assert res.stdout.startswith("hello 7 b'\\x00\\x01'"), res.stderr
    again = local.run("import os\nprint(sorted(os.listdir('.')), os.getcwd() == os.environ['HOME'])")
    assert again.stdout == "['main.py'] True\n"


def test_files_cannot_escape(local: sandbox.Sandbox) -> None:
    for name in ("../../etc/evil", "/etc/evil", "a/../../b", "main.py"):
        with pytest.raises(ValueError, match="bad file name"):
            local.run("print(1)", files={name: "x"})


def test_runs_as_non_root_with_scrubbed_env(local: sandbox.Sandbox) -> None:
    res = local.run("import os\nprint(os.getuid(), os.geteuid(), sorted(os.environ))")
    uid, euid, env = res.stdout.split(" ", 2)
    assert int(uid) != 0 and int(euid) != 0
    assert env.strip() == "['HOME', 'LANG', 'PATH', 'PYTHONIOENCODING', 'TMPDIR']"


def test_stdlib_imports_work_as_sandbox_uid(local: sandbox.Sandbox) -> None:
    res = local.run("import sqlite3, xml.dom.minidom, email.mime.text, sympy\nprint(sympy.sqrt(8))")
    assert res.stdout == "2*sqrt(2)\n", res.stderr


def test_per_run_limits_override(local: sandbox.Sandbox) -> None:
    # Ends after 1 s under the sandbox's own limit; only the per-run 0.3 s makes it time out.
    res = local.run("import time\ntime.sleep(1)\nprint('done')", limits=sandbox.Limits(timeout_s=0.3))
    assert res.status == "timeout" and res.stdout == ""
    res = local.run("print('x' * 100)", limits=sandbox.Limits(max_output_bytes=10))
    assert res.stdout == "x" * 10 and res.stdout_truncated


def test_limits_are_validated() -> None:
    for bad in ({"timeout_s": 0}, {"memory_mb": -1}, {"cpu_s": 0}, {"max_open_files": 3}):
        with pytest.raises(ValueError, match="Limits"):
            sandbox.Limits(**bad)
    with pytest.raises(TypeError):
        sandbox.get_sandbox("local", timeout=3)  # not a field, not a backend option


def test_cpu_limit(local: sandbox.Sandbox) -> None:
    # 1 s of CPU takes several seconds of wall time on a busy machine; the wall limit is far away,
    # so only the CPU limit (SIGXCPU, then SIGKILL at the hard limit) can have ended it.
    res = local.run("while True: pass", limits=sandbox.Limits(timeout_s=60, cpu_s=1))
    assert res.status == "timeout" and res.exit_code in (-9, -24) and res.duration_s < 55


def test_random_differs_between_jobs(local: sandbox.Sandbox) -> None:
    outs = {local.run("import random\nprint(random.random())").stdout for _ in range(3)}
    assert len(outs) == 3


def test_network_opt_in(local: sandbox.Sandbox) -> None:
    res = local.run("import socket\nprint(len(socket.if_nameindex()) > 1)", limits=sandbox.Limits(network=True))
    assert res.status == "ok"


def test_threads_share_the_pool(local: sandbox.Sandbox) -> None:
    with ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda i: local.run(f"print({i} * 2)").stdout, range(24)))
    assert outs == [f"{i * 2}\n" for i in range(24)]
    assert len([s for s in local._all if s is not None]) <= 2  # type: ignore[attr-defined]


def test_asyncio(local: sandbox.Sandbox) -> None:
    async def main() -> list[str]:
        results = await asyncio.gather(*(local.run_async(f"print({i})") for i in range(6)))
        return [r.stdout for r in results]

    assert asyncio.run(main()) == [f"{i}\n" for i in range(6)]


def test_get_sandbox_and_context_manager() -> None:
    with sandbox.get_sandbox("local", timeout_s=30.5, workers=1, preload=()) as sb:
        assert sb.limits.timeout_s == 30.5 and sb.backend == "local"
        assert sb.run("print('hi')").stdout == "hi\n"
    with pytest.raises(RuntimeError):
        sb.run("print(1)")
    with pytest.raises(ValueError, match="valid: local, docker"):
        sandbox.get_sandbox("nope")


def test_session_keeps_state(local: sandbox.Sandbox) -> None:
    with sandbox.PythonSession(sandbox.Limits(timeout_s=3)) as sess:
        assert sess.execute("x = 20").status == "ok"
        out = sess.execute("x += 22\nprint('x is', x)\nx")
        assert out.stdout == "x is 42\n42\n"
        err = sess.execute("1 / 0")
        assert err.status == "error" and "ZeroDivisionError" in err.stderr
        assert sess.execute("x").stdout == "42\n"
        assert sess.execute("import time\ntime.sleep(60)").status == "timeout"
        fresh = sess.execute("print('x' in globals())")
        assert fresh.stdout == "False\n" and "restarted" in fresh.stderr
        assert sess.execute("import os\nos.getuid()").stdout.strip() != "0"


def test_session_threads_and_close() -> None:
    sess = sandbox.PythonSession()
    lock_free = threading.Barrier(4)

    def work(i: int) -> str:
        lock_free.wait()
        return sess.execute(f"v{i} = {i}\nv{i}").stdout

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, range(4))) == ["0\n", "1\n", "2\n", "3\n"]
    sess.close()
    with pytest.raises(RuntimeError):
        sess.execute("1")


def test_host_clean_after_module(local: sandbox.Sandbox) -> None:
    assert_host_clean(local)
