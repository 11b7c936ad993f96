"""Workspace lifetimes: the warm pool, and an owner SIGKILLed with 16 workspaces open leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox.workspace import WorkspaceSpec, open_workspace
from sandbox.workspace.leftovers import leftovers
from sandbox.workspace.pool import WorkspacePool

ROOT = Path(__file__).resolve().parents[2]


def _docker() -> bool:
    try:
        import docker

        docker.from_env(timeout=10).ping()
        return True
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but no Docker daemon is reachable: {exc}")
        return False


def _clean_within(owner: int, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        left = leftovers(owner)
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_the_pool_hands_out_started_workspaces():
    spec = WorkspaceSpec(name="pooled")
    with WorkspacePool("local", size=2) as pool:
        first = pool.acquire(spec)  # cold: nothing was started yet
        first.exec("echo mine > f.txt")
        first.close()
        time.sleep(3)  # the background starts land
        t = time.perf_counter()
        ws = pool.acquire(spec)
        warm_s = time.perf_counter() - t
        assert ws.exec("ls").output == "" and pool.hits == 1 and pool.misses == 1  # fresh, not the last one's
        ws.close()
        assert warm_s < 0.5
    assert not any(leftovers(os.getpid()).values())


OWNER = textwrap.dedent("""
    import sys
    from sandbox.workspace import WorkspaceSpec, open_workspace
    spaces = []
    for k in range(int(sys.argv[1])):
        backend = "docker" if k < int(sys.argv[2]) else "local"
        ws = open_workspace(WorkspaceSpec(name=f"w{k}"), backend)
        # a job, a daemon in a session of its own, a nohup'd orphan: each exists when exec returns (a bare
        # `setsid cmd &` would fork again on its own time, so a count right after "ready" could miss it)
        ws.exec("sleep 1000 & (setsid sleep 1001 &); (nohup sleep 1002 >/dev/null 2>&1 &)")
        spaces.append(ws)
    print("ready", flush=True)
    sys.stdin.read()
    """)


@pytest.mark.slow
def test_a_sigkilled_owner_with_16_workspaces_leaves_nothing():
    """The owner is SIGKILLed with 16 workspaces open (4 of them containers when Docker runs), each with
    background jobs and daemons; then a new owner starts a workspace: nothing of the first is left."""
    n_docker = 4 if _docker() else 0
    proc = subprocess.Popen([sys.executable, "-c", OWNER, "16", str(n_docker)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == b"ready"
        during = leftovers(proc.pid)
        assert len({os.path.basename(c) for c in during["cgroups"]}) == 16 - n_docker
        assert len(during["containers"]) == n_docker
        assert len(during["processes"]) == 4 * (16 - n_docker)  # each local one: its shell and three sleeps
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with open_workspace(WorkspaceSpec(), "docker" if n_docker else "local") as ws:  # the next run
        assert ws.exec("echo fresh").output == "fresh\n"
    left = _clean_within(proc.pid, 60)
    assert not any(left.values()), left


@pytest.mark.slow
def test_a_sigkilled_training_run_with_16_workspaces_open_leaves_nothing(tmp_path):
    """`agentrl train` on the shipped Harbor tasks with a warm pool (2 started workspaces per task: 24
    open at once) is SIGKILLed once 16 or more are open; then a new run starts one: nothing of the
    first run is left on the host."""
    run = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli", "train", "examples/configs/harbor_grpo_tiny.yaml",
         "env.kwargs.pool_size=2", "learner.total_steps=1000", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 300
        while len({os.path.basename(c) for c in leftovers(run.pid)["cgroups"]}) < 16:  # one per workspace
            assert run.poll() is None and time.monotonic() < deadline, "the run never had 16 workspaces open"
            time.sleep(0.2)
    finally:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    with open_workspace(WorkspaceSpec(), "local") as ws:  # the next run
        assert ws.exec("echo fresh").output == "fresh\n"
    left = _clean_within(run.pid, 60)
    assert not any(left.values()), left


TEST_SH = ("#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > "
           "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")


def _sealed(answer: str, spec: WorkspaceSpec):
    with open_workspace(spec, "local") as ws:
        ws.exec(f"echo {answer} > answer.txt")
        return ws.seal()


def test_a_bare_workspace_holds_nothing_until_it_receives_a_tree():
    """Issue 45 (grading without a second cold build): a workspace started bare refuses every request but
    the liveness ping until it receives a tree; then it holds exactly that tree, once."""
    from sandbox.workspace import WorkspaceError

    spec = WorkspaceSpec(name="bare")
    tree = _sealed("42", spec)
    ws = open_workspace(spec, "local", bare=True)
    try:
        assert ws.process_count() >= 0
        with pytest.raises(WorkspaceError, match="holds nothing yet"):
            ws.exec("true")
        with pytest.raises(WorkspaceError, match="other limits or workdir"):
            ws.receive(tree, spec.replace(workdir="/srv"))
        ws.receive(tree, spec.replace(name="graded"))
        assert ws.exec("cat answer.txt").output == "42\n" and ws.spec.name == "graded"
        with pytest.raises(WorkspaceError, match="only a bare workspace"):
            ws.receive(tree)
    finally:
        ws.close()
    assert not any(leftovers(os.getpid()).values())


def test_the_grader_pool_grades_as_a_fresh_workspace_does(tmp_path):
    """Grades through the pool: the same verdicts as a workspace started with the tree, each from a workspace
    never used before (its own runtime), the bare ones shared by specs of the same limits and workdir, at
    most max_idle waiting, and nothing left once it is closed."""
    from sandbox.workspace.grading import verify
    from sandbox.workspace.pool import GraderPool, bare_kind

    (tmp_path / "test.sh").write_text(TEST_SH)
    spec = WorkspaceSpec(name="graded")
    trees = [_sealed(a, spec) for a in ("42", "41", "42")]
    plain = [verify(spec, t, str(tmp_path)).reward for t in trees]
    assert plain == [1.0, 0.0, 1.0]
    other = spec.replace(name="another task", env=(("X", "1"),))  # same limits and workdir: the same kind
    assert bare_kind(spec, "local") == bare_kind(other, "local") != bare_kind(spec.replace(workdir="/srv"), "local")
    with GraderPool("local", size=1, max_idle=2) as pool:
        pooled = [verify(s, t, str(tmp_path), graders=pool).reward for s, t in zip((spec, other, spec), trees)]
        assert pooled == plain and pool.misses == 1 and pool.hits + pool.misses == 3
        a, b = pool.acquire(spec), pool.acquire(spec)
        assert a.proc.pid != b.proc.pid  # never one workspace twice
        for ws in (a, b):
            ws.close()
        for workdir in ("/srv", "/opt/x", "/work"):  # three more kinds: the least recently used go
            pool.acquire(spec.replace(workdir=workdir)).close()
        time.sleep(1)
        assert sum(len(q) for q in pool._ready.values()) <= 2
    with pytest.raises(Exception, match="closed"):
        pool.acquire(spec)
    assert not any(_clean_within(os.getpid(), 15).values())


def test_the_grader_pool_on_docker(tmp_path):
    """The same on Docker: a container started ahead, bare, receives the sealed tree and grades it as one
    started with the tree does; nothing is left once the pool is closed."""
    if not _docker():
        pytest.skip("no Docker daemon")
    from sandbox.workspace.grading import verify
    from sandbox.workspace.pool import GraderPool

    (tmp_path / "test.sh").write_text(TEST_SH)
    spec = WorkspaceSpec(name="graded on docker")
    trees = []
    for answer in ("42", "41"):
        with open_workspace(spec, "docker") as ws:
            ws.exec(f"echo {answer} > answer.txt")
            trees.append(ws.seal())
    with GraderPool("docker") as pool:
        got = [verify(spec, t, str(tmp_path), backend="docker", graders=pool).reward for t in trees]
        assert got == [verify(spec, t, str(tmp_path), backend="docker").reward for t in trees] == [1.0, 0.0]
        assert pool.hits + pool.misses == 2
    assert not any(_clean_within(os.getpid(), 30).values())


def test_a_docker_workspace_is_its_containers_main_process_and_is_gone_once_closed():
    """One ``docker run -i``: the runtime is the container's pid 1 (no watcher, no ``docker exec``); the image's
    Python has its byte-code (a start does not compile the standard library); the container is removed by the
    time ``close`` returns, and no temporary file of the start is left."""
    if not _docker():
        pytest.skip("no Docker daemon")
    import tempfile

    from sandbox.workspace.docker import _client, labelled_containers

    before = set(os.listdir(tempfile.gettempdir()))
    ws = open_workspace(WorkspaceSpec(name="main process"), "docker")
    try:
        assert "_workspace" in ws.exec("tr '\\0' ' ' < /proc/1/cmdline").output
        cached = ws.exec("ls /usr/lib/python3*/__pycache__ | grep -c 'json\\|tarfile\\|re\\.'").output
        assert int(cached) >= 2, cached
        cid = ws.container_id
        assert cid in {c.id for c, _ in labelled_containers(_client())}
    finally:
        ws.close()
    assert cid not in {c.id for c, _ in labelled_containers(_client())}
    assert not {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("agentrl-ws-cid-")}


def test_a_docker_start_that_docker_refuses_says_dockers_line(monkeypatch):
    """An image that is not there (removed under a running process): the start fails at once in one line that
    carries docker's own words (no pull from a registry is tried), and leaves nothing."""
    if not _docker():
        pytest.skip("no Docker daemon")
    import sandbox.workspace.docker as docker_backend
    from sandbox.workspace import WorkspaceError

    monkeypatch.setattr(docker_backend, "image_for", lambda client, spec: "agentrl-no-such-image:gone")
    t = time.monotonic()
    with pytest.raises(WorkspaceError) as err:
        open_workspace(WorkspaceSpec(name="refused"), "docker")
    assert time.monotonic() - t < 30
    msg = str(err.value)
    assert "\n" not in msg and "docker run:" in msg and "agentrl-no-such-image" in msg.lower(), msg
    assert not any(_clean_within(os.getpid(), 30).values())


def test_sealed_workspaces_end_in_the_background_and_the_env_waits_for_them_when_closed():
    """An episode's end seals its workspace (every process ends) and grades the tree without waiting for the
    workspace's teardown (or its reset: the local backend recycles runtimes, graders' too); closing the env
    waits for every teardown under way and ends the parked runtimes: nothing is left."""
    from environments.terminal.env import TerminalEnv

    env = TerminalEnv(difficulty=1, max_turns=2)
    closed = []
    env.session.closer.submit = lambda ws, submit=env.session.closer.submit: (closed.append(ws), submit(ws))[1]
    try:
        for seed in range(3):
            env.reset(seed=seed)
            _, reward, terminated, _, info = env.step(env.reference_answer(env.task))
            assert terminated and reward == 1.0 and not info.get("failed"), info
        assert len(closed) == 6  # each episode's workspace and its grader's
    finally:
        env.close()
    assert all(ws.closed for ws in closed)
    assert not any(leftovers(os.getpid()).values())
