"""Preemption: SIGTERM stops a run after its current step, with a checkpoint."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)


@contextmanager
def stop_on_sigterm(trainer: Any) -> Iterator[None]:
    """While inside: the first SIGTERM sets ``trainer.stop_signal`` (the loop checkpoints and stops after
    the current step); a second one exits at once. No-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if trainer.stop_signal is not None:
            raise SystemExit(128 + signum)
        trainer.stop_signal = signum
        log.warning("%s received: stopping after this step with a checkpoint", signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
