"""Evaluation: pass@k (unbiased estimator), maj@k, per-dataset and per-difficulty tables.

The same code runs inside training (``log.eval_every``) and from ``agentrl eval``:
:func:`evaluate` samples ``n_samples`` responses per task on an executor and summarises them;
:func:`run_eval` (the CLI) does it for several registered envs, prints tables and writes
``eval.json``.

A sample is *correct* when its ``correct`` reward component (or, without one, its reward) is at
least 1. maj@k votes over the env's parsed final answers (``info["parsed"]``, math envs) of the first
k samples of a task; unparsed answers do not vote, ties go to the answer seen first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agentrl.rollout.engines.base import SamplingParams
from agentrl.types import Task, Trajectory


# ---------------------------------------------------------------------------------- pure math
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (Chen et al. 2021), which never forms the
    large binomials.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """The most frequent non-None answer (ties: the one seen first); None when nothing parsed."""
    votes = Counter(a for a in answers if a is not None)
    return votes.most_common(1)[0][0] if votes else None


def maj_at_k(answers: Sequence[str | None], correct: Sequence[bool], k: int) -> float:
    """1.0 when the majority answer of the first ``k`` samples is a correct one, else 0.0."""
    if not 1 <= k <= len(answers) or len(answers) != len(correct):
        raise ValueError(f"maj@k needs 1 <= k <= n samples with one correctness each, got k={k}")
    top = majority_answer(answers[:k])
    if top is None:
        return 0.0
    return float(next(c for a, c in zip(answers[:k], correct[:k]) if a == top))


def sample_correct(traj: Trajectory) -> bool:
    """Whether one sample solved its task (``correct`` component, else the reward, at least 1)."""
    components = traj.info.get("reward_components") or {}
    return float(components.get("correct", traj.reward)) >= 1.0


@dataclass(frozen=True)
class PairedLift:
    """How accuracy moved between two evaluations of the same tasks, paired task by task."""

    lift: float
    """Mean over tasks of (after - before), each a task's mean correctness."""
    se: float
    """Standard error of ``lift``: the differences' sample standard deviation / sqrt(tasks) (0 for one task)."""
    up: int
    """Tasks whose correctness rose."""
    down: int
    """Tasks whose correctness fell."""


def paired_lift(before: Sequence[float], after: Sequence[float]) -> PairedLift:
    """The lift of ``after`` over ``before`` (per-task mean correctness, the same tasks in the same order).

    Pairing removes what the tasks share: on 100 tasks at 0.8, ten more solved and none lost is a lift of
    0.10 with a paired standard error of 0.03, where the two accuracies' own errors are 0.04 each."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired_lift needs the same tasks twice, got {len(before)} and {len(after)} results")
    d = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return PairedLift(float(d.mean()), se, int((d > 0).sum()), int((d < 0).sum()))


# ---------------------------------------------------------------------------------- records
@dataclass
class TaskResult:
    """The samples of one task, reduced to what the metrics need."""

    task_id: str
    dataset: str
    difficulty: str
    correct: list[bool]
    rewards: list[float]
    lengths: list[int]
    answers: list[str | None] | None = None
    """Parsed final answers (None for envs that do not parse one, e.g. code)."""
    responses: list[str] = field(default_factory=list)


def difficulty_of(task: Task) -> str:
    """``metadata["difficulty"]`` or ``metadata["level"]`` as text ("-" when absent)."""
    value = task.metadata.get("difficulty", task.metadata.get("level"))
    return "-" if value is None else str(value)


def task_results(tasks: list[Task], trajs: list[Trajectory], n: int, dataset: str) -> list[TaskResult]:
    """Group ``n`` consecutive trajectories per task (the executor's order)."""
    if len(trajs) != n * len(tasks):
        raise ValueError(f"expected {n} samples for each of {len(tasks)} tasks, got {len(trajs)}")
    out = []
    for i, task in enumerate(tasks):
        group = trajs[i * n:(i + 1) * n]
        parsed = any("parsed" in t.info for t in group)  # a failed episode has none: it does not vote
        out.append(TaskResult(
            task_id=task.id, dataset=dataset, difficulty=difficulty_of(task),
            correct=[sample_correct(t) for t in group], rewards=[float(t.reward) for t in group],
            lengths=[t.num_action_tokens for t in group],
            answers=[None if t.info.get("parsed") is None else str(t.info["parsed"]) for t in group] if parsed else None,
            responses=[str(t.info.get("response", "")) for t in group]))
    return out


def summarize(results: list[TaskResult], ks: Sequence[int]) -> dict[str, float]:
    """accuracy (mean correctness of all samples), mean reward and length, pass@k, maj@k."""
    if not results:
        return {"tasks": 0.0}
    n = min(len(r.correct) for r in results)
    out = {"tasks": float(len(results)), "samples": float(sum(len(r.correct) for r in results)),
           "accuracy": float(np.mean([c for r in results for c in r.correct])),
           "mean_reward": float(np.mean([x for r in results for x in r.rewards])),
           "response_length": float(np.mean([x for r in results for x in r.lengths]))}
    for k in sorted(set(ks)):
        if k > n:
            continue
        out[f"pass@{k}"] = float(np.mean([pass_at_k(len(r.correct), sum(r.correct), k) for r in results]))
        if all(r.answers is not None for r in results):
            out[f"maj@{k}"] = float(np.mean([maj_at_k(r.answers, r.correct, k) for r in results]))
    return out


def skipped_metrics(results: list[TaskResult], ks: Sequence[int]) -> dict[str, str]:
    """Why each asked-for pass@k / maj@k is missing from :func:`summarize` (metric -> reason); maj@1 (a
    majority of one sample: pass@1) is not missed."""
    if not results:
        return {}
    n = min(len(r.correct) for r in results)
    out: dict[str, str] = {}
    for k in sorted(set(ks)):
        if k > n:
            out[f"pass@{k}"] = out[f"maj@{k}"] = f"needs eval.n_samples >= {k} (it is {n})"
        elif k > 1 and not all(r.answers is not None for r in results):  # maj@1 is pass@1: nothing to say
            out[f"maj@{k}"] = "the env gives no parsed final answers to vote on (info['parsed'] from step)"
    return out


def tables(results: list[TaskResult], ks: Sequence[int]) -> dict[str, dict[str, dict[str, float]]]:
    """Summaries per dataset and per (dataset, difficulty)."""
    by_data: dict[str, list[TaskResult]] = {}
    by_diff: dict[str, list[TaskResult]] = {}
    for r in results:
        by_data.setdefault(r.dataset, []).append(r)
        by_diff.setdefault(f"{r.dataset} | {r.difficulty}", []).append(r)
    return {"datasets": {k: summarize(v, ks) for k, v in by_data.items()},
            "difficulties": {k: summarize(v, ks) for k, v in sorted(by_diff.items())}}


# ---------------------------------------------------------------------------------- running
def evaluate_tasks(executor: Any, tasks: list[Task], params: SamplingParams, n_samples: int = 1,
                   dataset: str = "eval", observe: Callable[[list[Trajectory]], Any] | None = None
                   ) -> list[TaskResult]:
    """Sample ``n_samples`` responses per task and score them with the executor's env; ``observe``
    sees the episodes (the failed ones are reported: ``agentrl.rollout.failures``)."""
    trajs = executor.run(tasks, n_samples=n_samples, params=params)
    if observe is not None:
        observe(trajs)
    return task_results(tasks, trajs, n_samples, dataset)


def evaluate(executor: Any, tasks: list[Task], params: SamplingParams, n_samples: int = 1,
             ks: Sequence[int] = (1,), observe: Callable[[list[Trajectory]], Any] | None = None) -> dict[str, float]:
    """Flat metrics of one eval set: ``accuracy``, ``mean_reward``, ``response_length``, ``pass@k``,
    ``maj@k`` (math)."""
    return summarize(evaluate_tasks(executor, tasks, params, n_samples, observe=observe), ks)


def eval_params(cfg: Any) -> SamplingParams:
    """Sampling parameters of evaluation: ``rollout.*`` with ``eval.temperature`` (see EvalConfig)."""
    from agentrl.rollout.build import sampling_params

    e = cfg.eval
    greedy = e.temperature is None and e.n_samples == 1 and cfg.log.eval_greedy
    params = sampling_params(cfg, greedy=greedy)
    if e.temperature is not None:
        params = replace(params, temperature=e.temperature)
    return params
