"""openenv-core's own client (``GenericEnvClient`` over WebSocket), its runtime validator and plain HTTP
calls reset and step ``agentrl serve-env``. ``slow``: openenv-core takes ~9 CPU seconds to import."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("openenv")
pytestmark = pytest.mark.slow

from openenv.cli._validation import validate_running_environment  # noqa: E402
from openenv.core import GenericEnvClient  # noqa: E402
from servers import serve_env  # noqa: E402

from agentrl import make  # noqa: E402


def test_openenv_client_resets_and_steps_agentrl_arithmetic():
    local = make("agentrl/Arithmetic-v0")
    with serve_env("agentrl/Arithmetic-v0") as (url, _):
        assert validate_running_environment(url)["passed"]  # openenv's own runtime checks of a server
        with GenericEnvClient(base_url=url).sync() as env:
            first = env.reset(seed=11)
            text, info = local.reset(seed=11)
            assert first.observation["text"] == text and first.done is False
            result = env.step({"text": local.reference_answer(info["task"])})
            assert result.reward == 1.0 and result.done is True
            assert env.state()["step_count"] == 1
            env.reset(seed=12)
            assert env.step({"text": "not a number"}).reward == 0.0
        # plain HTTP, as OpenEnv's endpoints take it: /reset, then /step with the episode it started
        reset = httpx.post(url + "/reset", json={"seed": 11}).json()
        eid = reset["observation"]["info"]["episode_id"]
        step = httpx.post(url + "/step", json={"action": {"text": local.reference_answer(info["task"])},
                                               "episode_id": eid}).json()
        assert (step["reward"], step["done"]) == (1.0, True)


def test_openenv_client_plays_a_multi_turn_env():
    with serve_env("slow_envs:Guess") as (url, _), GenericEnvClient(base_url=url).sync() as env:
        env.reset(seed=3)
        low, high, seen = 0, 9, []
        for _ in range(4):
            guess = (low + high) // 2
            r = env.step({"text": str(guess)})
            seen.append(r.observation["text"])
            if r.done:
                break
            low, high = (guess + 1, high) if r.observation["text"] == "higher" else (low, guess - 1)
        assert r.done and r.reward == 1.0 and seen[-1] == ""


def test_openenv_client_solves_a_served_harbor_task():
    """A Harbor task served over OpenEnv's protocol: the client's reset shows the instruction, and its step
    (the oracle as tool calls) runs in a workspace on the server's side and is graded there."""
    from sandbox.workspace.leftovers import leftovers

    local = make("harbor:examples/tasks")
    with serve_env("harbor:examples/tasks") as (url, proc), GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(seed=5)
        text, info = local.reset(seed=5)
        assert first.observation["text"] == text and first.done is False
        result = env.step({"text": local.reference_answer(info["task"])})
        assert result.reward == 1.0 and result.done is True
        server_pid = proc.pid
    assert not any(leftovers(server_pid).values())
