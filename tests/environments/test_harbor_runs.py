"""``harbor:`` episodes through the multi-turn executor (token-exact, the record in the trajectory's info,
failed graders out of the loss), and ``agentrl tasks`` on the command line."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from harborkit import DOCKER, EXAMPLES, ROOT, ScriptedPolicy, call, make_task
from wscheck import leftovers

import agentrl
from agentrl.evaluation.tasks import check_tasks, list_tasks
from agentrl.models import train_tokenizer
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.experience import Experience

LOOK = call("bash", command="ls logs && grep -c ERROR logs/server-1.log")


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    yield
    assert not leftovers()


@pytest.fixture(scope="module")
def examples():
    return agentrl.make(f"harbor:{EXAMPLES}", max_turns=4)


@pytest.fixture(scope="module")
def tok(examples):
    task = next(t for t in examples.tasks if t.id == "log-error-summary")
    corpus = [m["content"] for m in task.prompt] + [LOOK, examples.reference_answer(task), "<tool_response>"]
    return train_tokenizer(corpus * 3, 600)


@pytest.mark.parametrize("chat,backend", [(False, "local"), (True, "local"),
                                                pytest.param(False, "docker", marks=DOCKER)])
def test_scripted_tool_calls_run_in_workspaces_token_exact(examples, tok, chat: bool, backend: str) -> None:
    """Turn 1 looks around, turn 2 is the oracle's work as tool calls: the graded tree holds its effect."""
    env = examples if backend == "local" else agentrl.make(f"harbor:{EXAMPLES}", max_turns=4, backend=backend)
    task = next(t for t in env.tasks if t.id == "log-error-summary")
    script = [LOOK, env.reference_answer(task)]
    engine = ScriptedPolicy(tok, lambda k: script[k])
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=512), n_samples=2, chat_template=chat)
    trajs = ex.run([task])
    for traj in trajs:
        assert traj.reward == 1.0 and traj.terminated and traj.info["end_reason"] == "terminated"
        assert [s.is_action for s in traj.segments] == [True, False, True] and traj.info["turns"] == 2
        # token-in/token-out: turn 2 continued from exactly the prompt, turn 1 and the tool output
        assert engine.calls[1][0] == traj.prompt_ids + traj.segments[0].token_ids + traj.segments[1].token_ids
        feedback = tok.decode(traj.segments[1].token_ids)
        assert "<tool_response>\nserver-1.log\nserver-2.log\nserver-3.log\n" in feedback
        info = traj.info
        assert info["commands"][0] == "ls logs && grep -c ERROR logs/server-1.log"
        assert info["commands"][-2:] == ["bash /tmp/solution/solve.sh", "submit"]
        assert "+++ b/app/error_summary.txt" in info["diff"] and "+9 billing" in info["diff"]
        assert info["verifier"]["reward"] == 1.0 and info["verifier"]["output"] == "ok\n"
        assert info["ended_by"] == "submit" and not info.get("failed")
        calls = info["tool_calls"]  # per turn, as the run browser shows them
        assert [(c["turn"], c["name"]) for c in calls] == [(0, "bash"), (1, "write_file"), (1, "bash"), (1, "submit")]
        assert calls[0]["result"].startswith("server-1.log") and all(c["error"] is None for c in calls)
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)
    assert exp.num_action_tokens == sum(t.num_action_tokens for t in trajs)


def test_a_grader_that_cannot_run_fails_the_sample(tmp_path: Path, tok) -> None:
    make_task(tmp_path, "broken", test_sh="#!/bin/bash\nexit 0\n")
    env = agentrl.make(f"harbor:{tmp_path}")
    engine = ScriptedPolicy(tok, lambda k: call("bash", command="echo 42 > out.txt") + call("submit"))
    [traj] = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=256)).run([env.tasks[0]])
    assert traj.info["failed"] and traj.info["end_reason"] == "failed" and traj.reward == 0.0
    assert "wrote no /logs/verifier/reward.txt" in traj.info["error"]
    assert traj.info["commands"] == ["echo 42 > out.txt", "submit"] and "+42" in traj.info["diff"]


def test_a_task_that_cannot_build_fails_the_sample(tmp_path: Path, tok) -> None:
    make_task(tmp_path, "nobuild", dockerfile="FROM ubuntu:24.04\nRUN exit 9\n")
    env = agentrl.make(f"harbor:{tmp_path}")
    engine = ScriptedPolicy(tok, lambda k: call("bash", command="ls"))
    [traj] = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64)).run([env.tasks[0]])
    assert traj.info["failed"] and "RUN at line 2 failed" in traj.info["error"] and traj.reward == 0.0


def _cli(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.cli", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def test_tasks_check_and_list_on_the_command_line(tmp_path: Path) -> None:
    make_task(tmp_path, "good")
    make_task(tmp_path, "wrong-oracle", solve="echo 41 > /app/out.txt")
    make_task(tmp_path, "noop-passes", expected="")
    make_task(tmp_path, "no-solution", solve=None)
    make_task(tmp_path, "cannot-run", dockerfile="FROM ubuntu:24.04\nEXPOSE 80\n")
    out, pid = _cli("tasks", "check", str(tmp_path), "--json", "--jobs", "2")
    assert out.returncode == 1, out.stderr
    rows = {r["task"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert all(list(r) == ["task", "oracle", "noop", "seconds", "error"] for r in rows.values())
    assert (rows["good"]["oracle"], rows["good"]["noop"], rows["good"]["error"]) == (1.0, 0.0, None)
    assert rows["good"]["seconds"] > 0
    assert (rows["wrong-oracle"]["oracle"], rows["wrong-oracle"]["noop"]) == (0.0, 0.0)
    assert rows["noop-passes"]["noop"] == 1.0
    assert rows["no-solution"]["oracle"] is None and "no solution/solve.sh" in rows["no-solution"]["error"]
    assert rows["cannot-run"]["oracle"] is None and "EXPOSE is not supported" in rows["cannot-run"]["error"]
    assert not leftovers(owners=(pid,))
    table = io.StringIO()
    assert check_tasks(str(tmp_path / "good"), out=table) == 0
    assert table.getvalue().splitlines()[1].split()[:3] == ["good", "1.00", "0.00"]
    assert "1 of 1 task(s) pass" in table.getvalue()
    listing = io.StringIO()
    assert list_tasks(str(tmp_path), out=listing) == 1
    assert "4 task(s)" in listing.getvalue() and re.search(r"cannot-run +CANNOT RUN: ", listing.getvalue())
    assert "no solution" in listing.getvalue()
    missing, _ = _cli("tasks", "check", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.startswith("agentrl tasks: error:") \
        and len(missing.stderr.strip().splitlines()) == 1


# twelve tasks, four workspaces each: ~8 s locally (busy 2-core machine), ~80 s on Docker (slow tier)
@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=[*DOCKER, pytest.mark.slow])])
def test_every_shipped_task_passes_tasks_check(backend: str) -> None:
    out, pid = _cli("tasks", "check", "examples/tasks", "--json", "--jobs", "2", "--backend", backend)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) >= 10 and out.returncode == 0, out.stdout + out.stderr
    assert all(r["oracle"] == 1.0 and r["noop"] == 0.0 and r["error"] is None for r in rows), rows
    assert not leftovers(owners=(pid,))


@pytest.mark.slow  # a tiny model, two GRPO steps, every episode in its own workspace: ~1 min
def test_a_tiny_model_trains_two_steps_on_the_examples_from_the_cli(tmp_path: Path) -> None:
    out, pid = _cli("train", "examples/configs/harbor_grpo_tiny.yaml", "log.samples_every=1",
                    "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss/policy_loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["failed/count"] == 0 and r["episode/end_reason/failed"] == 0 for r in steps)  # all graded
    records = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train and all(r["info"]["verifier"]["error"] is None and r["info"]["ended_by"] for r in train)
    assert not leftovers(owners=(pid,))


@pytest.mark.slow  # a warm start of ~50-100 SFT steps, then two GRPO steps: ~1-2 min
def test_a_warm_started_tiny_model_solves_a_task_through_its_own_tool_calls(tmp_path: Path) -> None:
    """The tiny model learns the reference action (write solve.sh, run it, submit) on one task; its greedy
    tool calls then run in a workspace and the verifier sees their effect (/app/out.txt reads 42): the
    held-out reward is 1.0 only if the model's commands really ran in the graded tree."""
    make_task(tmp_path / "tasks", "echo-42")
    out, pid = _cli("train", "examples/configs/harbor_grpo_tiny.yaml", f"env.id=harbor:{tmp_path / 'tasks'}",
                    "env.kwargs.system_prompt=Work in {workdir}.", "model.warm_start.enabled=true",
                    "model.warm_start.max_steps=300", "model.warm_start.batch_size=1",
                    "model.warm_start.eval_every=25", "model.warm_start.cache=false", "rollout.max_new_tokens=160",
                    "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "held-out accuracy: after warm start 1.000" in out.stdout, out.stdout
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss/policy_loss" in r] == [1, 2]
    records = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    solved = [r for r in records if r["split"] == "eval" and r["reward"] == 1.0]
    assert solved, records  # the greedy model's own calls, as they ran, and the tree they left
    assert solved[0]["info"]["commands"][-2:] == ["bash /tmp/solution/solve.sh", "submit"]
    assert "+++ b/app/out.txt" in solved[0]["info"]["diff"] and "+42" in solved[0]["info"]["diff"]
    assert not leftovers(owners=(pid,))


def test_the_single_turn_executor_keeps_the_record_and_fails_a_broken_grader(tmp_path: Path, tok) -> None:
    """With max_turns=1 the harbor env runs on the single-turn executor (the warm start's dev evaluation
    does too): one action, graded; the record and a failed grader come through the same way."""
    from agentrl.rollout.executors import SingleTurnExecutor

    make_task(tmp_path, "echo-42")
    make_task(tmp_path, "broken", test_sh="#!/bin/bash\nexit 0\n")
    env = agentrl.make(f"harbor:{tmp_path}", max_turns=1)
    engine = ScriptedPolicy(tok, lambda k: call("bash", command="echo 42 > out.txt"))
    good, bad = SingleTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=256)).run(
        [next(t for t in env.tasks if t.id == name) for name in ("echo-42", "broken")])
    assert good.reward == 1.0 and good.info["commands"] == ["echo 42 > out.txt"] and good.info["ended_by"] == "max_turns"
    assert good.info["tool_calls"] == [{"turn": 0, "name": "bash", "arguments": {"command": "echo 42 > out.txt"},
                                        "result": "(no output)", "error": None}]
    assert bad.reward == 0.0 and bad.info["failed"] and "wrote no /logs/verifier/reward.txt" in bad.info["error"]
