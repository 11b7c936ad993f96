"""Recycled local workspaces (``sandbox.workspace.recycle``): a runtime reset after an episode starts the next
one, and nothing of the first reaches the second — files anywhere it could write, processes however they
hid, SysV and POSIX IPC, abstract sockets and listeners, shell state, its uid — nor a later grade."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from sandbox.workspace import WorkspaceError, WorkspaceLimits, WorkspaceSpec, open_workspace
from sandbox.workspace.grading import verify
from sandbox.workspace.leftovers import leftovers
from sandbox.workspace.recycle import Recycler

SPEC = WorkspaceSpec(name="recycled", workdir="/app")

PLANT = r"""
echo secret > /app/a; mkdir -p /app/.d/e && echo s > /app/.d/e/f; mkfifo /app/fifo; ln -s /etc /app/link
for d in /tmp /var/tmp /dev/shm /root /logs/agent /logs/verifier /run/agentrl; do echo s > $d/planted 2>/dev/null; done
export LEAK=1; leak() { echo leaked; }; alias ll='echo leaked'; cd /tmp; umask 000
sleep 1000 & (setsid sleep 1001 &) ; nohup bash -c 'trap "" TERM HUP; sleep 1002' >/dev/null 2>&1 &
bash -c 'kill -STOP $$' & (bash -c '(sleep 1003 &) &' &)
python3 - <<'EOF'
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(4242, 4096, 0o1666) >= 0
assert libc.msgget(4243, 0o1666) >= 0
assert libc.semget(4244, 1, 0o1666) >= 0
rt = ctypes.CDLL("librt.so.1", use_errno=True)
assert rt.mq_open(b"/leak", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0
print("ipc planted", flush=True)
if os.fork() == 0:  # a listener on an abstract socket and one on loopback, alive when the episode ends
    a = socket.socket(socket.AF_UNIX); a.bind(b"\0leak"); a.listen()
    t = socket.socket(); t.bind(("127.0.0.1", 4245)); t.listen()
    os.setsid(); import time; time.sleep(1000)
EOF
sleep 0.2; echo planted
"""

CHECK = r"""
echo uid=$(id -u) cwd=$PWD leak=${LEAK:-} umask=$(umask)
type leak 2>/dev/null; alias ll 2>/dev/null
find / -xdev -mindepth 1 \( -path /proc -o -path /usr -o -path /etc -o -path /dev \) -prune -o -print 2>/dev/null | sort
find /dev -name planted; ls /app
ps -eo pid,args --no-headers | grep -v -e 'ps -eo' -e grep -e bash -e sort -e find -e sed
python3 - <<'EOF'
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
print("shm", libc.shmget(4242, 0, 0), "msg", libc.msgget(4243, 0), "sem", libc.semget(4244, 0, 0),
      "mq", rt.mq_open(b"/leak", os.O_RDWR, 0, None))
for family, addr in ((socket.AF_UNIX, b"\0leak"), (socket.AF_INET, ("127.0.0.1", 4245))):
    s = socket.socket(family)
    print("connect", family.name, s.connect_ex(addr))
EOF
cat /proc/self/cgroup | grep -c agentrl-ws-
"""


def _wait_parked(r: Recycler, n: int) -> None:
    deadline = time.monotonic() + 30
    while r.parked() < n:
        assert time.monotonic() < deadline, "the reset did not land"
        time.sleep(0.02)


def test_nothing_of_an_episode_reaches_the_next_in_its_recycled_runtime():
    with Recycler() as r:
        ws = r.open(SPEC)
        first_uid, pid = ws.info["uid"], ws.proc.pid
        planted = ws.exec(PLANT, timeout_s=30).output
        assert "ipc planted" in planted and planted.strip().endswith("planted"), planted
        assert ws.process_count() >= 6
        fresh = open_workspace(SPEC)  # what a never-used workspace shows, for comparison
        baseline = fresh.exec(CHECK, timeout_s=30).output
        fresh.close()
        r.release(ws)  # not even sealed: the reset ends its processes itself
        _wait_parked(r, 1)
        again = r.open(SPEC)
        assert r.reused == 1 and again.proc.pid == pid  # the same runtime process
        assert again.info["uid"] != first_uid
        out = again.exec(CHECK, timeout_s=30).output
        assert again.process_count() == 1  # its shell
        again.close()
    assert out.replace(str(again.info["uid"]), "U") == baseline.replace(str(fresh.info["uid"]), "U"), out
    assert "uid=" in out and "leak=" in out and "planted" not in out and "/app/a" not in out
    assert "shm -1 msg -1 sem -1 mq -1" in out and "sleep" not in out, out
    assert "connect AF_UNIX 111" in out and "connect AF_INET 111" in out, out  # ECONNREFUSED: nothing listens
    assert out.split()[-1] != "0"  # the new shell is in the workspace's cgroups
    assert not any(leftovers(os.getpid()).values())


def test_a_recycled_runtime_is_a_whole_workspace_of_its_limits():
    """Built from the spec (diff against its first state), storage of its own limits, only same-limits reuse."""
    small = SPEC.replace(limits=WorkspaceLimits(storage_mb=32), name="small")
    with Recycler() as r:
        ws = r.open(small)
        ws.exec("echo 1 > x")
        r.release(ws)
        _wait_parked(r, 1)
        other = r.open(SPEC)  # other limits: a fresh runtime; the parked one waits
        assert r.reused == 0 and r.parked() == 1
        other.close()
        again = r.open(small.replace(env=(("GREETING", "hi"),)))
        assert r.reused == 1
        assert again.exec("echo $GREETING; df -m / | tail -1 | awk '{print $2}'").output.split() == ["hi", "32"]
        again.exec("echo 2 > y")
        assert "y" in again.diff() and "x" not in again.diff()
        tree = again.seal()
        r.release(again)
        _wait_parked(r, 1)
        restored = r.open(small, tree=tree)  # a tree restored into a recycled runtime
        assert restored.exec("ls").output.split() == ["y"]
        restored.close()
    assert not any(leftovers(os.getpid()).values())


def test_a_grade_in_a_recycled_grader_sees_nothing_of_the_last_grade():
    """The verifier plants files and a late writer of the reward; the next grade (same recycled grader)
    finds neither and scores on its own tree."""
    test_sh = ("#!/bin/bash\nmkdir -p /logs/verifier\n"
               "if [ -e /tmp/planted ] || [ -e /dev/shm/planted ] || [ -e /logs/verifier/planted ]; then r=0.5; "
               "elif [ \"$(cat /app/answer.txt)\" = 42 ]; then r=1; else r=0; fi\n"
               "touch /tmp/planted /dev/shm/planted /logs/verifier/planted\n"
               "(sleep 0.5; echo 0.5 > /logs/verifier/reward.txt) >/dev/null 2>&1 &\n"
               "echo $r > /logs/verifier/reward.txt\n")
    with tempfile.TemporaryDirectory() as tests, Recycler() as r:
        Path(tests, "test.sh").write_text(test_sh)
        rewards = []
        for answer in ("42", "7", "42"):
            ws = r.open(SPEC)
            ws.exec(f"echo {answer} > answer.txt")
            tree = ws.seal()
            r.release(ws)
            rewards.append(verify(SPEC, tree, tests, graders=r).reward)
            time.sleep(0.7)  # a late writer would have written by now
        assert rewards == [1.0, 0.0, 1.0]
        assert r.reused >= 3  # agents' runtimes and graders' came back
    assert not any(leftovers(os.getpid()).values())


def test_a_runtime_that_failed_is_not_recycled_and_the_parked_are_bounded():
    with Recycler(max_idle=1) as r:
        broken = r.open(SPEC)
        os.kill(broken.proc.pid, 9)  # the runtime dies under its workspace
        with pytest.raises(WorkspaceError, match="ended"):
            broken.exec("true")
        assert broken.broken
        r.release(broken)
        a, b = r.open(SPEC), r.open(SPEC)
        r.release(a)
        r.release(b)
        time.sleep(1.0)
        assert r.parked() == 1  # one parked, the other closed
        last = r.open(SPEC)
        assert last.exec("echo ok").output.strip() == "ok"
        last.close()
    assert not any(leftovers(os.getpid()).values())


def test_a_forked_child_never_uses_its_parents_parked_runtimes():
    """The rollout worker process is forked with the env: its recycler parks and runs its own; the parent's
    parked runtimes stay the parent's."""
    r = Recycler()
    try:
        ws = r.open(SPEC)
        r.release(ws)
        _wait_parked(r, 1)
        parent_pid = r._parked[SPEC.limits][0].proc.pid
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            code = 1
            try:
                mine = r.open(SPEC)  # not the parent's parked runtime: a fresh one from this process's zygote
                ok = mine.proc.pid != parent_pid and r.parked() == 0 and mine.exec("echo hi").output == "hi\n"
                r.release(mine)
                _wait_parked(r, 1)  # the child's own closer thread ran
                r.close()
                code = 0 if ok else 2
            finally:
                os.write(write, bytes([code]))
                os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"\0"
        os.waitpid(child, 0)
        assert r.parked() == 1
        back = r.open(SPEC)
        assert back.proc.pid == parent_pid
        back.close()
    finally:
        r.close()
    assert not any(leftovers(os.getpid()).values())


def test_a_parked_runtime_ends_by_itself_after_park_s():
    """An env left open between runs does not hold runtimes: parked ones end after ``park_s`` unused."""
    with Recycler(park_s=0.5) as r:
        ws = r.open(SPEC)
        r.release(ws)
        _wait_parked(r, 1)
        deadline = time.monotonic() + 15
        while r.parked():
            assert time.monotonic() < deadline, "the parked runtime did not end"
            time.sleep(0.1)
        assert not any(leftovers(os.getpid()).values()) or _clean(15)
        fresh = r.open(SPEC)  # nothing parked: a new runtime
        assert r.reused == 0 and fresh.exec("echo ok").output == "ok\n"
        fresh.close()


def test_a_grader_taken_from_the_park_outlives_park_s():
    """A bare grader taken from a parked runtime is held (a pre-started grader waits for its episode's tree) longer
    than ``park_s``: taking it made it a workspace of its own idle limit, so the tree and the grade still reach it
    (before: the runtime ended at its park deadline and the grade failed, "its runtime closed its pipe")."""
    with Recycler(park_s=0.5) as r:
        ws = r.open(SPEC)
        ws.exec("echo hi > /app/x")
        tree = ws.seal()
        r.release(r.acquire(SPEC))
        _wait_parked(r, 1)
        grader = r.acquire(SPEC)
        assert r.reused == 1
        time.sleep(1.5)  # three times park_s
        grader.receive(tree)
        assert grader.exec("cat /app/x").output == "hi\n"
        grader.close()
        ws.close()
    assert _clean(15)


def _clean(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(leftovers(os.getpid()).values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_terminal_episodes_score_the_same_recycled_or_not():
    """Terminal-v0 with recycled runtimes (the default) and with ``recycle=False``: the same episodes (the oracle's
    and a no-op's, several tasks) get the same rewards and records, and closing either env leaves nothing."""
    from environments.terminal.env import TerminalEnv

    records = []
    for recycle in (True, False):
        env = TerminalEnv(difficulty=1, max_turns=2, recycle=recycle)
        assert isinstance(env.session.closer, Recycler) == recycle and (env.graders is not None) == recycle
        got = []
        try:
            for seed in range(4):
                for answer in ("oracle", "noop"):
                    env.reset(seed=seed)
                    action = env.reference_answer(env.task) if answer == "oracle" else \
                        '<tool_call>{"name": "bash", "arguments": {"command": "touch stray"}}</tool_call>\n' \
                        '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
                    _, reward, terminated, _, info = env.step(action)
                    record = info["trajectory_info"]
                    got.append((env.task.id, answer, reward, record["commands"], record["diff"],
                                record["verifier"]["reward"]))
            if recycle:
                assert env.session.closer.reused > 0
        finally:
            env.close()
        records.append(got)
    assert records[0] == records[1]
    assert [r[2] for r in records[0]] == [1.0, 0.0] * 4
    assert not any(leftovers(os.getpid()).values())


def test_end_all_parked_ends_every_recyclers_parked_runtimes_and_they_keep_working():
    from sandbox.workspace.recycle import end_all_parked

    a, b = Recycler(), Recycler()
    try:
        for r in (a, b):
            r.release(r.open(SPEC))
            _wait_parked(r, 1)
        end_all_parked()
        assert a.parked() == b.parked() == 0 and _clean(15)
        ws = a.open(SPEC)  # still open: a fresh runtime
        assert a.reused == 0 and ws.exec("echo ok").output == "ok\n"
        ws.close()
    finally:
        a.close()
        b.close()
    assert not any(leftovers(os.getpid()).values())


def test_end_parked_right_after_release_ends_the_runtime_whose_reset_had_not_begun():
    """A command that ends its workspaces the moment its last episode is released (``agentrl`` at the end of
    every command) must not miss one whose reset had not begun: it would stay parked ``park_s`` more."""
    with Recycler() as r:
        for _ in range(3):
            r.release(r.open(SPEC))
            r.end_parked()  # before the reset's thread has picked the workspace up
            time.sleep(0.5)  # a reset it missed would land by now
            assert r.parked() == 0 and _clean(0.5), leftovers(os.getpid())
    assert not any(leftovers(os.getpid()).values())
