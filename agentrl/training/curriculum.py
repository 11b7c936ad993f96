"""Online task selection by measured pass rates: spend rollouts where a group's rewards will differ.

Under a group estimator (GRPO, RLOO, Dr. GRPO) a group of ``n`` samples whose rewards all agree has
advantage 0 and teaches nothing; with ``algo.drop_zero_std_groups`` it is dropped after its episodes ran.
On a warm-started policy most buckets of tasks are solved every time (terminal_smollm2_lora: 70% of its
groups agreed), so most of a step's generation buys nothing. The curriculum keeps, per bucket of tasks
that pass or fail alike (a metadata key, e.g. Terminal-v0's ``family`` and ``difficulty``), decayed counts
of successes and failures, and picks each step's tasks from ``candidates`` x as many drawn, preferring the
buckets whose next group is likely to vary:

    P(varied) = 1 - E[p^n] - E[(1-p)^n],   p ~ Beta(a + s, b + f)

with ``s, f`` the bucket's (decayed) successes and failures and the prior ``a, b`` the posterior mean of
the bucket one key field up (the family of a family/difficulty bucket; at the top every bucket pooled), worth
``prior_strength`` samples. Rewards count as successes clipped to
[0, 1] (a reward of 0.5 is half a success). The prioritisation is DAPO's dynamic sampling moved before the
episodes instead of after them, and prime-rl's easy/hard filtering made soft.

With ``algo.guide`` a group without a success gets the env's reference episode (agentrl.training.guidance),
so it varies too: only a group whose samples all succeed teaches nothing, and the weight is
``P(not all succeed) = 1 - E[p^n]`` (:func:`informative_probability`): the buckets the policy fails most
are picked most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentrl.types import Task, Trajectory


def beta_moment(a: float, b: float, n: int) -> float:
    """``E[p^n]`` for ``p ~ Beta(a, b)``: ``prod_{i<n} (a + i) / (a + b + i)`` (1 for ``n = 0``)."""
    out = 1.0
    for i in range(n):
        out *= (a + i) / (a + b + i)
    return out


def varied_probability(successes: float, failures: float, n: int, prior_a: float, prior_b: float) -> float:
    """Chance that ``n`` Bernoulli samples of a bucket are not all equal, under the posterior
    ``Beta(prior_a + successes, prior_b + failures)`` of its success rate (0 for ``n < 2``)."""
    if n < 2:
        return 0.0
    a, b = prior_a + successes, prior_b + failures
    return max(0.0, 1.0 - beta_moment(a, b, n) - beta_moment(b, a, n))


def informative_probability(successes: float, failures: float, n: int, prior_a: float, prior_b: float,
                            guided: bool) -> float:
    """Chance that a group of ``n`` samples of a bucket teaches something: :func:`varied_probability`, or with
    ``guided`` (a group without a success is given one) ``1 - E[p^n]``, under the same posterior."""
    if not guided:
        return varied_probability(successes, failures, n, prior_a, prior_b)
    return max(0.0, 1.0 - beta_moment(prior_a + successes, prior_b + failures, n)) if n >= 1 else 0.0


def pick(weights: Sequence[float], k: int, temperature: float, rng: np.random.Generator) -> list[int]:
    """``k`` distinct indices drawn without replacement with probability ~ ``w ** (1 / temperature)``
    (Gumbel top-k), returned in ascending order; a weight of 0 is picked only when nothing else is left."""
    w = np.asarray(weights, dtype=np.float64)
    if k >= len(w):
        return list(range(len(w)))
    with np.errstate(divide="ignore"):
        keys = np.log(w) / temperature + rng.gumbel(size=len(w))
    keys = np.where(np.isfinite(keys), keys, -1e300 + rng.random(len(w)))  # zero weights last, in random order
    return sorted(int(i) for i in np.argsort(-keys, kind="stable")[:k])


def _levels(bucket: str) -> list[str]:
    """``"a/b/c"`` -> ``["", "a", "a/b", "a/b/c"]``: the bucket and every coarser one above it."""
    parts = bucket.split("/")
    return [""] + ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


class Curriculum:
    """Per-bucket success counts and the choice of each step's tasks (see the module docstring).

    ``key``: metadata fields naming a task's bucket (``id``: the task's id); ``group_size``: samples per
    task (``rollout.n_samples``). Its state (counts and the tasks awaiting their rewards) is part of the
    task source's checkpoint.
    """

    MAX_PENDING = 65536

    def __init__(self, key: Sequence[str], group_size: int, *, temperature: float = 0.25, decay: float = 0.9,
                 prior_strength: float = 2.0, guided: bool = False) -> None:
        self.key, self.group_size, self.guided = list(key), group_size, guided
        self.temperature, self.decay, self.prior_strength = temperature, decay, prior_strength
        self.counts: dict[str, list[float]] = {}  # bucket -> [successes, failures]
        self.pending: dict[str, str] = {}  # task id -> bucket, until its rewards are observed
        self.last_weights: list[float] = []

    def bucket(self, task: Task) -> str:
        """The bucket of ``task``: its key fields' values joined by ``/`` (a missing field is a clear error)."""
        parts = []
        for f in self.key:
            if f == "id":
                parts.append(task.id.replace("/", "|") or "-")
            elif f in task.metadata:
                parts.append(str(task.metadata[f]).replace("/", "|") or "-")
            else:
                raise ValueError(f"data.curriculum.key: task {task.id!r} has no metadata field {f!r} "
                                 f"(its fields: {', '.join(sorted(task.metadata)) or 'none'}; or use 'id')")
        return "/".join(parts)

    def posterior(self, bucket: str) -> tuple[float, float]:
        """``(a, b)`` of the Beta posterior of ``bucket``'s success rate. The prior is the posterior mean of the
        bucket one key field up (``family`` for ``family/difficulty``; every bucket pooled at the top), worth
        ``prior_strength`` samples: a bucket never seen starts from what its family showed."""
        parent = bucket.rsplit("/", 1)[0] if "/" in bucket else ("" if bucket else None)
        if parent is None:  # the pool of everything: a uniform prior
            a, b = 1.0, 1.0
        else:
            pa, pb = self.posterior(parent)
            rate = min(max(pa / (pa + pb), 0.01), 0.99)
            a, b = self.prior_strength * rate, self.prior_strength * (1 - rate)
        s, f = self.counts.get(bucket, (0.0, 0.0))
        return a + s, b + f

    def weight(self, bucket: str) -> float:
        """``P(varied)`` of the next group of ``bucket`` (guided: ``P(not all succeed)``)."""
        a, b = self.posterior(bucket)
        return informative_probability(0.0, 0.0, self.group_size, a, b, self.guided)

    def choose(self, candidates: list[Task], k: int, rng: np.random.Generator) -> list[Task]:
        """``k`` of ``candidates`` (in their order), drawn by :meth:`weight` at ``temperature``."""
        buckets = [self.bucket(t) for t in candidates]
        cache = {b: self.weight(b) for b in set(buckets)}
        weights = [cache[b] for b in buckets]
        chosen = pick(weights, k, self.temperature, rng)
        self.last_weights = [weights[i] for i in chosen]
        for i in chosen:
            self.pending[candidates[i].id] = buckets[i]
        while len(self.pending) > self.MAX_PENDING:  # tasks whose episodes never came back (a crashed batch)
            self.pending.pop(next(iter(self.pending)))
        return [candidates[i] for i in chosen]

    def observe(self, trajs: Sequence[Trajectory]) -> None:
        """Fold one batch's final rewards into its buckets' counts (older evidence decayed first); samples
        that failed for an infrastructure reason (``info["failed"]``) say nothing of the task."""
        for c in self.counts.values():
            c[0] *= self.decay
            c[1] *= self.decay
        seen = set()
        for t in trajs:
            bucket = self.pending.get(t.task_id)
            if bucket is None or t.info.get("failed"):
                continue
            r = min(max(float(t.reward), 0.0), 1.0) if math.isfinite(t.reward) else 0.0
            for level in _levels(bucket):
                c = self.counts.setdefault(level, [0.0, 0.0])
                c[0] += r
                c[1] += 1.0 - r
            seen.add(t.task_id)
        for tid in seen:
            self.pending.pop(tid, None)

    def metrics(self) -> dict[str, float]:
        """``curriculum/varied_expected`` (mean weight of the last tasks chosen) and ``curriculum/buckets``."""
        out = {"curriculum/buckets": float(sum(b.count("/") == len(self.key) - 1 for b in self.counts if b))}
        if self.last_weights:
            out["curriculum/varied_expected"] = float(np.mean(self.last_weights))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"counts": {b: list(c) for b, c in self.counts.items()}, "pending": dict(self.pending)}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.counts = {b: [float(c[0]), float(c[1])] for b, c in s.get("counts", {}).items()}
        self.pending = dict(s.get("pending", {}))
