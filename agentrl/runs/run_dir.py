"""The rules of a run directory, shared by the RL trainer (single process and Ray) and the SFT / RM /
DPO stages, so that two runs never mix:

- a new run goes into a directory that does not exist yet or holds no run (no ``metrics.jsonl``,
  no ``checkpoints/``); a directory that holds one is an error naming ``--resume`` and
  ``--overwrite``; ``overwrite=True`` clears it first;
- ``resume=True`` needs a directory with a checkpoint to continue from;
- ``config.yaml`` is written by :func:`save_run_config` once the run has been built, so a launch
  that fails never overwrites the config of the run that is there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from agentrl.config import ConfigError, save_config

RUN_MARKERS = ("metrics.jsonl", "checkpoints")
"""What makes a directory hold a run (a config.yaml alone is a launch that never got going)."""


class RunDirError(ConfigError):
    """A run directory that cannot be used as asked, stated in one line with the fix."""


def run_dir_path(cfg: Any, run_dir: str | Path | None = None) -> Path:
    """The run directory: ``run_dir`` if given, else ``log.run_dir`` with ``{name}`` = ``log.name``."""
    return Path(run_dir or cfg.log.run_dir.format(name=cfg.log.name))


def holds_run(path: Path) -> bool:
    """True when ``path`` holds metrics or checkpoints of a run."""
    return any((path / m).exists() for m in RUN_MARKERS)


def prepare_run_dir(path: str | Path, *, resume: bool = False, overwrite: bool = False,
                    command: str = "agentrl train CONFIG") -> Path:
    """Check (and with ``overwrite`` clear) the run directory ``path``; create it; return it."""
    path = Path(path)
    if resume:
        if overwrite:
            raise RunDirError("--resume and --overwrite contradict each other; give one of them")
        if not path.is_dir():
            raise RunDirError(f"cannot resume {path}: no such directory (the run directory of the run to continue)")
        if not (path / "checkpoints").is_dir() or not any((path / "checkpoints").iterdir()):
            raise RunDirError(f"cannot resume {path}: it holds no checkpoint yet (set checkpoint.every=N to "
                              f"save during training); start it again with: {command} --run-dir {path} --overwrite")
        return path
    if path.exists() and not path.is_dir():
        raise RunDirError(f"run directory {path} is a file; give another --run-dir or log.name")
    if holds_run(path):
        if not overwrite:
            raise RunDirError(f"run directory {path} already holds a run; continue it with --resume {path}, "
                              f"replace it with --overwrite, or pick another log.name / --run-dir")
        for child in path.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_run_config(cfg: Any, path: Path) -> None:
    """Write the resolved config beside the run (call once the run is built)."""
    save_config(cfg, path / "config.yaml")
