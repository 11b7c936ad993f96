"""Episodes the env failed (``step`` raised, or ran past ``env.step_timeout_s``): each distinct error
shown once, the rest counted, and a run stopped when too many fail.

An executor marks such an episode ``info["failed"]`` with ``info["error"]``, ``info["error_at"]``
(``file:line`` where it was raised) and ``info["traceback"]`` (``agentrl.rollout.env_pool.failure_info``).
:class:`EnvFailures` sees every batch of the run: the first traceback of each distinct error (its type
and where it was raised) is printed once and appended to ``RUN_DIR/env_errors.log``; later ones are
counted on one line per step. Past ``env.max_failure_rate`` of the run's training episodes (checked once
at least ``min_episodes`` ran) the run stops with :class:`EnvFailureRateError`, a one-line reason.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from agentrl.env import EnvFailureRateError
from agentrl.types import Trajectory

LOG_NAME = "env_errors.log"


def error_key(info: dict) -> str:
    """What makes two failures the same error: the exception type and where it was raised."""
    kind = str(info.get("error", "error")).split(":", 1)[0]
    return f"{kind} at {info['error_at']}" if info.get("error_at") else kind


class EnvFailures:
    """Counts failed episodes and reports them (see the module docstring)."""

    def __init__(self, run_dir: str | Path | None, max_rate: float, min_episodes: int = 32,
                 out: Callable[[str], None] | None = None) -> None:
        self.path = None if run_dir is None else Path(run_dir) / LOG_NAME
        self.max_rate, self.min_episodes = max_rate, min_episodes
        self.out = out or (lambda text: print(text, file=sys.stderr, flush=True))
        self.counts: Counter[str] = Counter()  # every failure of the run, by error key
        self.first: dict[str, str] = {}  # error key -> the first one's "error" line
        self.episodes = self.failed = 0  # training episodes (evaluation is reported, not counted)

    def observe(self, trajs: list[Trajectory], where: str = "training") -> None:
        """Report the failed episodes of one batch (``where``: training or evaluation)."""
        repeats: Counter[str] = Counter()
        for t in trajs:
            if not t.info.get("failed"):
                continue
            key = error_key(t.info)
            if key not in self.first:
                self.first[key] = str(t.info.get("error", key))
                self._show_first(key, t, where)
            else:
                repeats[key] += 1
            self.counts[key] += 1
        if where == "training":
            self.episodes += len(trajs)
            self.failed += sum(bool(t.info.get("failed")) for t in trajs)
        if repeats:
            more = ", ".join(f"{n} x {k}" for k, n in repeats.most_common())
            so_far = f"; {self.failed} of {self.episodes} training episodes failed so far" if self.episodes else ""
            self.out(f"env errors in {where}: {more} (shown once above{self._in_log()}){so_far}")

    def check(self) -> None:
        """Raise :class:`EnvFailureRateError` when the failed share of training episodes is too high."""
        if self.max_rate >= 1 or self.episodes < self.min_episodes or not self.failed:
            return
        rate = self.failed / self.episodes
        if rate > self.max_rate:
            key, _ = self.counts.most_common(1)[0]
            raise EnvFailureRateError(
                f"{self.failed} of {self.episodes} episodes ({rate:.0%}) failed in the env, more than "
                f"env.max_failure_rate={self.max_rate:g}; most often {self.first[key]} ({key}){self._in_log()}")

    def _show_first(self, key: str, t: Trajectory, where: str) -> None:
        trace = str(t.info.get("traceback") or t.info.get("error", key)).rstrip()
        head = f"env error in {where} (task {t.task_id}), shown once; later ones are counted:"
        self.out(f"{head}\n{trace}")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{head}\n{trace}\n\n")

    def _in_log(self) -> str:
        return f"; tracebacks in {self.path}" if self.path is not None else ""
