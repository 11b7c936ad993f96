"""The collective weight sync over Ray when an engine never joins: the run fails within
``cluster.sync_timeout_s`` with the protocol's one-line message, not a hang or a remote traceback."""

from __future__ import annotations

import time

import pytest

from agentrl.config import ActorGroupConfig
from agentrl.distributed.launch import ActorGroup
from agentrl.distributed.weight_sync import WeightSync
from agentrl.rollout.engines.weight_protocol import WeightSyncError

pytestmark = pytest.mark.slow


def actor_classes() -> tuple[type, type]:
    """A policy rank that really joins as rank 0 and an engine that never does (local: shipped by value)."""

    class Policy:
        def __init__(self, *, rank: int, world_size: int, threads: int) -> None:
            pass

        def address(self) -> tuple[str, int]:
            from agentrl.distributed.workers import free_address

            return free_address()

        def connect_weight_sync(self, kind, host, port, world_size, timeout_s, bucket_bytes) -> None:
            from agentrl.rollout.engines.weight_protocol import connect

            connect(kind, host, port, 0, world_size, timeout_s=timeout_s)

    class SilentEngine:
        def __init__(self, *, rank: int, world_size: int, threads: int) -> None:
            pass

        def connect_weight_sync(self, kind, host, port, rank_offset, world_size, timeout_s) -> None:
            return None  # crashed before joining, or cannot reach the policy's node

    return Policy, SilentEngine


def test_an_engine_that_never_joins_fails_the_setup_within_the_timeout(ray_cluster):
    policy_cls, engine_cls = actor_classes()
    policy = ActorGroup(policy_cls, ActorGroupConfig(num=1, cpus=0.25), "policy")
    engines = ActorGroup(engine_cls, ActorGroupConfig(num=1, cpus=0.25), "engines")
    try:
        start = time.perf_counter()
        with pytest.raises(WeightSyncError) as e:
            WeightSync(policy, engines, "gloo", timeout_s=3.0)
        assert time.perf_counter() - start < 60
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("weight sync (gloo) at ") and "rank 0 of 2 gave up after 3 s" in msg
    finally:
        policy.shutdown()
        engines.shutdown()
