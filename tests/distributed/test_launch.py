"""Actor groups on a real local Ray cluster: the per-group environment (``launch.GROUP_ENV``)."""

from __future__ import annotations

import os

import pytest

from agentrl.config import ActorGroupConfig
from agentrl.distributed.launch import GROUP_ENV, ActorGroup, group_options


def env_probe() -> type:
    """An actor class reporting its process's environment (local, so Ray ships it by value)."""

    class EnvProbe:
        def __init__(self, *, rank: int, world_size: int, threads: int) -> None:
            self.rank = rank

        def env(self, names: list[str]) -> dict[str, str | None]:
            return {n: os.environ.get(n) for n in names}

    return EnvProbe


@pytest.mark.slow
def test_engines_get_one_malloc_arena_and_keep_the_job_environment(ray_cluster, monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    names = ["MALLOC_ARENA_MAX", "AGENTRL_CACHE"]
    spec = ActorGroupConfig(num=1, cpus=0.25)
    engines, policy = ActorGroup(env_probe(), spec, "engines"), ActorGroup(env_probe(), spec, "policy")
    try:
        (seen,) = engines.call("env", names)
        (plain,) = policy.call("env", names)
    finally:
        engines.shutdown()
        policy.shutdown()
    assert seen["MALLOC_ARENA_MAX"] == "1"
    assert plain["MALLOC_ARENA_MAX"] is None  # only the engines' reload thread needs it
    # the job's variables (launch.PASS_ENV) still reach the engines beside their own
    assert seen["AGENTRL_CACHE"] == os.environ["AGENTRL_CACHE"] == plain["AGENTRL_CACHE"]


def test_group_options_add_only_what_the_driver_does_not_set(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("AGENTRL_CACHE", "/somewhere")
    assert GROUP_ENV["engines"] == {"MALLOC_ARENA_MAX": "1"}
    env = group_options("engines")["runtime_env"]["env_vars"]
    assert env["MALLOC_ARENA_MAX"] == "1" and env["AGENTRL_CACHE"] == "/somewhere"
    assert group_options("policy") == {}  # no extra environment: the job's runtime_env applies as is
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert group_options("engines") == {}  # the driver's own value is not overridden
