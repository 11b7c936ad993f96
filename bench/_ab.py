"""A/B helpers of the side-by-side benches. Against TRL (``train_step.py``, ``agentic_trl.py``): TRL's own
``train()`` loop runs, and after each TRL step a callback runs our side once, outside TRL's clock. Against an
earlier checkout (``agent_step.py``, ``warm_start.py``): each round runs a bench's ``worker`` in a fresh process
in each checkout, alternating which goes first (``by_checkout``)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


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


def config_at(root: str, config: str) -> str:
    """The checkout's own copy of ``config`` when it is a file of this repository (so each checkout runs
    the config as it stood there), else ``config``."""
    try:
        own = Path(root) / Path(config).relative_to(ROOT)
    except ValueError:
        return config
    return str(own) if own.is_file() else config


def fresh_process(bench: str, call: str, cwd: str, threads: int) -> dict:
    """``b.<call>`` with ``b`` the module ``bench`` of bench/ (``call``: a call expression, its arguments as
    Python literals) in a fresh process whose working directory is ``cwd``, with ``threads`` torch threads: the
    JSON dict it returns. bench/ goes last on that process's path (its sandbox.py would shadow the package)."""
    code = (f"import json, sys; sys.path.append({str(HERE)!r}); import {bench} as b; "
            f"print('BENCH' + json.dumps(b.{call}))")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=7200)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("BENCH")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"the bench worker {bench} in {cwd} failed: {r.stderr[-3000:]}")
    return json.loads(lines[-1][5:])


def checkout_worker(bench: str, root: str, config: str, overrides: list[str], steps: int, warmup: int,
                    threads: int) -> dict:
    """``bench.worker(root, config, overrides, steps, warmup)`` (a module of bench/) in a fresh process whose
    working directory is the checkout ``root``, with ``threads`` torch threads: the JSON dict it returns."""
    config = config_at(root, config)
    return fresh_process(bench, f"worker({root!r}, {config!r}, {overrides!r}, {steps}, {warmup})", root, threads)


def by_checkout(before: str | None, rounds: int, run: Callable[[str], dict], digits: int = 2) -> dict[str, list[dict]]:
    """``run(root)`` for this checkout (and ``before``, a directory, when given) each round, alternating which goes
    first: {"before": [...], "this": [...]} of the rounds' results (each with its ``step_s`` list)."""
    checkouts = {"this": str(ROOT)}
    if before:
        checkouts = {"before": str(Path(before).resolve()), "this": str(ROOT)}
    runs: dict[str, list[dict]] = {name: [] for name in checkouts}
    for k in range(rounds):
        order = list(checkouts.items()) if k % 2 == 0 else list(reversed(checkouts.items()))
        for name, root in order:
            runs[name].append(run(root))
            print(f"round {k + 1}: {name} {statistics.median(runs[name][-1]['step_s']):.{digits}f} s/step", flush=True)
    return runs
