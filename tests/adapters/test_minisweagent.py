"""mini-swe-agent, unchanged, on our workspace tasks: its commands run in our workspace through the
environment class we ship (the graded tree shows their effect), and an episode against the tiny model
through the policy endpoint is recorded token-exact and trains one step (``env.id: minisweagent:...``)."""

from __future__ import annotations

import json
import os

import pytest

from environments.adapters.minisweagent import SUBMIT_LINE, WorkspaceEnvironment, quiet_imports

quiet_imports()  # before mini-swe-agent is imported: no banner, litellm offline
pytest.importorskip("minisweagent")

import agentrl  # noqa: E402
from agentrl.env import EnvError  # noqa: E402
from sandbox.workspace.leftovers import leftovers as host_leftovers  # noqa: E402
from tests.adapters.conftest import train  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    yield
    left = {kind: items for kind, items in host_leftovers(os.getpid()).items() if items}  # this process's only
    assert not left


def scripted_run(env, task, commands: list[str]) -> tuple[dict, float]:
    """mini-swe-agent's DefaultAgent with its own scripted test model, our environment class from its config."""
    quiet_imports()
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model
    from minisweagent.models.test_models import make_output

    t = env.inner.harbor_task(task)
    outputs = [make_output(f"THOUGHT: next\n\n```mswea_bash_command\n{c}\n```", [{"command": c}]) for c in commands]
    ws_env = get_environment({**env.config["environment"], "task_dir": str(t.path)})
    assert isinstance(ws_env, WorkspaceEnvironment)  # named in mini-swe-agent's config by its import path
    try:
        agent = DefaultAgent(get_model(config={"model_name": "scripted", "model_class": "deterministic",
                                               "outputs": outputs}), ws_env, **env.config["agent"])
        result = agent.run(t.instruction)
        tree = ws_env.seal()
    finally:
        ws_env.close()
    return result, env.inner.verify(t, tree).reward


@pytest.mark.slow
def test_its_commands_run_in_our_workspace_and_the_tree_is_graded() -> None:
    env = agentrl.make("minisweagent:agentrl/Terminal-v0", families=["count_files"])
    try:
        task = env.inner.task_named("terminal-count_files-d1-5")
        oracle = env.inner.generated(task).solution[0]
        result, reward = scripted_run(env, task, [oracle, f"echo {SUBMIT_LINE}"])
        assert result["exit_status"] == "Submitted" and reward == 1.0
        result, reward = scripted_run(env, task, ["ls -la", "echo 0 > answer.txt", f"echo {SUBMIT_LINE}"])
        assert result["exit_status"] == "Submitted" and reward == 0.0
        assert env.config["agent"]["system_template"].startswith("You are a helpful assistant")  # its own prompts
    finally:
        env.close()


def scripted_model(commands: list[str]):
    """mini-swe-agent's own deterministic test model, answering with one bash command per turn."""
    from minisweagent.models import get_model
    from minisweagent.models.test_models import make_output

    outputs = [make_output(f"THOUGHT: next\n\n```mswea_bash_command\n{c}\n```", [{"command": c}]) for c in commands]
    return get_model(config={"model_name": "scripted", "model_class": "deterministic", "outputs": outputs})


def inner_record(inner, task) -> dict:
    """The record of the inner workspace env's own episode on ``task`` (its reference answer, tool calls)."""
    inner.reset(options={"task": task})
    for _ in range(inner.max_turns):
        _, _, terminated, truncated, info = inner.step(inner.reference_answer(task))
        if terminated or truncated:
            return info["trajectory_info"]
    raise AssertionError("the reference episode did not end")


def test_an_episode_records_what_the_workspace_envs_record() -> None:
    """Issue 46, finding 8: mini-swe-agent episodes recorded no verifier output and no diff. Its result's
    ``trajectory_info`` has the inner env's keys and shapes: each command and its output, the final tree's
    diff, the verifier's reward, output and files, how it ended; a wrong answer is recorded too."""
    env = agentrl.make("minisweagent:agentrl/Terminal-v0", families=["count_files"])
    try:
        task = env.inner.task_named("terminal-count_files-d1-5")
        oracle = env.inner.generated(task).solution[0]
        result = env.run_agent(scripted_model(["ls", oracle, f"echo {SUBMIT_LINE}"]), task)
        rec, own = result["trajectory_info"], inner_record(env.inner, task)
        assert set(rec) == set(own) and set(rec["verifier"]) == set(own["verifier"])
        assert (result["exit_status"], result["reward"], rec["ended_by"]) == ("Submitted", 1.0, "Submitted")
        assert rec["commands"] == ["ls", oracle, f"echo {SUBMIT_LINE}"] and len(rec["outputs"]) == 3
        assert "cache" in rec["outputs"][0] and rec["outputs"][2].strip() == SUBMIT_LINE
        assert rec["diff"] == own["diff"] and "+++ b/app/answer.txt" in rec["diff"]  # the same final tree
        assert rec["verifier"] == {**own["verifier"], "reward": 1.0} and rec["verifier"]["output"].strip()
        wrong = env.run_agent(scripted_model(["echo 0 > answer.txt", f"echo {SUBMIT_LINE}"]), task)
        assert wrong["reward"] == 0.0 and wrong["trajectory_info"]["verifier"]["reward"] == 0.0
        assert "+0" in wrong["trajectory_info"]["diff"] and wrong["trajectory_info"]["verifier"]["output"]
        json.dumps(result)  # JSON data, as samples.jsonl keeps it
    finally:
        env.close()


def test_not_a_workspace_env_is_a_one_line_error() -> None:
    with pytest.raises(EnvError, match="not a workspace env"):
        agentrl.make("minisweagent:agentrl/Arithmetic-v0")


@pytest.mark.slow
def test_an_episode_on_repo_repair_against_the_tiny_model_trains_one_step(tmp_path, tiny) -> None:
    """mini-swe-agent runs on a RepoRepair task against the tiny model through the endpoint, in our
    workspace; its completions are the trajectory (token-exact, each with the engine's log-probs), its
    record (commands, outputs, diff, verifier) is in each logged episode's info, and the run trains a step."""
    env = {"id": "minisweagent:agentrl/RepoRepair-v0",
           "kwargs": {"projects": ["cachetools"], "step_limit": 2, "concurrency": 2}}
    steps = train(tmp_path, tiny, env, "data.prompts_per_step=1", "rollout.n_samples=2", "learner.total_steps=1",
                  "rollout.max_new_tokens=24", "data.eval_tasks=1", "env.eval_kwargs={split: all}",  # cachetools: all in train
                  expect_steps=[1])
    assert steps[0]["samples_used"] == 2
    rows = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert rows and all(r["turns"] >= 1 and not r["failed"] for r in rows)  # the logged episodes (held-out)
    assert all("mswea_bash_command" in r["prompt"] for r in rows)  # mini-swe-agent's own system prompt
    for r in rows:  # what the workspace envs record, where samples.jsonl keeps it and agentrl view shows it
        assert {"commands", "outputs", "diff", "verifier", "ended_by"} <= set(r["info"]), sorted(r["info"])
        assert len(r["info"]["commands"]) == len(r["info"]["outputs"]) and isinstance(r["info"]["diff"], str)
        assert r["info"]["verifier"]["reward"] == r["reward"] and r["info"]["verifier"]["output"]
    actions = [s for r in rows for s in r["segments"] if s["role"] == "action"]
    assert actions and all(len(s["logprobs"]) == len(s["token_ids"]) > 0 for s in actions)  # sampled tokens
