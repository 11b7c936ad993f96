"""The run around the trainer's steps (:class:`TrainerLoop`, a base of :class:`agentrl.training.trainer.Trainer`):
the held-out evaluations before and after RL, the loop of steps with its budgets and periodic evaluations and
checkpoints, SIGTERM's checkpoint, and ``--resume``."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.env import end_parked_workspaces
from agentrl.evaluation.metrics import eval_params, paired_lift, summarize, task_results
from agentrl.rollout.build import sampling_params
from agentrl.runs import checkpoint as ckpt
from agentrl.runs.episodes import truncate_samples
from agentrl.runs.tracking import Tracker, closing_line, heartbeat, plot_curves, read_metrics
from agentrl.training.lora import is_lora, load_adapter
from agentrl.training.signals import stop_on_sigterm
from agentrl.types import Trajectory


class TrainerLoop:
    """``fit``, ``evaluate``, ``save`` and resuming, over the trainer's state (they read ``self.cfg``,
    ``self.run_dir``, ``self.budget``, ``self.eval_executor``, ``self.eval_tasks``, ``self.samples``,
    ``self.learner``, ``self.rollouts`` and the step counters, and call ``self.step`` and ``self.sync_weights``)."""

    cfg: Any
    run_dir: Path
    budget: Any
    tracker: Tracker | None
    eval_executor: Any
    eval_tasks: list[Any]
    eval_correct: list[float]
    sampled_correct: list[float] | None
    samples: Any
    failures: Any
    learner: Any
    critic: Any
    kl_ctl: Any
    tasks: Any
    tasks_state: dict[str, Any]
    rollouts: Any
    model: Any
    tokenizer: Any
    warm: Any
    step_idx: int
    start_step: int
    version: int
    resumed: bool
    stop_signal: int | None
    last_metrics: dict[str, float]

    def evaluate(self, sampled: bool = False) -> dict[str, float]:
        """Held-out accuracy, pass@k, maj@k; sampled under its own seed, leaving the training RNG as it was.
        The episodes of the first ``log.eval_samples`` tasks go to samples.jsonl. ``sampled`` (the evaluations
        before and after RL) adds ``eval/sampled_accuracy`` when the evaluation is greedy and ``eval.sampled``
        (each task's outcome kept in ``sampled_correct`` for the paired lift)."""
        e, started, params = self.cfg.eval, time.monotonic(), eval_params(self.cfg)
        trajs = self._held_out("evaluating", 1000, e.n_samples, params)
        self.samples.eval(self.step_idx, self.eval_tasks, trajs, e.n_samples, self.version)
        results = task_results(self.eval_tasks, trajs, e.n_samples, "eval")
        self.eval_correct = [sum(r.correct) / len(r.correct) for r in results]  # per task, for the paired lift
        metrics = summarize(results, e.k)
        if sampled and e.sampled and params.temperature == 0:  # one sampled episode per task beside it
            trajs = self._held_out("sampling", 2000, 1, sampling_params(self.cfg))
            results = task_results(self.eval_tasks, trajs, 1, "eval")
            self.sampled_correct = [float(r.correct[0]) for r in results]
            metrics["sampled_accuracy"] = summarize(results, [1])["accuracy"]
        self.budget.observe_eval(time.monotonic() - started)
        return {f"eval/{k}": v for k, v in metrics.items()}

    def _held_out(self, what: str, seed: int, n: int, params: Any) -> list[Trajectory]:
        """``n`` episodes per held-out task under their own seed (the training RNG left as it was), saying
        where they are while they run. The seed is the same at every step: two evaluations sample each episode
        from the same random numbers (the executors' row seeds), so they differ where the policy does, and the
        lift paired by task is not blurred by the draws."""
        phase = heartbeat if self.tracker is None else self.tracker.phase  # never silent for minutes
        with torch.random.fork_rng(), phase(f"{what} {len(self.eval_tasks)} held-out tasks",
                                            getattr(self.eval_executor, "progress", None)):
            torch.manual_seed(self.cfg.data.seed + seed)
            trajs = self.eval_executor.run(self.eval_tasks, n_samples=n, params=params)
        self.failures.observe(trajs, "evaluation")
        return trajs

    def fit(self) -> dict[str, Any]:
        """Train until ``learner.total_steps`` or ``learner.max_seconds``; evaluate before and after.

        SIGTERM (a scheduler's preemption) finishes the current step, writes a checkpoint and returns
        with ``summary["interrupted"]`` set; ``agentrl train --resume RUN_DIR`` continues the run.
        """
        with stop_on_sigterm(self):
            return self._fit()

    def _stopped(self, tracker: Tracker, before: dict[str, float], rl_seconds: float) -> dict[str, Any]:
        """After SIGTERM: checkpoint now (skip the final evaluation) and say how to resume."""
        path = self.save()
        name = signal.Signals(self.stop_signal).name
        tracker.print(f"{name}: checkpoint {path.name} written at step {self.step_idx}; "
                      f"resume with: agentrl train CONFIG --resume {self.run_dir}")
        return {"steps": self.step_idx, "rl_seconds": rl_seconds, "eval_before": before["eval/accuracy"],
                "interrupted": name, "checkpoint": str(path)}

    def _rl_steps(self, tracker: Tracker) -> float:
        """RL steps until ``learner.total_steps``, ``learner.max_seconds``, the run budget or SIGTERM, with
        the periodic evaluations and checkpoints; returns the seconds they took."""
        cfg, started = self.cfg, time.perf_counter()
        while self.step_idx < cfg.learner.total_steps and self.stop_signal is None:
            if cfg.learner.max_seconds and time.perf_counter() - started > cfg.learner.max_seconds:
                tracker.print(f"time budget of {cfg.learner.max_seconds:.0f} s reached")
                break
            if not self.budget.may_step():
                tracker.print(self.budget.stop_line())
                break
            step_started = time.perf_counter()
            metrics = self.step()
            self.budget.observe_step(time.perf_counter() - step_started)
            self.step_idx += 1
            if cfg.log.eval_every and self.step_idx % cfg.log.eval_every == 0 and self.budget.may_evaluate():
                metrics.update(self.evaluate())
            tracker.log(self.step_idx, metrics)
            self.last_metrics = metrics
            if cfg.checkpoint.every and self.step_idx % cfg.checkpoint.every == 0:
                self.save()
        return time.perf_counter() - started

    def _fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.tracker = tracker = Tracker(self.run_dir, cfg.log, cfg.learner.total_steps, start_step=self.step_idx)
        try:
            if self.resumed:  # the run's first evaluation is in metrics.jsonl already
                before = next((r for r in read_metrics(self.run_dir) if "eval/accuracy" in r),
                              {"eval/accuracy": float("nan")})
            else:
                before = self.evaluate(sampled=True)
                tracker.log(self.step_idx, before)
            correct_before = None if self.resumed else self.eval_correct
            sampled_before, self.sampled_correct = self.sampled_correct, None
            tracker.print(f"held-out accuracy before RL: {before['eval/accuracy']:.3f}")
            rl_seconds = self._rl_steps(tracker)
            if self.stop_signal is not None:
                return self._stopped(tracker, before, rl_seconds)
            evaluated = self.step_idx > self.start_step or self.resumed
            after = self.evaluate(sampled=True) if evaluated else before
            tracker.log(self.step_idx, after)
            lift = paired_lift(correct_before, self.eval_correct) if evaluated and correct_before else None
            both = evaluated and sampled_before and self.sampled_correct  # a resumed run has no sampled_before
            sampled_lift = paired_lift(sampled_before, self.sampled_correct) if both else None
        finally:
            self.tracker = None
            tracker.close()
            self.rollouts.close()
            end_parked_workspaces()
        if cfg.checkpoint.save_final:
            self.save()
        plot = plot_curves(self.run_dir)
        summary = {"steps": self.step_idx, "rl_seconds": rl_seconds,
                   "eval_before": before["eval/accuracy"], "eval_after": after["eval/accuracy"],
                   "eval_tasks": len(self.eval_tasks), "eval_samples": cfg.eval.n_samples,
                   "eval_greedy": eval_params(cfg).temperature == 0, "temperature": cfg.rollout.temperature,
                   "sampled_before": before.get("eval/sampled_accuracy"),
                   "sampled_after": after.get("eval/sampled_accuracy"),
                   "eval_lift": None if lift is None else dict(vars(lift)),
                   "sampled_lift": None if sampled_lift is None else dict(vars(sampled_lift)),
                   "warm_start": self.warm, "learning_curve": str(plot) if plot else None}
        line = closing_line(summary, self.warm is not None, self.step_idx - self.start_step, self.start_step)
        print(line + (f"; {self.budget.summary()}" if self.budget.active else ""), flush=True)
        return summary

    # ------------------------------------------------------------------ state
    def save(self) -> Path:
        """A checkpoint of this step: the policy (or its adapter), the optimizer, scheduler, task position, KL
        coefficient, critic and RNG (``agentrl.runs.checkpoint``); returns its directory."""
        state = {"optimizer": self.learner.optimizer.state_dict(), "scheduler": self.learner.scheduler.state_dict(),
                 "tasks": self.tasks_state, "kl_coef": self.kl_ctl.value, "metrics": self.last_metrics,
                 "critic": None if self.critic is None else self.critic.state_dict(),
                 "async_dropped_samples": self.rollouts.buffered_samples()}  # regenerated on resume
        return ckpt.save_checkpoint(self.run_dir, self.step_idx, self.model, self.tokenizer, state,
                                    keep=self.cfg.checkpoint.keep)

    def _resume(self) -> None:
        """The run's state from its latest checkpoint; the rows written after it are dropped."""
        path = ckpt.latest_checkpoint(self.run_dir)
        if path is None:
            raise FileNotFoundError(f"no checkpoint to resume from in {self.run_dir / 'checkpoints'}")
        from transformers import AutoModelForCausalLM

        if is_lora(self.model):  # the checkpoint holds the adapter only
            load_adapter(self.model, path / "policy")
        else:
            self.model.load_state_dict(AutoModelForCausalLM.from_pretrained(path / "policy").state_dict())
        state = ckpt.load_trainer_state(path)
        self.learner.optimizer.load_state_dict(state["optimizer"])
        self.learner.scheduler.load_state_dict(state["scheduler"])
        self.tasks.load_state_dict(state["tasks"])
        self.kl_ctl.value = state["kl_coef"]
        if self.critic is not None and state.get("critic") is not None:
            self.critic.load_state_dict(state["critic"])
        self.step_idx, self.last_metrics = state["step"], state.get("metrics", {})
        self.version = self.step_idx
        ckpt.truncate_metrics(self.run_dir, self.step_idx)  # rows the crashed run wrote after this checkpoint
        truncate_samples(self.run_dir, self.step_idx)  # and its episode records
        ckpt.set_rng_state(state["rng"])
        self.sync_weights()
