"""The Docker backend against a real daemon (CI starts one in .ci/run; locally: MACHINE.md).

Skipped only when no daemon is reachable and $CI is unset; under CI a missing daemon fails.
"""

from __future__ import annotations

import os
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from sbhelpers import FORK_BOMB, OWN_PROCS_AND_FORKS, ROOMY, SHORT, broken_variant

import sandbox

pytestmark = pytest.mark.docker

OWN_PROCS = textwrap.dedent("""
    import os
    me = os.getuid()  # processes of this uid, zombies too: a job's processes must be reaped, not only dead
    print(sum(os.stat(f'/proc/{p}').st_uid == me for p in filter(str.isdigit, os.listdir('/proc'))))
    """)
BOMB_ROUNDS = 8


def _client():
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but no Docker daemon is reachable: {exc}")
        pytest.skip(f"no Docker daemon reachable ({type(exc).__name__}); .ci/run starts one")


@pytest.fixture(scope="module")
def dsb() -> sandbox.Sandbox:
    """A Docker sandbox on the locally built image, two warm containers; roomy wall-clock limits
    (a job that should time out passes `limits=SHORT`)."""
    _client()
    sb = sandbox.get_sandbox("docker", image="local", timeout_s=ROOMY.timeout_s, memory_mb=ROOMY.memory_mb,
                             workers=2)
    yield sb
    sb.close()


def test_runs_isolated(dsb: sandbox.Sandbox) -> None:
    res = dsb.run("import os, socket\nprint(os.getuid() != 0, [n for _, n in socket.if_nameindex()], "
                  "sorted(os.environ))", stdin="")
    assert res.stdout == "True ['lo'] ['HOME', 'LANG', 'PATH', 'PYTHONIOENCODING', 'TMPDIR']\n", res.stderr
    assert dsb.run("import sys\nsys.exit(4)").exit_code == 4


def test_stdin_and_files(dsb: sandbox.Sandbox) -> None:
    res = dsb.run("import m\nprint(input() * m.N)", stdin="ab\n", files={"m.py": "N = 3\n"})
    assert res.stdout == "ababab\n", res.stderr


@pytest.mark.parametrize("code,status", [
    ("while True: pass", "timeout"),
    ("import time\ntime.sleep(30)", "timeout"),
    ("x = bytearray(4 * 1024 ** 3)", "memory"),
    ("import ctypes\nctypes.string_at(0)", "killed"),
    ("open('/etc/x', 'w')", "error"),
])
def test_limits(dsb: sandbox.Sandbox, code: str, status: str) -> None:
    assert dsb.run(code, limits=SHORT).status == status


def test_output_capped(dsb: sandbox.Sandbox) -> None:
    res = dsb.run("import sys\nsys.stdout.write('a' * 10 ** 7)")
    assert res.stdout_truncated and len(res.stdout) == sandbox.Limits().max_output_bytes


def test_nothing_survives_a_job(dsb: sandbox.Sandbox) -> None:
    daemon = textwrap.dedent("""
        import os, subprocess, time
        open('/tmp/leftover', 'w').write('x'); open('/dev/shm/leftover', 'w').write('x')
        subprocess.Popen(['sleep', '100'], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            time.sleep(100)
        print('started')
        """)
    for _ in range(2):  # both containers
        assert dsb.run(daemon).stdout.strip() == "started"
    for _ in range(2):
        after = dsb.run("import os\nprint(os.path.exists('/tmp/leftover'), os.path.exists('/dev/shm/leftover'))")
        assert after.stdout == "False False\n"
        assert dsb.run(OWN_PROCS).stdout == "1\n"


def test_fork_bomb_then_healthy(dsb: sandbox.Sandbox) -> None:
    res = dsb.run(FORK_BOMB, limits=SHORT)
    assert res.status in ("timeout", "error", "killed", "memory")
    assert dsb.run(OWN_PROCS).stdout == "1\n"


@pytest.mark.slow
def test_fork_bombs_in_a_row() -> None:
    """Each job after a fork bomb, in the same container, sees no process of the bomb (running or
    a zombie) and can start processes of its own: the bomb's were reaped before its result."""
    _client()
    with sandbox.get_sandbox("docker", image="local", timeout_s=1.0, memory_mb=256, workers=1) as sb:
        for i in range(BOMB_ROUNDS):
            bomb = sb.run(FORK_BOMB)
            assert bomb.status in ("timeout", "error", "killed", "memory"), (i, bomb.stderr[-500:])
            after = sb.run(OWN_PROCS_AND_FORKS, limits=ROOMY)
            assert (i, after.stdout) == (i, "1 20\n"), after.stderr[-500:]
        assert len(sb._all) == 1  # type: ignore[attr-defined]  # one container all along, never replaced


def test_fake_pass_fails(dsb: sandbox.Sandbox) -> None:
    suite = sandbox.TestSuite(asserts=["assert f(1) == 2", "assert f(2) == 4"])
    for code in ("import os\ndef f(x): os._exit(0)", "print('PASSED')\nimport sys\nsys.exit(0)",
                 "class E:\n    __eq__ = lambda s, o: True\ndef f(x): return E()"):
        assert sandbox.run_tests(code, suite, sandbox=dsb).passed == 0
    assert sandbox.run_tests("def f(x): return 2 * x", suite, sandbox=dsb).all_passed


def test_eight_at_a_time(dsb: sandbox.Sandbox) -> None:
    jobs = [(f"print({i})", ROOMY) if i % 2 else ("while True: pass", SHORT) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: dsb.run(job[0], limits=job[1]), jobs))
    assert [r.status for r in results] == ["timeout", "ok"] * 4
    assert [r.stdout for r in results[1::2]] == ["1\n", "3\n", "5\n", "7\n"]


def test_container_removed_when_processes_outlive_a_job() -> None:
    client = _client()
    with sandbox.get_sandbox("docker", image="local", workers=1) as sb:
        assert sb.run("pass").ok
        container = sb._all[0]  # type: ignore[attr-defined]
        real = container.server.request
        container.server.request = lambda obj, timeout_s: {**real(obj, timeout_s), "leftovers": 1}
        assert sb.run("print(1)").stdout == "1\n"
        assert container not in sb._all  # type: ignore[attr-defined]
        assert container.id not in [c.id for c in client.containers.list(all=True)]
        assert sb.run("print(2)").stdout == "2\n"


def test_containers_removed_on_close() -> None:
    client = _client()
    with sandbox.get_sandbox("docker", image="local", workers=1) as sb:
        assert sb.run("print(1)").stdout == "1\n"
        ids = [c.id for c in sb._all]  # type: ignore[attr-defined]
    assert ids and not [c for c in client.containers.list(all=True) if c.id in ids]


@pytest.mark.slow
def test_humaneval_docker(dsb: sandbox.Sandbox, humaneval: list[dict]) -> None:
    def one(args: tuple[int, dict]) -> tuple[bool, int]:
        i, p = args
        suite = sandbox.TestSuite(check=p["test"], entry_point=p["entry_point"])
        good = sandbox.run_tests(p["prompt"] + p["canonical_solution"], suite, sandbox=dsb)
        bad = sandbox.run_tests(broken_variant(p, i), suite, sandbox=dsb)
        return good.all_passed, bad.passed

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, enumerate(humaneval)))
    assert sum(g for g, _ in results) == 164
    assert sum(b for _, b in results) == 0
