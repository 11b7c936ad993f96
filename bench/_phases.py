"""Where an agentic step's seconds go: wall time per phase, summed over the threads that ran it.

``Phases.install()`` wraps the functions an episode of a workspace env passes through (generation,
tool-call parsing, workspace builds, command round trips, seal, the grader's workspace, the verifier,
experience, the update); ``Phases.table()`` gives seconds, calls and ms per call of each. A phase
nested in another is counted in both (``grade`` holds ``grader start`` and ``verifier``), so the
column does not sum to the step. Used by ``bench/agent_step.py`` (a helper, not a bench: ``run_all`` skips files starting with ``_``); imports nothing heavy itself.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections import defaultdict
from typing import Any

# (module, class or None, attribute, phase); a class's method is wrapped on the class
WRAPPED = (
    ("agentrl.rollout.engines.hf", "HFEngine", "generate", "generation"),
    ("environments.workspace_env", "WorkspaceEnv", "reset", "env reset"),
    ("environments.workspace_env", "WorkspaceEnv", "step", "env step (all of it)"),
    ("environments.workspace_env", "WorkspaceEnv", "run_call", "tool calls (parse excluded)"),
    ("environments.workspace_env", "WorkspaceEnv", "finish", "episode end (seal + grade)"),
    ("sandbox.workspace.runtime", "RuntimeWorkspace", "__init__", "workspace start (build or restore)"),
    ("sandbox.workspace.runtime", "RuntimeWorkspace", "exec", "command round trips"),
    ("sandbox.workspace.runtime", "RuntimeWorkspace", "seal", "seal (tree + diff)"),
    ("sandbox.workspace.runtime", "RuntimeWorkspace", "close", "workspace close"),
    ("sandbox.workspace.runtime", "RuntimeWorkspace", "put_dir", "tests copied in"),
    ("sandbox.workspace.runtime", "RuntimeWorkspace", "grade", "verifier (grade request)"),
    ("environments.harbor.env", "HarborEnv", "grade", "grade (grader start + verifier)"),
    ("agentrl.training.trainer", "Trainer", "make_experience", "experience"),
    ("agentrl.training.trainer", "Trainer", "reference_and_values", "reference log-probs"),
)


class Phases:
    """Seconds and calls per phase (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self._undo: list[tuple[Any, str, Any]] = []

    def install(self) -> Phases:
        for module, cls, attr, phase in WRAPPED:
            try:  # an older checkout may lack one: it is left out of the table
                owner = getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)
                original = owner.__dict__[attr]
            except (ImportError, AttributeError, KeyError):
                continue
            setattr(owner, attr, self._wrap(original, phase))
            self._undo.append((owner, attr, original))
        return self

    def uninstall(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()

    def _wrap(self, fn: Any, phase: str) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.perf_counter() - start
                with self._lock:
                    self.seconds[phase] += took
                    self.calls[phase] += 1
        return timed

    def reset(self) -> None:
        with self._lock:
            self.seconds.clear()
            self.calls.clear()

    def rows(self, steps: int) -> list[tuple[str, float, float, float]]:
        """(phase, seconds per step, calls per step, ms per call), in ``WRAPPED``'s order."""
        out = []
        for _, _, _, phase in WRAPPED:
            if self.calls.get(phase):
                s, n = self.seconds[phase], self.calls[phase]
                out.append((phase, s / steps, n / steps, 1000 * s / n))
        return out
