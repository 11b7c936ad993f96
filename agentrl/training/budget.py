"""One wall-clock budget for a whole ``agentrl train`` (``run.max_seconds``): loading, the warm start, RL,
every evaluation and the final save.

The budget is spent in order. The warm start may take ``run.warm_start_share`` of what is left when it
begins. RL then steps while what is left covers one more step (the median of the last steps) and the
final evaluation (the longest evaluation so far, plus a margin); a periodic evaluation is skipped when it
would not leave the final one its room. The decisions are pure functions of measured seconds
(:func:`may_step`, :func:`may_evaluate`), so they are tested without a clock.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

FINAL_MARGIN = 1.1
"""The final evaluation is reserved this many times the longest evaluation measured (its episodes may run
longer after RL, and the save follows it)."""
SAVE_SHARE = 0.02
"""A share of the whole budget kept for the final save and the closing line, at most ``SAVE_CAP_S``."""
SAVE_CAP_S = 10.0
"""The most seconds kept for the save (a 900 s budget kept 18 s and ended 27 s early)."""
STEPS_KEPT = 5
"""The last this many step times estimate the next one (their median: a first step's one-time costs fade)."""


def may_step(left: float, step_s: float, eval_s: float, total: float) -> bool:
    """True when ``left`` seconds hold one more RL step of ``step_s`` and the final evaluation (``eval_s``
    measured) with its margin and the save's reserve of a ``total`` s budget (:func:`save_reserve`)."""
    return left - step_s >= FINAL_MARGIN * eval_s + save_reserve(total)


def save_reserve(total: float) -> float:
    """Seconds kept for the final save of a ``total`` s budget."""
    return min(SAVE_SHARE * total, SAVE_CAP_S)


def may_evaluate(left: float, eval_s: float, total: float) -> bool:
    """True when ``left`` seconds hold a periodic evaluation of ``eval_s`` and still the final one."""
    return may_step(left, eval_s, eval_s, total)


class RunBudget:
    """What is left of ``seconds`` since ``started`` (``time.monotonic`` seconds; 0 seconds: no budget,
    every question answers yes). It records the evaluations' and steps' durations it is told of."""

    def __init__(self, seconds: float, warm_start_share: float = 0.5, started: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.warm_start_share, self.clock = float(seconds), warm_start_share, clock
        self.started = clock() if started is None else started
        self.eval_s = 0.0
        self.steps: list[float] = []
        self.skipped_evals = 0

    @property
    def active(self) -> bool:
        """True when there is a budget."""
        return self.seconds > 0

    def used(self) -> float:
        """Seconds since the run started."""
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left (``inf`` without a budget; negative once overspent)."""
        return self.seconds - self.used() if self.active else math.inf

    def warm_start_seconds(self) -> float:
        """The warm start's time cap (0: none): its share of what is left, at least a millisecond."""
        return max(1e-3, self.warm_start_share * self.left()) if self.active else 0.0

    def observe_eval(self, seconds: float) -> None:
        """An evaluation took ``seconds`` (the final one is reserved the longest)."""
        self.eval_s = max(self.eval_s, seconds)

    def observe_step(self, seconds: float) -> None:
        """An RL step took ``seconds``."""
        self.steps = [*self.steps[-(STEPS_KEPT - 1):], seconds]

    def step_estimate(self) -> float:
        """The next step's seconds: the median of the last ones (0 before the first)."""
        return statistics.median(self.steps) if self.steps else 0.0

    def may_step(self) -> bool:
        """One more RL step fits before the final evaluation."""
        return not self.active or may_step(self.left(), self.step_estimate(), self.eval_s, self.seconds)

    def may_evaluate(self) -> bool:
        """A periodic evaluation fits (counts the ones that do not)."""
        fits = not self.active or may_evaluate(self.left(), self.eval_s, self.seconds)
        self.skipped_evals += not fits
        return fits

    def stop_line(self) -> str:
        """Why RL stopped here, in one line."""
        return (f"run budget: {self.left():.0f} s of run.max_seconds={self.seconds:g} left; the final evaluation "
                f"takes ~{self.eval_s:.0f} s, a step ~{self.step_estimate():.1f} s: RL stops here")

    def summary(self) -> str:
        """The closing words: seconds used of the budget, evaluations skipped."""
        skipped = f", {self.skipped_evals} periodic evaluation(s) skipped for it" if self.skipped_evals else ""
        return f"whole run {self.used():.0f} s of run.max_seconds={self.seconds:g}{skipped}"
