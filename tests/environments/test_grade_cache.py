"""The grade cache: one grade per distinct final tree of a task, never a verdict for a tree it was not
given (the digest sees contents, modes, links and directories; not times), never a cached failure."""

from __future__ import annotations

import threading
import time

import pytest
from wscheck import leftovers

import agentrl
from agentrl.rollout.env_pool import clone_env
from environments.grade_cache import GradeCache
from environments.tool_parsers import render_calls
from sandbox.workspace import WorkspaceSpec, open_workspace
from sandbox.workspace.grading import Verdict


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    yield
    assert not leftovers()


def sealed_digest(*commands: str) -> str:
    with open_workspace(WorkspaceSpec(name="digest"), "local") as ws:
        for c in commands:
            assert ws.exec(c).exit_code == 0, c
        return ws.seal().digest


def test_the_digest_sees_contents_modes_links_and_directories_but_not_times():
    base = sealed_digest("printf 'a\\n' > /app/f")
    assert len(base) == 64
    assert sealed_digest("printf 'a\\n' > /app/f", "touch -d '2001-01-01' /app/f") == base  # only its time
    for changed in ("printf 'b\\n' > /app/f", "printf 'a\\n' > /app/f; chmod 755 /app/f",
                    "printf 'a\\n' > /app/f; ln -s f /app/g", "printf 'a\\n' > /app/f; mkdir /app/d",
                    "printf 'a\\n' > /app/F", "printf 'a\\n' > /app/f; cp /app/f /app/g"):
        assert sealed_digest(changed) != base, changed
    # a hard link and a copy hold the same bytes but restore apart (a write to one shows in the other)
    copied = sealed_digest("printf 'a\\n' > /app/f; cp /app/f /app/g")
    assert sealed_digest("printf 'a\\n' > /app/f; ln /app/f /app/g") != copied
    assert sealed_digest("printf 'a\\n' > /app/f; cp /app/f /app/g", "touch -d '2001-01-01' /app/g") == copied


def test_same_tree_graded_once_a_different_tree_graded_again():
    # a family whose oracle writes the same bytes every time (an archive's would hold build times: other trees)
    env = agentrl.make("agentrl/Terminal-v0", difficulty=1, split="all", families=["sort_dedup"])
    try:
        task = env.sample_task(env.np_random)
        right = env.reference_answer(task)
        rewards = []
        for action in (right, right, render_calls(env.tool_parser, [("submit", {})]), right):
            e = clone_env(env)  # an episode's copy, as the executors make one
            e.reset(options={"task": task})
            rewards.append(e.step(action)[1])
        assert rewards == [1.0, 1.0, 0.0, 1.0]
        # the oracle's tree once; the untouched tree never (a file check fails on the task's files)
        assert env.grades.stats() == {"hits": 2, "misses": 1}
    finally:
        env.close()


def test_off_grades_every_tree():
    env = agentrl.make("agentrl/Terminal-v0", difficulty=1, split="all", grade_cache=False)
    try:
        assert env.grades is None
        task = env.sample_task(env.np_random)
        right = env.reference_answer(task)
        env.reset(options={"task": task})
        assert env.step(right)[1] == 1.0
    finally:
        env.close()


def test_a_grade_in_flight_is_awaited_and_a_failed_one_never_kept():
    cache = GradeCache()
    runs = []

    def slow_ok() -> Verdict:
        runs.append("ok")
        time.sleep(0.2)
        return Verdict(1.0)

    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.grade("t", "d" * 64, slow_ok))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs == ["ok"] and [v.reward for v in got] == [1.0] * 8
    assert cache.stats() == {"hits": 7, "misses": 1}

    failing = [Verdict(None, error="the verifier ran past its 1 s timeout"), Verdict(0.0)]
    first = cache.grade("t", "e" * 64, lambda: failing.pop(0))
    assert first.error and cache.grade("t", "e" * 64, lambda: failing.pop(0)).reward == 0.0  # graded again
    assert cache.grade("u", "d" * 64, lambda: Verdict(0.5)).reward == 0.5  # another task: its own grade
    assert cache.grade("t", None, lambda: Verdict(0.25)).reward == 0.25  # no digest: always graded


def test_the_cache_is_bounded_and_shared_by_copies():
    import copy

    cache = GradeCache(capacity=2)
    for k in range(3):
        cache.grade("t", str(k), lambda k=k: Verdict(float(k)))
    assert list(cache.verdicts) == [("t", "1"), ("t", "2")]
    assert copy.deepcopy(cache) is cache


def test_graders_started_ahead_grade_the_episodes_of_the_env_and_its_copies():
    """``grader_pool=1`` (issue 45: grading without a second cold build): every grade of the env and its
    per-episode copies restores the sealed tree into a grading workspace started ahead; the rewards are those
    of fresh ones; a copy's close leaves the pool to the env that made it, whose close ends it."""
    env = agentrl.make("agentrl/Terminal-v0", difficulty=1, split="all", grade_cache=False, grader_pool=1)
    try:
        tasks = [env.sample_task(env.np_random) for _ in range(3)]
        rewards = []
        for task in tasks:
            wrong = render_calls(env.tool_parser, [("bash", {"command": "echo 0 > wrong.txt"}), ("submit", {})])
            for action in (env.reference_answer(task), wrong):  # two trees that are graded (neither untouched)
                e = clone_env(env)
                assert e.graders is env.graders
                e.reset(options={"task": task})
                rewards.append(e.step(action)[1])
                e.close()  # a copy's close: the pool stays
        assert rewards == [1.0, 0.0] * 3
        assert env.graders.hits + env.graders.misses == 6 and env.graders.misses == 1 and not env.graders.closed
    finally:
        env.close()
    assert env.graders.closed and not leftovers()
    with pytest.raises(agentrl.env.EnvError, match="grader_pool >= 0"):
        agentrl.make("agentrl/Terminal-v0", grader_pool=-1)
