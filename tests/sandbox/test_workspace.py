"""Workspaces on both backends, for real: a persistent shell, timeouts that leave the episode going,
files, trees, the Dockerfile build, limits, walls, and nothing left after close."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sandbox.workspace import BuildError, WorkspaceError, WorkspaceLimits, WorkspaceSpec, open_workspace
from sandbox.workspace.dockerfile import parse_dockerfile
from sandbox.workspace.leftovers import leftovers

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def _docker_or_skip() -> None:
    try:
        import docker

        docker.from_env(timeout=10).ping()
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but no Docker daemon is reachable: {exc}")
        pytest.skip(f"no Docker daemon reachable ({type(exc).__name__})")


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "docker":
        _docker_or_skip()
    yield request.param
    left = leftovers(os.getpid())
    assert not any(left.values()), left  # every test closes what it opened: nothing of it is left


@pytest.fixture
def ws(backend):
    with open_workspace(WorkspaceSpec(limits=WorkspaceLimits(max_output_bytes=4096)), backend) as w:
        yield w


def test_the_shell_keeps_its_state_between_commands(ws):
    assert ws.exec("pwd").output == "/app\n"
    assert ws.exec("mkdir -p src && cd src && export GREETING='hi there'").exit_code == 0
    r = ws.exec('echo "$GREETING from $(pwd)"; sleep 60 & echo started')
    assert r.output == "hi there from /app/src\nstarted\n"
    assert "Running" in ws.exec("jobs").output  # a background job of an earlier command
    assert ws.exec("false").exit_code == 1 and "[exit code 1]" in ws.exec("false").text()
    r = ws.exec("echo one\nif; then")
    assert r.exit_code == 2  # a syntax error is the command's, the shell goes on
    assert "bash: line 2: syntax error near unexpected token `;'" in r.output and "eval" not in r.output, r.output
    assert ws.exec("cat").output == ""  # stdin is /dev/null: a command cannot read the protocol


def test_a_command_past_its_timeout_is_killed_and_the_episode_goes_on(ws):
    r = ws.exec("echo partial; sleep 30; echo never", timeout_s=1.0)
    assert r.timed_out and r.output.startswith("partial") and "never" not in r.output
    assert "ran past its 1 s timeout" in r.text()
    ws.exec("cd /tmp && export KEEP=1 && (sleep 120 &)")
    r = ws.exec("cd /; export KEEP=2; while :; do :; done", timeout_s=1.0)  # the shell itself is stuck
    assert r.timed_out and "directory and variables are as before it" in r.text()
    assert ws.exec("echo $KEEP; pwd").output == "1\n/tmp\n"
    assert "sleep 120" in ws.exec("ps -eo args").output  # a background job of an earlier command lives on
    assert ws.exec("exit 3").shell_restarted and ws.exec("echo $KEEP").output == "1\n"


def test_long_output_is_cut_with_a_visible_mark(ws):
    r = ws.exec("seq 1 100000")
    assert r.truncated and "bytes of output cut" in r.output and len(r.output) < 4096 + 100
    assert r.output.startswith("1\n2\n3\n") and r.output.endswith("99999\n100000\n")


def test_files_from_outside(ws):
    ws.write_file("notes/a.txt", "alpha\n")
    ws.write_file("/app/bin.dat", b"\x00\xff")
    assert ws.read_file("notes/a.txt") == b"alpha\n" and ws.read_file("/app/bin.dat") == b"\x00\xff"
    assert [(e.name, e.kind) for e in ws.list(".")] == [("bin.dat", "file"), ("notes", "dir")]
    assert ws.exec("cat notes/a.txt").output == "alpha\n"  # the shell sees what was written
    with pytest.raises(OSError, match="No such file"):
        ws.read_file("missing.txt")
    ws.exec("ln -s /proc/1/environ leak; ln -s /etc/shadow shadow")
    for link in ("leak", "shadow"):  # read as the agent: a planted link leads nowhere the agent cannot go
        agent = ws.exec(f"cat {link} >/dev/null 2>&1 && echo readable").output
        if agent:
            assert ws.read_file(link) is not None  # Docker: root in its container, which is the wall
        else:
            with pytest.raises(OSError):
                ws.read_file(link)


def test_snapshot_restore_and_diff(ws):
    ws.exec("printf 'one\\ntwo\\n' > f.txt")
    snap = ws.snapshot()
    ws.exec("printf 'one\\nTWO\\n' > f.txt && touch new.txt")
    diff = ws.diff()  # against the tree right after the build, which held neither file
    assert "+++ b/app/f.txt\n@@ -0,0 +1,2 @@\n+one\n+TWO\n" in diff and "new empty file /app/new.txt" in diff
    ws.restore(snap)
    assert ws.exec("cat f.txt; ls").output == "one\ntwo\nf.txt\n"
    assert ws.exec("pwd").output == "/app\n"


def test_seal_ends_every_process_and_keeps_only_the_agents_tree(ws, backend):
    ws.exec("echo 1 > answer.txt; (sleep 300 &); nohup sleep 301 >/dev/null 2>&1 & mkdir -p /logs/verifier;"
            "echo 1 > /logs/verifier/reward.txt; echo x > /root/home.txt")
    if backend == "docker":  # root inside: it can write the top level and the tests dir
        ws.exec("echo evil > /conftest.py; mkdir -p /tests && echo evil > /tests/test.sh")
    tree = ws.seal()
    files = tree.files()
    assert files["/app/answer.txt"] == b"1\n" and files["/root/home.txt"] == b"x\n"
    assert not any(p.startswith(("/logs/verifier/", "/tests", "/usr", "/etc", "/conftest")) for p in files)
    with pytest.raises(WorkspaceError, match="sealed"):
        ws.exec("echo more")


def test_the_local_workspace_sees_nothing_of_the_host():
    with open_workspace(WorkspaceSpec(), "local") as ws:
        r = ws.exec(f"ls {ROOT} /work /srv /home/* 2>&1; ls -A /root /usr/local; id -u; "
                    "cat /proc/1/cmdline | tr '\\0' ' '; env | grep -c -i -E 'token|key|secret'")
        assert "No such file" in r.output and str(ROOT) not in r.output.replace(f"ls: cannot access '{ROOT}'", "")
        lines = r.output.strip().splitlines()
        assert int(lines[-3]) >= 1_500_000_000  # not root
        assert lines[-1] == "0"  # no secrets in the environment
        assert ws.exec("touch /usr/bin/x /etc/x / 2>&1; echo $?").output.count("Read-only") >= 1


def test_no_network_not_even_the_hosts_loopback(backend):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        with open_workspace(WorkspaceSpec(), backend) as ws:
            r = ws.exec(f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
                        timeout_s=20)
            assert r.exit_code != 0 and ("refused" in r.output or "unreachable" in r.output), r.output
    finally:
        server.close()


def test_limits_hold_memory_processes_and_disk(backend):
    lim = WorkspaceLimits(memory_mb=256, max_processes=48, storage_mb=32)
    with open_workspace(WorkspaceSpec(limits=lim), backend) as ws:
        r = ws.exec("python3 -c 'x = bytearray(700 * 2**20)'", timeout_s=60)
        assert r.exit_code not in (0, None)
        ws.exec(":(){ :|:& };:", timeout_s=5)  # a fork bomb in the background, capped by the pids limit
        time.sleep(1)
        assert ws.process_count() <= lim.max_processes
        ws.exec("kill -9 -1 2>/dev/null; true", timeout_s=10)
        r = ws.exec("head -c 100M /dev/zero > big; ls -l big | awk '{print $5}'", timeout_s=60)
        assert int(r.output.split()[-1]) <= 32 << 20


def test_idle_workspaces_end_by_themselves(backend):
    ws = open_workspace(WorkspaceSpec(limits=WorkspaceLimits(idle_s=1.0)), backend)
    try:
        time.sleep(2.5)
        with pytest.raises(WorkspaceError, match="ended|closed|answer"):
            ws.exec("echo hi")
    finally:
        ws.close()


DOCKERFILE = """FROM python:3.12-slim
# a comment
WORKDIR /srv/app
ENV GREETING=hello NAME="the world"
COPY data/ ./data/
COPY run.sh /srv/app/
RUN chmod +x run.sh && \\
    echo built > built.txt
"""


def test_a_dockerfile_builds_on_either_backend(backend, tmp_path, capsys):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "run.sh").write_text("#!/bin/bash\necho \"$GREETING, $NAME\"\n")
    parsed = parse_dockerfile(DOCKERFILE)
    spec = WorkspaceSpec(steps=parsed.steps, context=str(tmp_path), workdir=parsed.workdir, env=parsed.env,
                         dockerfile=DOCKERFILE if backend == "docker" else None, name="demo")
    if backend == "docker":
        from sandbox.workspace import docker as docker_backend

        docker_backend._warned.discard("python:3.12-slim")  # said once per process: say it in this test
    with open_workspace(spec, backend) as ws:
        assert ws.exec("pwd; ./run.sh; cat built.txt data/x.csv").output == \
            "/srv/app\nhello, the world\nbuilt\na,b\n1,2\n"
    if backend == "docker":  # no registry: built on the local base image, and it says so (on stderr)
        assert "python:3.12-slim is not available locally" in capsys.readouterr().err


def test_the_local_backend_refuses_other_instructions_in_one_line():
    with pytest.raises(BuildError, match=r"line 2: EXPOSE is not supported by the local workspace backend"):
        parse_dockerfile("FROM x\nEXPOSE 80\n")
    with pytest.raises(BuildError, match="COPY --from"):
        parse_dockerfile("FROM x\nCOPY --from=build /a /b\n")
    bad = parse_dockerfile("FROM x\nRUN exit 7\n")
    with pytest.raises(BuildError, match="RUN at line 2 failed"):
        open_workspace(WorkspaceSpec(steps=bad.steps), "local")


def test_a_run_line_that_needs_the_network_says_so_on_either_backend(backend, tmp_path):
    """`RUN apt-get` offline failed with raw apt output cut mid-word (local) or "code 127" (Docker) (issue 46, 5)."""
    from sandbox.workspace.dockerfile import run_failed

    text = "FROM python:3.12-slim\nWORKDIR /app\nRUN apt-get update && apt-get install -y jq\n"
    parsed = parse_dockerfile(text)
    spec = WorkspaceSpec(steps=parsed.steps, context=str(tmp_path), workdir=parsed.workdir, env=parsed.env,
                         dockerfile=text if backend == "docker" else None, name="needs-jq")
    with pytest.raises(BuildError) as e:
        open_workspace(spec, backend)
    message = str(e.value)
    assert message.startswith("needs-jq:") and "`apt-get` needs the network, which a workspace build does not have" in message
    assert "\n" not in message and "\x1b" not in message and "intermediate container" not in message, message
    long = "word " * 200 + "\nlast line of apt"
    cut = run_failed("t: RUN at line 3", "pip install x", long, 1).split("its output ends: ")[1]
    assert cut == "... last line of apt"  # cut at a line (or a word), never mid-word
    assert "needs the network" not in run_failed("t: RUN at line 3", "make all", "error", 2)


def test_workspaces_run_side_by_side(backend):
    results, errors = {}, []

    def one(k: int) -> None:
        try:
            with open_workspace(WorkspaceSpec(), backend) as ws:
                ws.exec(f"echo {k} > mine.txt")
                results[k] = ws.exec("cat mine.txt; ls").output
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == {k: f"{k}\nmine.txt\n" for k in range(4)}


@pytest.mark.docker
def test_a_dead_owners_containers_are_reaped_and_a_live_owners_kept():
    """``reap_orphans`` removes the containers of an owner that is gone and keeps a live one's; it and
    ``leftovers`` read the labels from one sparse listing (a full one inspects each container after the
    listing and fails on a container that ends in between, as a killed owner's do)."""
    _docker_or_skip()
    from sandbox.workspace.docker import LABEL, OWNER, _client, labelled_containers, owner_id, reap_orphans
    from sandbox.workspace.docker_base import build_base_image

    client = _client()
    image = build_base_image(client)
    # the orphan's owner lives until the test ends it: every process reaps dead owners' containers at its first
    # Docker workspace, so a container of an owner dead from the start could go to another test process's
    # reaper (a pytest-xdist worker beside this one) before this test lists it
    owner = subprocess.Popen(["sleep", "600"])
    try:
        orphan = client.containers.run(image, ["sleep", "600"], detach=True, auto_remove=True,
                                       network_mode="none", labels={LABEL: "1", OWNER: owner_id(owner.pid)})
        with open_workspace(WorkspaceSpec(), "docker") as ws:
            labels = dict((c.id, lab) for c, lab in labelled_containers(client))
            assert labels[orphan.id][OWNER] == owner_id(owner.pid)
            assert labels[ws.container.id][OWNER] == owner_id()
            assert leftovers(os.getpid())["containers"] == [ws.container.id]
            owner.kill()
            owner.wait()  # a pid of this host that no process has now
            removed = reap_orphans(client)  # the dead owner's (another test's killed owner may have some too)
            # none removed here only when a peer's reaper (another test process's first workspace) was first
            assert removed >= 1 or orphan.id not in {c.id for c, _ in labelled_containers(client)}
            assert ws.exec("echo alive").output == "alive\n"
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while orphan.id in {c.id for c, _ in labelled_containers(client)}:
        assert time.monotonic() < deadline, "the orphan was not removed"
        time.sleep(0.1)
