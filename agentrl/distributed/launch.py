"""Ray launch and actor groups: a placement group per group, one bundle per actor.

``init_ray`` joins ``cluster.address`` (multi-node: ``ray start --head`` on one node, ``ray start
--address=HEAD:6379`` on the others) or starts a local cluster. The environment variables the CPU
stack needs travel to every worker through the job's ``runtime_env``.
"""

from __future__ import annotations

import os
from typing import Any

from agentrl.config import ActorGroupConfig, ClusterConfig

PASS_ENV = (
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE", "DS_ACCELERATOR", "MASTER_ADDR",
    "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_HOST_IP", "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_ALLOW_INSECURE_SERIALIZATION", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "AGENTRL_CACHE",
    "NCCL_DEBUG", "HF_HOME",
)
PLACEMENT_TIMEOUT_S = 120.0
GROUP_ENV = {"engines": {"MALLOC_ARENA_MAX": "1"}}
"""Extra environment of a group's worker processes (a variable the driver sets wins). Engines: a
streamed weight sync reloads in a thread of the actor, and that thread's own glibc malloc arena made
the reload ~1.5x slower than the same reload on the actor's main thread (``bench/weight_sync.py``);
with one arena the two take the same time."""


def job_env() -> dict[str, str]:
    """The driver's variables every worker needs (``PASS_ENV``)."""
    return {k: os.environ[k] for k in PASS_ENV if k in os.environ}


def group_options(name: str) -> dict[str, Any]:
    """Ray actor options giving group ``name`` its ``GROUP_ENV`` beside the job's variables ({} when
    it has none, or when the driver sets them all itself)."""
    extra = {k: v for k, v in GROUP_ENV.get(name, {}).items() if k not in os.environ}
    return {"runtime_env": {"env_vars": {**job_env(), **extra}}} if extra else {}


def init_ray(cluster: ClusterConfig) -> None:
    """Join ``cluster.address`` or start a local cluster (no-op when Ray is already initialised)."""
    from agentrl.preflight import require

    require("ray", "cluster.mode=ray")
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = dict(runtime_env={"env_vars": job_env()}, include_dashboard=False,
                                  log_to_driver=True, configure_logging=False)
    if cluster.address:
        ray.init(address=cluster.address, **kwargs)
    else:
        ray.init(num_cpus=cluster.num_cpus, num_gpus=cluster.num_gpus, **kwargs)


class ActorGroup:
    """``num`` actors of ``cls`` in one placement group (PACK: together where they fit).

    Actor ``i`` is built as ``cls(*args, rank=i, world_size=num, threads=...)``.
    """

    def __init__(self, cls: type, spec: ActorGroupConfig, name: str, *args: Any) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if spec.num < 1:
            raise ValueError(f"cluster.{name}.num must be >= 1, got {spec.num}")
        bundle = {"CPU": spec.cpus, **({"GPU": spec.gpus} if spec.gpus else {})}
        self.name, self.spec = name, spec
        self.pg = placement_group([dict(bundle) for _ in range(spec.num)], strategy="PACK")
        try:
            ray.get(self.pg.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(self.pg)
            raise RuntimeError(f"cannot place {spec.num} {name} actor(s) of {bundle} within "
                               f"{PLACEMENT_TIMEOUT_S:.0f} s; cluster has {ray.cluster_resources()}, "
                               f"free {ray.available_resources()}") from None
        remote = ray.remote(cls)
        threads = max(1, int(spec.cpus))
        env = group_options(name)
        self.actors = [
            remote.options(num_cpus=spec.cpus, num_gpus=spec.gpus, scheduling_strategy=PlacementGroupSchedulingStrategy(
                self.pg, placement_group_bundle_index=i), **env).remote(*args, rank=i, world_size=spec.num,
                                                                        threads=threads)
            for i in range(spec.num)]

    def call_async(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method`` on every actor; returns the object refs."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method`` on every actor and wait: one result per actor, in rank order."""
        import ray

        return ray.get(self.call_async(method, *args, **kwargs))

    def shutdown(self) -> None:
        """Kill the actors and free the placement group."""
        import ray

        for a in self.actors:
            ray.kill(a)
        ray.util.remove_placement_group(self.pg)
        self.actors = []
