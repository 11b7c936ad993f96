"""What ``agentrl view`` reads from a run directory, kept up to date while the run writes it.

A run directory holds ``metrics.jsonl`` (a row per step and per evaluation), ``samples.jsonl``
(episode records), ``config.yaml``, ``doctor.json`` and ``warm_start.jsonl`` (the curve of its supervised warm
start, agentrl/viewer/warm_start.py) as ``agentrl train`` writes them, and ``eval.json``
reports (``agentrl eval --out``) in the directory itself or one level below it; a directory holding
only ``doctor.json`` (``agentrl doctor --out``) is one too. :class:`RunData` reads the
lines appended since its last :meth:`RunData.refresh` (a file that was replaced or shrank, as a
resumed run's ``metrics.jsonl`` is, is read again from the start: its ``generation`` goes up), keeps
the metrics rows and a summary of each episode in memory and the byte offset of each record, which
is read from disk when it is shown.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from agentrl.runs.episodes import EpisodeFormatError, EpisodeRecord, read_eval
from agentrl.viewer.doctor import doctor_stamp, read_doctor
from agentrl.viewer.warm_start import WARM_START_FILE, read_warm_start, warm_start_stamp

RUN_FILES = ("metrics.jsonl", "samples.jsonl", "eval.json", "config.yaml", "doctor.json", WARM_START_FILE)
"""A directory holding one of these (``eval.json`` also one level down) is something to view."""


class ViewError(ValueError):
    """A run directory that cannot be viewed, said in one line."""


def finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither), through lists and dicts."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        try:  # token ids and log-probs: one C-speed pass tells that every number is finite
            if math.isfinite(math.fsum(value)):
                return value
        except (TypeError, ValueError, OverflowError):  # not all numbers, or an infinity among them
            pass
        return [finite(v) for v in value]
    return value


def eval_reports(path: Path) -> list[Path]:
    """``eval.json`` files of a run directory: its own, then those one level down (by name)."""
    own = [path / "eval.json"] if (path / "eval.json").is_file() else []
    return own + sorted(p for p in path.glob("*/eval.json") if p.is_file())


def check_run_dir(path: str | Path) -> Path:
    """``path`` if it is a directory holding a run (see :data:`RUN_FILES`); ViewError otherwise."""
    path = Path(path)
    if not path.is_dir():
        raise ViewError(f"no such run directory {str(path)!r} (give a directory agentrl train or agentrl eval wrote)")
    if not any((path / f).exists() for f in RUN_FILES) and not eval_reports(path):
        raise ViewError(f"{path} holds no run: no metrics.jsonl, samples.jsonl, config.yaml, eval.json or doctor.json "
                        f"(give the directory agentrl train wrote, e.g. runs/NAME, or the --out of agentrl eval "
                        f"or agentrl doctor)")
    return path


def correct(r: EpisodeRecord) -> float | None:
    """Whether the episode solved its task, as evaluation counts it (the ``correct`` component, else a reward of at
    least 1: agent tasks have no ``correct``); None for a failed episode."""
    if r.failed:
        return None
    value = r.reward_components.get("correct", r.reward)
    return None if finite(value) is None else float(value >= 1.0)


def summarize_episode(r: EpisodeRecord, index: int) -> dict[str, Any]:
    """What the episode table shows of a record (the record itself is fetched when opened)."""
    actions = [s for s in r.segments if s.role == "action"]
    versions = sorted({s.version for s in actions if s.version is not None})
    return {"index": index, "step": r.step, "split": r.split, "task_id": r.task_id, "group_id": r.group_id,
            "reward": finite(r.reward), "correct": correct(r), "turns": r.turns, "end_reason": r.end_reason or "-",
            "action_tokens": sum(len(s.token_ids) for s in actions), "tool_calls": len(r.tool_calls),
            "failed": r.failed, "versions": versions, "dataset": r.dataset, "difficulty": r.difficulty,
            "record_version": r.version, "preview": r.response[:160]}


class _Tail:
    """The complete lines appended to a file since the last read (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.inode, self.generation = path, 0, None, 0

    def read(self) -> tuple[bool, list[tuple[int, bytes]]]:
        """(whether the file was replaced and is read from the start, [(byte offset, line)])."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            reset = self.offset > 0
            if reset:
                self.offset, self.inode, self.generation = 0, None, self.generation + 1
            return reset, []
        reset = (self.inode is not None and st.st_ino != self.inode) or st.st_size < self.offset
        if reset:
            self.offset, self.generation = 0, self.generation + 1
        self.inode = st.st_ino
        if st.st_size == self.offset:
            return reset, []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(st.st_size - self.offset)
        end = chunk.rfind(b"\n") + 1  # a half-written last line waits for the next read
        lines, pos = [], self.offset
        for line in chunk[:end].split(b"\n")[:-1]:
            lines.append((pos, line))
            pos += len(line) + 1
        self.offset += end
        return reset, lines


class RunData:
    """One run directory as the viewer shows it (thread-safe: the server answers from a thread pool)."""

    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        self.metrics: list[dict[str, Any]] = []
        self.episodes: list[dict[str, Any]] = []
        self.problems: list[str] = []  # lines that are not records, said once each
        self._offsets: list[int] = []
        self._metrics_tail, self._samples_tail = _Tail(path / "metrics.jsonl"), _Tail(path / "samples.jsonl")
        self._evals: dict[Path, tuple[float, dict[str, Any], list[EpisodeRecord]]] = {}
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        """Goes up when a file was replaced (the client then reloads this run from the start)."""
        return self._metrics_tail.generation + self._samples_tail.generation

    def refresh(self) -> None:
        """Read what was appended since the last call."""
        with self._lock:
            reset, lines = self._metrics_tail.read()
            if reset:
                self.metrics = []
            for _, line in lines:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    self.metrics.append(finite(row))
            reset, lines = self._samples_tail.read()
            if reset:
                self.episodes, self._offsets, self.problems = [], [], []
            for offset, line in lines:
                try:
                    record = EpisodeRecord.from_dict(json.loads(line))
                except (json.JSONDecodeError, EpisodeFormatError, KeyError, TypeError, ValueError) as e:
                    self.problems.append(f"samples.jsonl at byte {offset}: {str(e)[:200]}")
                    continue
                self.episodes.append(summarize_episode(record, len(self.episodes)))
                self._offsets.append(offset)

    def record(self, index: int) -> dict[str, Any]:
        """The full record of episode ``index`` of ``samples.jsonl`` (IndexError if there is none)."""
        with self._lock:
            if index < 0:
                raise IndexError(index)
            offset = self._offsets[index]
        with open(self.path / "samples.jsonl", "rb") as f:
            f.seek(offset)
            return finite(EpisodeRecord.from_dict(json.loads(f.readline())).to_dict())

    def evals(self) -> list[dict[str, Any]]:
        """Every eval report of the run: ``{"name", "report", "episodes"}`` (episode summaries)."""
        out = []
        for path in eval_reports(self.path):
            report, records = self._eval(path)
            name = str(path.parent.relative_to(self.path)) if path.parent != self.path else "eval.json"
            out.append({"name": name, "report": finite(report),
                        "episodes": [summarize_episode(r, i) for i, r in enumerate(records)]})
        return out

    def eval_record(self, report: int, index: int) -> dict[str, Any]:
        """The full record of episode ``index`` of eval report ``report`` (IndexError if there is none)."""
        if report < 0 or index < 0:
            raise IndexError(index)
        return finite(self._eval(eval_reports(self.path)[report])[1][index].to_dict())

    def _eval(self, path: Path) -> tuple[dict[str, Any], list[EpisodeRecord]]:
        """An eval report, read again when its file changed."""
        mtime = path.stat().st_mtime
        with self._lock:
            cached = self._evals.get(path)
        if cached is None or cached[0] != mtime:
            try:
                report, records = read_eval(path)
            except EpisodeFormatError as e:
                report, records = {"error": str(e)}, []
            cached = (mtime, report, records)
            with self._lock:
                self._evals[path] = cached
        return cached[1], cached[2]

    def doctor(self) -> dict[str, Any]:
        """The run's ``doctor.json``: ``{"state": "ok", "report"}``, ``{"state": "error", "error"}`` or
        ``{"state": "missing"}`` (agentrl/viewer/doctor.py)."""
        return read_doctor(self.path)

    def doctor_stamp(self) -> str | None:
        """Changes when ``doctor.json`` is written (None without one)."""
        return doctor_stamp(self.path)

    def warm_start(self) -> dict[str, Any]:
        """The curve of the run's warm start: ``{"rows", "error"}`` (no rows without one; agentrl/viewer/warm_start.py)."""
        return read_warm_start(self.path)

    def warm_start_stamp(self) -> str | None:
        """Changes when ``warm_start.jsonl`` is written (None without one)."""
        return warm_start_stamp(self.path)

    def eval_stamp(self) -> list[float]:
        """The modification times of the eval reports (changes when one is written)."""
        return [p.stat().st_mtime for p in eval_reports(self.path)]

    def summary(self) -> dict[str, Any]:
        """Name, path, config highlights and how much there is."""
        return {"name": self.name, "path": str(self.path), "config": config_highlights(self.path),
                "metrics": len(self.metrics), "episodes": len(self.episodes), "generation": self.generation,
                "evals": len(eval_reports(self.path)), "problems": self.problems[:20]}


def config_highlights(path: Path) -> dict[str, Any]:
    """A few settings of the run's ``config.yaml`` worth showing beside its name ({} without one)."""
    import yaml

    try:
        cfg = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(cfg, dict):
        return {}
    keys = (("model", "path"), ("env", "id"), ("algo", "estimator"), ("rollout", "engine"), ("rollout", "async"),
            ("rollout", "n_samples"), ("data", "prompts_per_step"), ("learner", "lr"), ("learner", "total_steps"))
    out = {}
    for section, key in keys:
        value = (cfg.get(section) or {}).get(key) if isinstance(cfg.get(section), dict) else None
        if value is not None:
            out[f"{section}.{key}"] = value
    return out


def run_names(paths: list[Path]) -> list[str]:
    """Short distinct names: the directory names, with their parents where two are the same."""
    base = [p.resolve().name or str(p) for p in paths]
    names = [f"{p.resolve().parent.name}/{b}" if base.count(b) > 1 else b for p, b in zip(paths, base)]
    return [n if names.count(n) == 1 else f"{n} ({i + 1})" for i, n in enumerate(names)]
