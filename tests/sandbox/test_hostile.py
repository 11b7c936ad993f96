"""The hostile workspace suite (tests/sandbox/hostile/): Harbor tasks whose "solution" is an attack on
the workspace or its grader and whose verifier rewards a successful attack. Each runs as Harbor's
oracle does (its solve.sh in a workspace built from environment/, then the grader on the sealed
tree) on both backends, and must score 0 and leave nothing of any workspace on the host."""

from __future__ import annotations

import os
import socket
import threading
import tomllib
from pathlib import Path

import pytest

from sandbox.workspace import TreeTooLarge, WorkspaceLimits, WorkspaceSpec, open_workspace
from sandbox.workspace.dockerfile import parse_dockerfile
from sandbox.workspace.grading import Verdict, verify
from sandbox.workspace.leftovers import leftovers

HOSTILE = Path(__file__).resolve().parent / "hostile"
TASKS = sorted(p.name for p in HOSTILE.iterdir() if (p / "task.toml").exists())
CANARY = (HOSTILE / "host_secrets" / "tests" / "canary.txt").read_text().strip()
pytestmark = pytest.mark.slow


def run_oracle(task: Path, backend: str, extra_env: dict[str, str]) -> Verdict:
    """Harbor's oracle on ``task``: solve.sh as the agent, then the verifier on the sealed tree."""
    cfg = tomllib.loads((task / "task.toml").read_text())
    env = cfg.get("environment", {})
    limits = WorkspaceLimits(cpus=float(env.get("cpus", 1)), memory_mb=int(env.get("memory_mb", 2048)),
                             storage_mb=int(env.get("storage_mb", 1024)),
                             allow_internet=bool(env.get("allow_internet", False)))
    text = (task / "environment" / "Dockerfile").read_text()
    parsed = parse_dockerfile(text)
    spec = WorkspaceSpec(steps=parsed.steps, context=str(task / "environment"), workdir=parsed.workdir,
                         env=parsed.env + tuple(extra_env.items()), limits=limits,
                         dockerfile=text if backend == "docker" else None, name=task.name)
    with open_workspace(spec, backend) as ws:
        ws.put_dir(str(task / "solution"), "/solution")
        ws.exec("bash /solution/solve.sh", timeout_s=float(cfg["agent"]["timeout_sec"]))
        try:
            tree = ws.seal()
        except TreeTooLarge as e:  # the agent filled more than its storage: it cannot be graded, it scores 0
            return Verdict(0.0, output=str(e))
    return verify(spec, tree, str(task / "tests"), backend=backend, timeout_s=float(cfg["verifier"]["timeout_sec"]))


@pytest.fixture(scope="module")
def host():
    """What an attack would like to reach: a server on the host's loopback, and a canary in the host's
    environment and /tmp (the repository holds it too, in the task's tests)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    hits: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, addr = server.accept()
            except OSError:
                return
            hits.append(addr[0])
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    canary_file = Path("/tmp/agentrl-host-canary.txt")
    canary_file.write_text(CANARY + "\n")
    os.environ["AGENTRL_HOST_CANARY"] = CANARY
    yield {"port": server.getsockname()[1], "hits": hits}
    server.close()
    canary_file.unlink(missing_ok=True)
    os.environ.pop("AGENTRL_HOST_CANARY", None)


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.parametrize("task", TASKS)
def test_every_attack_scores_zero_and_leaves_the_host_clean(task, backend, host):
    if backend == "docker":
        from tests.sandbox.test_workspace import _docker_or_skip

        _docker_or_skip()
    verdict = run_oracle(HOSTILE / task, backend, {"HOST_PORT": str(host["port"])})
    assert verdict.error is None, verdict
    assert verdict.reward == 0.0, (verdict.reward, verdict.output[-2000:])
    assert not host["hits"], "a workspace reached the host's loopback"
    left = leftovers(os.getpid())
    assert not any(left.values()), left
