"""Test envs for concurrent env steps: one that sleeps (sync or ``async def step``), one whose
``k``-th step hangs or raises. Registered by module path (``flaky_envs:FlakyArithmetic``) with this
folder on ``sys.path``."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

from environments.arithmetic import ArithmeticEnv

_calls = itertools.count()
_lock = threading.Lock()


def reset_counter() -> None:
    """Number the next step 0 again (each test starts from a known count)."""
    global _calls
    with _lock:
        _calls = itertools.count()


class FlakyArithmetic(ArithmeticEnv):
    """Arithmetic whose ``hang_at``-th step (counted over every copy) sleeps ``hang_s`` and whose
    ``raise_at``-th step raises; ``delay_s`` is added to every step (a slow verifier or tool)."""

    def __init__(self, *, hang_at: int = -1, raise_at: int = -1, hang_s: float = 5.0, delay_s: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hang_at, self.raise_at, self.hang_s, self.delay_s = hang_at, raise_at, hang_s, delay_s

    def step(self, action: str):
        with _lock:
            k = next(_calls)
        if k == self.raise_at:
            raise RuntimeError(f"step {k}: the verifier crashed")
        time.sleep(self.hang_s if k == self.hang_at else self.delay_s)
        return super().step(action)


class AsyncSleepArithmetic(ArithmeticEnv):
    """Arithmetic with ``async def step`` that awaits ``delay_s`` (forever past ``hang_at``-th step)."""

    def __init__(self, *, delay_s: float = 0.1, hang_at: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay_s, self.hang_at = delay_s, hang_at

    async def step(self, action: str):  # type: ignore[override]
        with _lock:
            k = next(_calls)
        await asyncio.sleep(3600 if k == self.hang_at else self.delay_s)
        return ArithmeticEnv.step(self, action)


class TwoTurnArithmetic(ArithmeticEnv):
    """Two turns: the first answer gets "check again" as feedback, the second is scored. ``on_first_step``
    (if set) runs inside the first step (a test's hook: e.g. the learner publishing new weights)."""

    max_turns = 2
    on_first_step: Any = None

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        self.turn += 1
        if self.turn == 1:
            if self.on_first_step is not None:
                self.on_first_step()
            return "check again", 0.0, False, False, {"verified": True}
        return super().step(action)
