"""Atomic checkpoints: a normal Hugging Face policy dir plus the training state.

``RUN/checkpoints/step_000010/`` holds ``policy/`` (``save_pretrained``: transformers and vLLM load
it), ``trainer_state.pt`` (optimizer, scheduler, RNG states, data position, step, KL coefficient).
Written to a temporary dir, then renamed, so a crash never leaves a half checkpoint; the last
``keep`` are kept.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

PREFIX = "step_"


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch global RNG states."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    keep: int = 2) -> Path:
    """Write ``checkpoints/step_NNNNNN`` atomically and prune older ones beyond ``keep``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp_{PREFIX}{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "policy")
    tokenizer.save_pretrained(tmp / "policy")
    torch.save({**state, "step": step, "rng": rng_state()}, tmp / "trainer_state.pt")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(PREFIX) and (p / "trainer_state.pt").exists())


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    """The training state saved beside the policy (call ``set_rng_state(state["rng"])`` to resume)."""
    return torch.load(Path(ckpt) / "trainer_state.pt", weights_only=False)


def truncate_metrics(run_dir: Path, step: int) -> int:
    """Cut ``metrics.jsonl`` back to the rows of steps <= ``step`` (the checkpoint a run resumes from).

    Rows a crashed run wrote after its last checkpoint (and a half-written last line) would
    otherwise be duplicated by the resumed run; they move to ``metrics.discarded.jsonl``. The file is
    replaced atomically. Returns the number of rows moved.
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    keep, drop = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            drop.append(line)
            continue
        (keep if row.get("step", 0) <= step else drop).append(line)
    if drop:
        with open(path.with_name("metrics.discarded.jsonl"), "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in drop))
        tmp = path.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
        os.replace(tmp, path)
    return len(drop)
