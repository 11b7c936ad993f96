"""``agentrl plan``: parameter counts and LoRA sizes by hand, the learner's own call split, the GPU
recipe's table, and every figure of the CPU demo's plan (also with LoRA and activation checkpointing)
within 25% of a measured run
(SmolLM2's: tests/real/test_memory_plan_smollm2.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from agentrl.cli import main
from agentrl.config import load_config
from agentrl.training.memory_plan import (
    GIB,
    KNOWN_CONFIGS,
    compare,
    learner_call,
    make_plan,
    model_shape,
    plan_run,
)

ROOT = Path(__file__).resolve().parents[1]


def qwen_shape(name: str = "Qwen/Qwen2.5-0.5B-Instruct"):
    from transformers import AutoConfig

    fields = dict(KNOWN_CONFIGS[name])
    return model_shape(AutoConfig.for_model(fields.pop("model_type"), **fields))


def test_parameter_and_lora_counts_by_hand():
    shape = qwen_shape()
    assert shape.params == 494_032_768  # Qwen2.5-0.5B's published count (tied embeddings counted once)
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim) == (24, 14, 2, 64)
    # rank 8 on q and v: q 896 -> 896, v 896 -> 128, per layer 8 * (896 + 896) + 8 * (896 + 128), 24 layers
    assert shape.lora_params(8, ["q_proj", "v_proj"]) == 24 * (8 * 1792 + 8 * 1024)
    # all-linear adds k (896 -> 128), o (896 -> 896), gate and up (896 -> 4864), down (4864 -> 896)
    assert shape.lora_params(1, ["all-linear"]) == 24 * (1792 + 1024 + 1024 + 1792 + 2 * 5760 + 5760)
    assert qwen_shape("Qwen/Qwen2.5-1.5B").params == 1_543_714_304


@pytest.mark.parametrize("overrides", [
    [],  # the demo: one call of 256 samples
    ["learner.micro_batch_size=64", "learner.call_tokens=100"],
    ["learner.call_tokens=300", "rollout.n_samples=4"],
    ["learner.shared_prefix=false", "learner.call_tokens=256"],
])
def test_the_planned_call_is_the_learners_largest(overrides, tiny_arith):
    """``learner_call`` splits a full-length micro-batch as ``PolicyLearner.micro_batches`` does."""
    from agentrl.models import load_causal_lm
    from agentrl.training.learner import PolicyLearner
    from agentrl.training.memory_measure import worst_case_batch

    cfg = load_config(ROOT / "examples/configs/cpu_demo.yaml", overrides)
    path, _ = tiny_arith
    model = load_causal_lm(path, device="cpu")
    shape = model_shape(model.config)
    learner = PolicyLearner(model, cfg.learner, cfg.algo, max_new_tokens=4)
    exp = worst_case_batch(cfg.data.prompts_per_step, cfg.rollout.n_samples, 7, 4, shape.vocab, torch.device("cpu"))
    calls = learner.micro_batches(exp)
    biggest = max(calls, key=len)
    prompts, rows = learner_call(cfg, shape, 7, 4, on_gpu=False)
    assert rows == len(biggest)
    assert prompts == (len(set(biggest.group_ids.tolist())) if cfg.learner.shared_prefix else rows)


def test_the_gpu_recipe_plan_holds_its_figures():
    """gsm8k_grpo.yaml on one 80 GiB GPU (docs/gpu.md's table): vLLM takes half, the update fits in the rest."""
    cfg = load_config(ROOT / "examples/configs/gsm8k_grpo.yaml")
    plan = make_plan(cfg, qwen_shape(), prompt=256, response=1024, gpu_bytes=80 * GIB)
    assert plan.device == "GPU"
    assert plan.get("weights") == 494_032_768 * 2 and plan.get("optimizer") == 494_032_768 * 2 * 2
    assert plan.get("engine (vLLM)") == 40 * GIB and plan.get("reference") == plan.get("weights")
    assert plan.facts["call_rows"] == 8 and plan.facts["call_prompts"] == 1  # micro-batch 8: one GRPO group
    assert 5 * GIB < plan.get("activations") < 30 * GIB
    assert plan.total() < 80 * GIB


def test_plan_cli_prints_the_table_and_names_what_it_lacks(capsys, tmp_path):
    assert main(["plan", str(ROOT / "examples/configs/gsm8k_grpo.yaml"), "--prompt-tokens", "256",
                 "--gpu-gib", "141"]) == 0
    out = capsys.readouterr().out
    assert "memory plan per GPU (model Qwen/Qwen2.5-0.5B-Instruct (built-in config)" in out
    assert re.search(r"^engine \(vLLM\) +70\.500 +always", out, re.M) and re.search(r"^peak +\d+\.\d+", out, re.M)
    code = main(["plan", str(ROOT / "examples/configs/gsm8k_grpo.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "give --prompt-tokens N" in err


def assert_within(rows, tolerance: float = 0.25) -> None:
    for name, planned, measured in rows:
        assert measured > 0, name
        assert abs(planned - measured) <= tolerance * measured, (
            f"{name}: planned {planned / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB")


@pytest.mark.parametrize("overrides", [[], ["learner.gradient_checkpointing=true", "learner.lora.r=8"]])
def test_every_figure_of_the_cpu_demo_plan_is_within_25_percent_of_a_measured_run(overrides):
    from agentrl.training.memory_measure import measure_run

    cfg = load_config(ROOT / "examples/configs/cpu_demo.yaml", ["model.warm_start.enabled=false", *overrides])
    plan, _ = plan_run(cfg)
    measured = measure_run(cfg, plan.facts["prompt_tokens"], plan.facts["response_tokens"])
    rows = compare(plan, measured)
    print(rows)
    assert [r[0] for r in rows] == ["weights", "optimizer", "gradients", "activations", "engine decode weights",
                                    "engine KV cache", "peak"]
    assert_within(rows)
