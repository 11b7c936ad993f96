"""The RL driver: one training step reads top to bottom (DESIGN.md "One training step").

``Trainer.__init__`` only wires components; ``step`` calls the named stages in order:
tasks -> rollout -> score_unverified -> guide (``algo.guide``) -> select (failed samples out) -> make_experience ->
reference_and_values -> advantages -> update -> sync_weights, then logging and checkpoints in ``fit``
(:class:`agentrl.training.fitting.TrainerLoop`: the loop, the evaluations, saving and resuming). The first
stages (``produce``) run on a rollout worker ahead of the learner with ``rollout.async``
(``agentrl.rollout.async_rollout``); the step reads the same either way.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agentrl.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    kl_penalty,
    masked_mean,
)
from agentrl.config import RunConfig
from agentrl.env import fixed_tasks
from agentrl.evaluation.held_out import held_out_warning
from agentrl.models import load_policy
from agentrl.rollout.async_rollout import RolloutBatch, VersionedEngine
from agentrl.rollout.build import make_engine, make_env, make_executor, resolve_model_path
from agentrl.rollout.dynamic_sampling import apply_overlong_penalty, fill_batch, num_groups
from agentrl.rollout.failures import EnvFailures
from agentrl.runs.run_dir import prepare_run_dir, run_dir_path, save_run_config
from agentrl.runs.tracking import StageTimer, Tracker
from agentrl.training.budget import RunBudget
from agentrl.training.credit import batch_advantages, sample_metrics
from agentrl.training.experience import Experience
from agentrl.training.fitting import TrainerLoop
from agentrl.training.guidance import guide, guide_metrics, learner_logprobs_for_guided, reported
from agentrl.training.lora import (
    apply_lora,
    parameter_report,
    policy_weights,
)
from agentrl.training.metrics import offpolicy_metrics, rollout_metrics
from agentrl.training.samples import SampleLog
from agentrl.training.scoring import score_remote, score_unverified
from agentrl.training.tasks import seed_everything, task_source
from agentrl.training.warm_start import maybe_warm_start
from agentrl.training.wiring import TrainerWiring
from agentrl.types import Task, Trajectory

log = logging.getLogger(__name__)


class Trainer(TrainerWiring, TrainerLoop):
    """Single-process RL trainer (the Ray path reuses these stages with actor handles)."""

    def __init__(self, cfg: RunConfig, *, run_dir: str | Path | None = None, resume: bool = False,
                 doctor: Any = None, started: float | None = None) -> None:
        """``doctor(tokenizer, feedback_role)`` makes the check of the first batch, ``check(trajectories,
        experience)``, which raises to stop the run (``agentrl train``: ``agentrl.doctor.first_step``).
        ``started``: when the run began (``time.monotonic()``; default now), for ``run.max_seconds``."""
        self.cfg = cfg
        self.budget = RunBudget(cfg.run.max_seconds, cfg.run.warm_start_share, started)
        self.tracker: Tracker | None = None  # while fit() runs
        doctor = None if resume else doctor  # a resumed run's first batch was checked when it started
        self.doctor_texts = doctor is not None
        if cfg.rollout.async_ and cfg.rollout.engine == "vllm" and cfg.cluster.mode == "local":
            raise ValueError("rollout.async with rollout.engine=vllm runs over Ray (cluster.mode=ray); here use hf")
        seed_everything(cfg.data.seed)
        self.run_dir = prepare_run_dir(run_dir_path(cfg, run_dir), resume=resume)  # runs never mix
        self.failures = EnvFailures(self.run_dir, cfg.env.max_failure_rate)  # env errors: once each, then counted
        self.env = make_env(cfg)
        self.eval_env = make_env(cfg, cfg.env.eval_kwargs)
        self.model_path = resolve_model_path(cfg, self.env)
        self.model, self.tokenizer = load_policy(cfg, self.model_path)
        self._timers = threading.local()  # one StageTimer per thread (the rollout worker has its own)
        # on resume too (cached): the reference is the warm-started policy
        if self.budget.active:
            print(f"run budget: {cfg.run.max_seconds:g} s (run.max_seconds), {self.budget.used():.0f} s used; the warm "
                  f"start may take {cfg.run.warm_start_share:.0%} of what is left", flush=True)
        elif cfg.learner.max_seconds and not resume:
            print(f"learner.max_seconds={cfg.learner.max_seconds:g} bounds RL only: loading, the warm start and the "
                  f"evaluations come on top (run.max_seconds bounds the whole run)", flush=True)
        self.warm = maybe_warm_start(cfg, self.model, self.tokenizer, self.model_path, self.env,
                                     lambda: make_env(cfg, cfg.env.dev_kwargs),
                                     max_seconds=self.budget.warm_start_seconds(), run_dir=self.run_dir)
        seed_everything(cfg.rl_seed)  # RL from here: its own seed (learner.seed), the warm start made or read
        self.model = apply_lora(self.model, cfg.learner.lora)  # learner.lora.r > 0: adapters train, not the base
        self.reference = self.build_reference()
        self.critic = self.build_critic()
        self.engine = self.build_engine()
        self.executor = make_executor(cfg, self.env, self.engine, self.tokenizer)
        self.guide = self.build_guide()  # algo.guide: the env's reference episodes for groups without a success
        self.doctor = None if doctor is None else doctor(self.tokenizer, getattr(self.env, "feedback_role", "user"))
        self.update_doctor: Any = None  # set by the first batch's checks: ``wants``, ``update``
        if doctor is not None and hasattr(self.executor, "keep_observations"):
            self.executor.keep_observations = True  # the first batch's prompts and feedback texts, for the doctor
        eval_engine = (make_engine(cfg, self.model, self.tokenizer, self.model_path, local_async=True)
                       if cfg.rollout.async_ and cfg.cluster.mode == "local" else None)  # Ray: RayTrainer's fleet
        self.eval_executor = make_executor(cfg, self.eval_env, eval_engine or self.engine, self.tokenizer)
        self.eval_tasks = fixed_tasks(self.eval_env, cfg.data.eval_tasks, cfg.data.seed + 1000)
        self.eval_correct: list[float] = []  # the last evaluation's mean correctness per held-out task
        self.sampled_correct: list[float] | None = None  # the last sampled evaluation's (one episode a task)
        if warning := held_out_warning(cfg.env.id, self.env, self.eval_tasks, cfg.env.eval_kwargs):
            print(warning, file=sys.stderr, flush=True)  # evaluation on training data: said, not hidden
        self.learner = self.build_learner()
        self.samples = SampleLog(self.run_dir, cfg.log, self.tokenizer,  # episodes kept in samples.jsonl
                                 last_step=cfg.learner.total_steps)
        a = cfg.algo
        self.kl_ctl = (AdaptiveKLController(a.kl_coef, a.kl_target, a.kl_horizon) if a.kl_target
                       else FixedKLController(a.kl_coef))
        self.tasks = task_source(self.env, cfg)
        self.reward_model = self.build_reward_model()
        self.remote_reward = self.build_remote_reward()
        self.step_idx, self.resumed, self.last_metrics = 0, resume, {}
        self.version = 0  # policy version: updates so far (== step_idx between steps)
        self.stop_signal: int | None = None
        if resume:
            self._resume()
        self.start_step = self.step_idx
        self.tasks_state = self.tasks.state_dict()  # the task position after the last batch trained on
        self.rollouts = self.build_rollouts()
        save_run_config(cfg, self.run_dir)  # only once the run is built: a failed launch leaves the old one

    @property
    def timer(self) -> StageTimer:
        """This thread's stage timer."""
        if not hasattr(self._timers, "t"):
            self._timers.t = StageTimer()
        return self._timers.t

    # ------------------------------------------------------------------ the stages of one step
    def produce(self) -> RolloutBatch:
        """The rollout half of a step: tasks -> sample -> select (on the rollout worker with rollout.async)."""
        with self.timer("tasks"):
            tasks = self.tasks.next(self.cfg.data.prompts_per_step)
        batch, trajs, metrics = self.select(self.sample(tasks))
        metrics.update(self.timer.pop(), **self.tasks.metrics())
        return RolloutBatch(batch, trajs, metrics, self.tasks.state_dict())

    def rollout(self, tasks: list[Task]) -> list[Trajectory]:
        """Run ``n_samples`` episodes per task on the engine; rewards come from ``env.step``."""
        return self.executor.run(tasks, group_offset=self.tasks.drawn - len(tasks))  # unique group ids

    def score_unverified(self, trajs: list[Trajectory]) -> list[Trajectory]:
        """Samples the env could not verify (``info["verified"] = False``) go to the reward model."""
        return score_unverified(trajs, self.reward_model)

    def score_remote(self, trajs: list[Trajectory], tasks: list[Task]) -> list[Trajectory]:
        """With ``reward.remote_url`` the reward server scores every sample (in place of the env's reward)."""
        return score_remote(trajs, tasks, self.remote_reward, self.cfg.reward)

    def sample(self, tasks: list[Task]) -> list[Trajectory]:
        """Rollouts of ``tasks`` with final rewards (:meth:`final_rewards`); with ``algo.guide`` a group without a
        success then gets its task's reference episode, scored the same way (``agentrl.training.guidance``)."""
        with self.timer("generate"):
            trajs = self.rollout(tasks)
        trajs = self.final_rewards(trajs, tasks)
        self.tasks.observe(trajs)  # the curriculum's evidence (final rewards, before any group is dropped)
        if self.guide is not None:  # reference episodes, their rewards final as the policy's are
            with self.timer("guide"):
                trajs = guide(trajs, tasks, lambda ts: self.final_rewards(self.guide(ts), ts))
        return trajs

    def final_rewards(self, trajs: list[Trajectory], tasks: list[Task]) -> list[Trajectory]:
        """The rewards training uses: the remote reward or reward model's, then the optional overlong penalty."""
        with self.timer("reward"):
            trajs = self.score_unverified(self.score_remote(trajs, tasks))
            a = self.cfg.algo
            if a.overlong_buffer:
                apply_overlong_penalty(trajs, self.cfg.rollout.max_new_tokens, a.overlong_buffer, a.overlong_penalty)
        return trajs

    def select(self, trajs: list[Trajectory]) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """Dynamic sampling: with ``algo.drop_zero_std_groups`` keep informative groups and refill from
        the data (``algo.max_refill_rounds``). Returns (batch, every trajectory generated, metrics).

        Samples that failed for an infrastructure reason (the env raised or timed out, the reward server
        failed: ``info["failed"]``) never train the policy: they leave the batch and their group's
        baseline (``failed/*`` counts them) instead of teaching the policy a 0 the machine earned."""
        failed: list[Trajectory] = []

        def ok(ts: list[Trajectory]) -> list[Trajectory]:
            failed.extend(t for t in ts if t.info.get("failed"))
            return [t for t in ts if not t.info.get("failed")]

        if not self.cfg.algo.drop_zero_std_groups:
            kept = ok(trajs)
            return kept, reported(trajs), {"failed/dropped": float(len(failed)), **guide_metrics(kept, self.guide)}

        def draw(k: int) -> list[Trajectory]:
            with self.timer("tasks"):
                tasks = self.tasks.next(k)
            return ok(self.sample(tasks))

        kept, generated, rounds = fill_batch(ok(trajs), draw, self.cfg.data.prompts_per_step,
                                             self.cfg.algo.max_refill_rounds)
        return kept, reported(generated) + failed, {
            "dynamic/groups_kept": float(num_groups(kept)), "dynamic/refill_rounds": float(rounds),
            "failed/dropped": float(len(failed)), **guide_metrics(kept, self.guide)}

    def make_experience(self, trajs: list[Trajectory]) -> Experience | None:
        """Token-exact batch (None when there is nothing to learn from)."""
        if not trajs:
            return None
        exp = Experience.from_trajectories(trajs, self.tokenizer.pad_token_id)
        if self.guide is not None:  # a guided sample's engine log-probs: the learner's (agentrl.training.guidance)
            learner_logprobs_for_guided(exp, trajs, self.learner.logprobs)
        return exp

    def reference_and_values(self, exp: Experience) -> None:
        """Reference log-probs (when KL is used) and old log-probs (when a batch gets several steps; with
        one, off-policy too, the learner's detached log-probs are the old ones: docs/async.md)."""
        if self.learner.needs_old_logprobs(len(exp)):
            exp.old_logprobs = self.learner.logprobs(exp)
        if self.reference is not None:
            exp.ref_logprobs = self.reference.logprobs(exp)
        if self.critic is not None:
            exp.values = self.critic.values(exp)

    def advantages(self, exp: Experience) -> dict[str, float]:
        """Advantages and returns from rewards (and the KL penalty when it is in the reward): trajectory-level, or
        per turn with ``algo.turn_gamma`` / ``algo.step_adv_weight`` (``agentrl.training.credit``)."""
        a = self.cfg.algo
        kl = None
        metrics: dict[str, float] = {}
        if exp.ref_logprobs is not None:
            current = exp.old_logprobs if exp.old_logprobs is not None else exp.engine_logprobs
            kl = kl_penalty(current, exp.ref_logprobs, a.kl_estimator)
            metrics["kl"] = masked_mean(kl, exp.action_mask).item()
        exp.advantages, exp.returns = batch_advantages(exp, a, kl if a.kl_mode == "reward" else None,
                                                       self.kl_ctl.value)
        metrics.update(sample_metrics(exp, a))
        return metrics

    def update(self, exp: Experience) -> dict[str, float]:
        """Policy update; the adaptive KL coefficient follows the batch's KL."""
        metrics = {k if k.startswith("mismatch/") else f"loss/{k}": v
                   for k, v in self.learner.train_step(exp, kl_coef=self.kl_ctl.value).items()}
        metrics.update(parameter_report(self.model, self.learner.optimizer))  # trainable params, optimizer MB
        if self.critic is not None:
            metrics.update({f"critic/{k}": v for k, v in self.critic.train_step(exp).items()})
        return metrics

    def sync_weights(self) -> None:
        """Push the policy's weights to the engine (free when the engine shares the model; a LoRA policy
        sends its merged weights)."""
        if getattr(self.engine, "model", None) is self.model:
            return
        if isinstance(self.engine, VersionedEngine):  # rollout.async: taken between engine requests
            self.engine.stage_weights(policy_weights(self.model), self.version)
            return
        self.engine.load_weights(policy_weights(self.model))

    # ------------------------------------------------------------------ the loop
    def step(self) -> dict[str, float]:
        """One training step; returns its metrics."""
        t = self.timer
        start = time.perf_counter()
        made = self.rollouts.next(self.version)  # produce() now, or the batch the rollout worker made ahead
        batch, trajs, metrics, self.tasks_state = made.batch, made.generated, dict(made.metrics), made.tasks_state
        self.failures.observe(trajs)
        self.failures.check()  # past env.max_failure_rate the run stops, in one line
        metrics["tasks/drawn"] = float(self.tasks_state["drawn"])  # tasks behind this batch, cumulative
        with t("experience"):
            exp = self.make_experience(batch)
        if self.doctor is not None:
            with t("doctor"):
                self.first_step_checks(batch, exp)
        for traj in trajs if self.doctor_texts else ():  # a rollout worker may have made more batches with them
            traj.info.pop("observations", None)
            traj.info.pop("prompt", None)
        with t("samples"):  # every log.samples_every steps: a few episodes, scored by the learner before its update
            self.samples.train(self.step_idx + 1, trajs, self.version, self.learner)
        metrics.update(rollout_metrics(trajs))
        if exp is not None:
            with t("reference"):
                self.reference_and_values(exp)
                metrics.update(offpolicy_metrics(exp, self.version, self.cfg.algo, self.cfg.rollout.max_staleness))
            with t("advantages"):
                metrics.update(self.advantages(exp))
            # the first update with a signal (rewards that differ in a group), under the doctor: log-probs before
            watch = self.update_doctor is not None and self.update_doctor.wants(batch, exp)
            before = (exp.old_logprobs if exp.old_logprobs is not None else self.learner.logprobs(exp)) if watch \
                else None  # old log-probs, when the batch has them, are these
            with t("update"):
                metrics.update(self.update(exp))
            if watch:
                with t("doctor"):
                    check, self.update_doctor = self.update_doctor, None
                    check.update(batch, exp, before, self.learner.logprobs(exp))
            if "kl" in metrics:
                self.kl_ctl.update(metrics["kl"], len(exp))
        self.version += 1  # every step publishes a version, so the rollout worker's schedule never stalls
        with t("sync"):
            self.sync_weights()
        metrics["kl_coef"] = self.kl_ctl.value
        metrics["samples_used"] = 0 if exp is None else len(exp)
        metrics.update(t.pop())
        metrics["time/step"] = time.perf_counter() - start
        gen_time = metrics.get("time/generate", 0.0)
        metrics["throughput/tokens_per_s"] = metrics["response_length/sum"] / max(gen_time, 1e-9)
        metrics["throughput/samples_per_s"] = len(trajs) / max(metrics["time/step"], 1e-9)
        return metrics

    def first_step_checks(self, batch: list[Trajectory], exp: Experience | None) -> None:
        """The doctor's cheap checks on the first batch (raises on a fail), then the first update's direction is
        watched (``update_doctor``); the executor stops keeping the texts they needed."""
        check, self.doctor = self.doctor, None
        if hasattr(self.executor, "keep_observations"):
            self.executor.keep_observations = False
        if exp is not None:
            check(batch, exp)
            self.update_doctor = check if hasattr(check, "update") else None  # then the first update's direction

