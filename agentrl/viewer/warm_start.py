"""A run directory's ``warm_start.jsonl`` (the supervised warm start before RL, written by ``agentrl train``:
agentrl/training/warm_start.py) as the viewer shows it, checked here rather than trusted.

Each line is a row ``{"step", "loss", "seconds"}``, with ``"dev_accuracy"`` on the steps where the warm start
was evaluated (the train loss of every step, or of every few steps in a long one: the writer bounds it).
:func:`read_warm_start` never raises for what is in the file: ``{"rows": [...], "error": None}``, with
``rows`` empty when there is no file (a run without a warm start, or one written before warm starts kept
their curve); lines that are not rows are skipped and counted in ``error``; a file too large to be a curve
is not read. The viewer imports nothing of ``agentrl.training``: the name of the file is repeated here.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

WARM_START_FILE = "warm_start.jsonl"
MAX_BYTES = 8 * 1024 * 1024
"""A warm-start curve is at most a few thousand short rows; a file larger than this is not one."""
FIELDS = ("step", "loss", "dev_accuracy", "seconds")


def read_warm_start(run_dir: Path) -> dict[str, Any]:
    """The warm start's rows by step, or why some could not be read (see the module docstring)."""
    path = run_dir / WARM_START_FILE
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return {"rows": [], "error": None}
    except OSError as e:
        return {"rows": [], "error": f"{WARM_START_FILE}: cannot read it ({e.strerror})"}
    if size > MAX_BYTES:
        return {"rows": [], "error": f"{WARM_START_FILE}: {size} bytes, not a warm-start curve (at most {MAX_BYTES})"}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        return {"rows": [], "error": f"{WARM_START_FILE}: cannot read it ({str(e)[:200]})"}
    rows, bad = {}, 0
    for line in lines:
        row = _row(line)
        if row is None:
            bad += line.strip() != ""
            continue
        rows[row["step"]] = row
    error = f"{WARM_START_FILE}: {bad} line(s) that are not rows skipped" if bad else None
    return {"rows": [rows[s] for s in sorted(rows)], "error": error}


def _row(line: str) -> dict[str, Any] | None:
    """One line as a row: an integer ``step`` and numbers (NaN, infinities and non-numbers as null)."""
    try:
        raw = json.loads(line, parse_constant=lambda name: None)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("step"), int) or isinstance(raw["step"], bool):
        return None
    return {k: _number(raw[k]) for k in FIELDS if k in raw}


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def warm_start_stamp(run_dir: Path) -> str | None:
    """Changes when ``warm_start.jsonl`` is written (None without one): the page fetches the curve again."""
    try:
        st = os.stat(run_dir / WARM_START_FILE)
    except OSError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"
