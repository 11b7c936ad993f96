"""``agentrl plan`` for the SmolLM2 recipe (examples/configs/smollm2_addition.yaml: LoRA on all linears,
chat-template prompts, the HF engine's fused decode weights): every figure within 25% of the same
worst case measured on CPU. Two prompts per step instead of eight keep it short: the learner's call
(16 samples) and so the activation figure are the recipe's own; the KV cache scales with the batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.training.memory_measure import measure_run
from agentrl.training.memory_plan import compare, plan_run

pytestmark = pytest.mark.real
ROOT = Path(__file__).resolve().parents[2]


def test_every_figure_of_the_smollm2_plan_is_within_25_percent_of_a_measured_run(smollm2):
    cfg = load_config(ROOT / "examples/configs/smollm2_addition.yaml", [f"model.path={smollm2}",
                                                                          "data.prompts_per_step=2"])
    full = load_config(ROOT / "examples/configs/smollm2_addition.yaml", [f"model.path={smollm2}"])
    plan, _ = plan_run(cfg)
    assert plan.facts["call_rows"] == plan_run(full)[0].facts["call_rows"] == 16
    measured = measure_run(cfg, plan.facts["prompt_tokens"], plan.facts["response_tokens"])
    rows = compare(plan, measured)
    print(rows)
    for name, planned, got in rows:
        assert abs(planned - got) <= 0.25 * got, f"{name}: planned {planned / 2**20:.1f} MiB, measured {got / 2**20:.1f}"
    assert plan.get("activations") > 0.5 * 2**30  # the figure that matters here: ~1.3 GB for one call
