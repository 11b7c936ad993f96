"""``RayTrainer``: the single-process driver's stages over Ray actor groups (``cluster.mode: ray``).

Only wiring changes: ``build_*`` return handles (:mod:`agentrl.distributed.proxies`) with the
interfaces the stages already call, so ``Trainer.step`` runs unchanged — tasks, rollout on the
engine fleet, reward model, experience, reference / critic / old log-probs, advantages, update on
the policy ranks, weight sync. Two stages have a distributed implementation: ``sync_weights``
(policy rank 0 -> object store -> engines, or a bucketed NCCL / gloo broadcast; timed as ``time/sync`` every step) and
``save`` (the driver's copy of the policy is refreshed from rank 0 first). The driver keeps the
environments, the executor and a CPU copy of the policy for checkpoints; with ``cluster.env_workers.num``
the executor runs in env-worker actors instead. With ``rollout.async`` the engines are versioned actors
that load each new policy between two requests, the learner publishes weights without waiting, and the
rollout worker thread makes batches ahead within ``rollout.max_staleness`` (see
:mod:`agentrl.distributed.async_ray`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config import ConfigError, RunConfig
from agentrl.distributed import async_ray, workers
from agentrl.distributed.launch import ActorGroup, init_ray
from agentrl.distributed.proxies import EngineFleet, PolicyGroup, RemoteObject
from agentrl.distributed.weight_sync import WeightSync
from agentrl.rollout.async_rollout import RolloutWorker
from agentrl.runs import checkpoint as ckpt
from agentrl.training.lora import is_lora, policy_weights
from agentrl.training.trainer import Trainer


class _AdaptersOff:
    """The LoRA reference over Ray: ``logprobs(exp)`` of the policy ranks with their adapters disabled."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer  # its learner (the policy group) is built after the reference

    def logprobs(self, exp: Any) -> Any:
        return self.trainer.learner.ref_logprobs(exp)


class RayTrainer(Trainer):
    """``Trainer`` whose models live in Ray actors (see the module docstring)."""

    def __init__(self, cfg: RunConfig, *, run_dir: str | Path | None = None, resume: bool = False,
                 doctor: Any = None, started: float | None = None) -> None:
        if cfg.learner.lora.r > 0 and cfg.cluster.strategy == "deepspeed" and cfg.cluster.zero_stage == 3:
            raise ConfigError("learner.lora with cluster.zero_stage=3: the adapters' merge needs whole base "
                              "weights; use zero_stage 0-2 (the frozen base is not partitioned anyway)")
        if cfg.cluster.colocate and (cfg.rollout.async_ or cfg.cluster.env_workers.num):
            raise ConfigError("rollout.async and cluster.env_workers need engines that stay awake while the policy "
                              "trains: set cluster.colocate=false")
        init_ray(cfg.cluster)
        self.groups: list[ActorGroup] = []
        self._resuming = resume
        self._weight_sync: WeightSync | None = None
        self.versions: async_ray.RemoteVersions | None = None  # rollout.async: the engines' policy versions
        try:
            super().__init__(cfg, run_dir=run_dir, resume=resume, doctor=doctor, started=started)
            self.build_env_workers()
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ wiring
    def _group(self, cls: type, name: str, *args: Any) -> ActorGroup:
        group = ActorGroup(cls, getattr(self.cfg.cluster, name), name, *args)
        self.groups.append(group)
        return group

    def _initial_path(self) -> str:
        """Where actors load the initial policy: the model dir, or the warm-started weights."""
        if self.warm is None:
            return self.model_path
        path = self.run_dir / "initial_policy"
        if not (path / "config.json").exists():  # LoRA: the base (the driver's adapters are still fresh)
            base = self.model.get_base_model() if is_lora(self.model) else self.model
            base.save_pretrained(path, state_dict=dict(policy_weights(self.model)))
            self.tokenizer.save_pretrained(path)
        return str(path)

    def build_reference(self) -> Any:
        if self.cfg.algo.kl_mode == "none":
            return None
        if is_lora(self.model):  # the policy ranks' base weights with the adapters off: no second copy
            return _AdaptersOff(self)
        return RemoteObject(self._group(workers.ObjectWorker, "reference", workers.make_reference, self.cfg,
                                        self._initial_path()))

    def build_critic(self) -> Any:
        if self.cfg.algo.estimator != "gae":
            return None
        return RemoteObject(self._group(workers.ObjectWorker, "critic", workers.make_critic, self.cfg,
                                        self._initial_path()))

    def build_engine(self) -> Any:
        if self.cfg.rollout.async_:
            return async_ray.VersionedFleet(self._group(async_ray.VersionedEngineWorker, "engines", self.cfg,
                                                        self._initial_path()))
        group = self._group(workers.EngineWorker, "engines", self.cfg, self._initial_path())
        return EngineFleet(group, colocate=self.cfg.cluster.colocate)

    def build_env_workers(self) -> None:
        """With ``cluster.env_workers.num`` > 0 the executor (envs, env-step pool) runs in actors; with
        rollout.async evaluation gets a fleet of its own (the rollout thread's stays the rollout's)."""
        from agentrl.rollout.build import make_executor

        if self.cfg.rollout.async_:
            self.eval_executor = make_executor(self.cfg, self.eval_env, async_ray.VersionedFleet(self.engine.group),
                                               self.tokenizer)
        if self.cfg.cluster.env_workers.num > 0:
            engines = async_ray.handles(self.engine.group)
            self.executor = async_ray.EnvWorkerFleet(self._group(
                async_ray.EnvWorker, "env_workers", self.env, self.cfg, self.model_path, engines,
                self.cfg.rollout.async_))

    def build_rollouts(self) -> Any:
        if not self.cfg.rollout.async_:
            return super().build_rollouts()
        return RolloutWorker(self.produce, self.versions, self.cfg.rollout.max_staleness, start_version=self.version)

    def build_learner(self) -> Any:
        path = adapter = self._initial_path()
        if self._resuming and ckpt.latest_checkpoint(self.run_dir) is not None:
            adapter = str(ckpt.latest_checkpoint(self.run_dir) / "policy")
            path = path if is_lora(self.model) else adapter  # LoRA: the base, then the checkpoint's adapter
        policy = PolicyGroup(self._group(workers.PolicyWorker, "policy", self.cfg, path), self.cfg.learner)
        if is_lora(self.model) and adapter != path:
            policy.group.call("load_adapter", adapter)
        self.engine.policy = policy.group
        if self.cfg.rollout.async_:  # weights go through the object store, loaded between engine requests
            self.versions = async_ray.RemoteVersions(policy.group, self.engine.group)  # engines at version 0
        else:
            c = self.cfg.cluster
            self._weight_sync = WeightSync(policy.group, self.engine.group, c.weight_sync, timeout_s=c.sync_timeout_s,
                                           bucket_bytes=int(c.sync_bucket_mb * 2**20),
                                           shared_gpus=0 < c.policy.gpus < 1 or 0 < c.engines.gpus < 1)
        return policy

    def build_reward_model(self) -> Any:
        if not self.cfg.reward.model:
            return None
        return RemoteObject(self._group(workers.ObjectWorker, "reward_model", workers.make_reward_model,
                                        self.cfg, self._initial_path()))

    # ------------------------------------------------------------------ distributed stages
    def sync_weights(self) -> None:
        """Policy rank 0 -> engines (object store on CPU, NCCL broadcast on GPU); with rollout.async
        published as ``self.version`` without waiting (the engines load it between requests)."""
        if self.versions is not None:
            self.versions.publish(self.version)
            return
        if self.cfg.cluster.colocate:
            self.engine.wake_up()
        self.last_sync_s = self._weight_sync.push()
        if self.cfg.cluster.colocate:
            self.engine.sleep()

    def pull_weights(self) -> None:
        """Refresh the driver's copy of the policy from rank 0 (for checkpoints and checks)."""
        import ray
        import torch

        named = [w for w in ray.get(self.learner.group.call_async("named_weights", False)) if w is not None][0]
        with torch.no_grad():
            params = dict(self.model.named_parameters())
            for name, t in named:
                params[name].copy_(t.to(params[name].device, params[name].dtype))

    def save(self) -> Path:
        self.pull_weights()
        return super().save()

    def shutdown(self) -> None:
        """Kill this trainer's actors and free their placement groups (Ray itself keeps running)."""
        for group in reversed(self.groups):
            group.shutdown()
        self.groups = []

    def fit(self) -> dict[str, Any]:
        """``Trainer.fit`` over the actors; an actor that dies stops the run with a message naming the last
        checkpoint and how to resume (Ray does not restart our actors: their state is the run's)."""
        import ray

        try:
            return super().fit()
        except ray.exceptions.RayActorError as e:
            last = ckpt.latest_checkpoint(self.run_dir)
            where = f"the last checkpoint is {last.name}" if last else "no checkpoint yet (set checkpoint.every)"
            reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise RuntimeError(f"a Ray actor died at step {self.step_idx + 1} ({reason}); {where}; resume with: "
                               f"agentrl train CONFIG --resume {self.run_dir}") from e
        finally:
            self.shutdown()
