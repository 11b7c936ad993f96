"""Ray faults: a rollout-engine actor killed mid-step stops the run with a clear message naming the
last checkpoint, and ``--resume`` continues from it with no step lost or repeated.

Runs on a local 2-CPU Ray cluster (``ray.init``/``ray.shutdown``, never ``ray stop``) with the
torch DDP strategy (no DeepSpeed op build) and a tiny model.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")

from agentrl.config import ClusterConfig, load_config  # noqa: E402
from agentrl.distributed.launch import init_ray  # noqa: E402
from agentrl.runs.checkpoint import latest_checkpoint, load_trainer_state  # noqa: E402

TINY = [
    "model.path=tiny", "model.device=cpu", "model.tiny.hidden_size=64", "model.tiny.num_heads=2",
    "model.tiny.num_layers=2", "model.tiny.intermediate_size=128", "env.id=agentrl/Arithmetic-v0",
    "env.kwargs={digits: 1, operators: '+', terms: 2, template: '{expr}=', bare_answer: true}",
    "data.prompts_per_step=4", "data.eval_tasks=4", "rollout.n_samples=4", "rollout.max_new_tokens=4",
    "learner.micro_batch_size=8", "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false",
    "cluster.mode=ray", "cluster.num_cpus=2", "cluster.strategy=ddp", "cluster.policy.cpus=0.5",
    "cluster.engines.cpus=0.5", "checkpoint.every=1", "learner.total_steps=4",
]


@pytest.fixture(scope="module")
def ray_cluster(ray_lock):
    import ray

    init_ray(ClusterConfig(mode="ray", num_cpus=2))
    yield
    ray.shutdown()


@pytest.mark.slow
def test_engine_actor_killed_mid_step_stops_clearly_then_resumes(ray_cluster, tmp_path):
    import ray

    from agentrl.distributed.trainer import RayTrainer

    class KillEngineAtStep3(RayTrainer):
        """Kills the rollout engine actor at the start of step 3's rollout (after its tasks are drawn)."""

        def rollout(self, tasks):
            if self.step_idx == 2:
                ray.kill(self.engine.group.actors[0], no_restart=True)
            return super().rollout(tasks)

    cfg = load_config(None, [*TINY, f"log.run_dir={tmp_path}/{{name}}"])
    run = tmp_path / "run"
    with pytest.raises(RuntimeError) as e:
        KillEngineAtStep3(cfg, run_dir=run).fit()
    msg = str(e.value)
    assert "Ray actor died at step 3" in msg and "step_000002" in msg and f"--resume {run}" in msg
    assert load_trainer_state(latest_checkpoint(run))["step"] == 2
    summary = RayTrainer(cfg, run_dir=run, resume=True).fit()
    assert summary["steps"] == 4
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()
             if "reward/mean" in json.loads(x)]
    assert steps == [1, 2, 3, 4]
