"""The A/B clock of the side-by-side benches (``train_step.py``, ``agentic_trl.py``): TRL's own ``train()``
loop runs, and after each TRL step a callback runs our side once, outside TRL's clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def ab_callback(trl_times: list[float], ours: Callable[[], None]) -> Any:
    """A ``TrainerCallback`` that appends each TRL step's seconds to ``trl_times`` (from the end of the last
    ``ours()``), then calls ``ours()`` (which times itself)."""
    from transformers import TrainerCallback

    class AB(TrainerCallback):
        mark = 0.0

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            AB.mark = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            trl_times.append(time.perf_counter() - AB.mark)
            ours()
            AB.mark = time.perf_counter()

    return AB()
