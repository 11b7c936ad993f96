"""LoRA (peft): only adapters train, the reference is the same base weights with adapters off, merged
weights equal peft's own merge, checkpoints hold the adapter, export writes a plain model."""

from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")

from agentrl.config import load_config  # noqa: E402
from agentrl.config.sections import LoraConfig  # noqa: E402
from agentrl.models import load_causal_lm  # noqa: E402
from agentrl.training.learner import sequence_logprobs  # noqa: E402
from agentrl.training.lora import (  # noqa: E402
    apply_lora,
    parameter_report,
    policy_weights,
)
from agentrl.training.trainer import Trainer  # noqa: E402
from tests.test_packing import make_batch  # noqa: E402

ARGS = ["model.warm_start.enabled=false", "data.prompts_per_step=4", "rollout.n_samples=4", "data.eval_tasks=4",
        "rollout.max_new_tokens=4", "log.progress=false", "log.tensorboard=false", "algo.kl_mode=loss",
        "algo.kl_coef=0.1", "algo.entropy_coef=0.05", "learner.lr=5e-2", "learner.total_steps=1",
        "learner.lora.r=8", "learner.lora.alpha=16", "env.kwargs={digits: 2, template: '{expr}=', bare_answer: true}"]


def scores(model, exp):
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, exp.sequences, exp.attention_mask)
    return lp * exp.action_mask


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A LoRA GRPO run of one step with a KL loss (the reference is needed), checkpointed."""
    run = tmp_path_factory.mktemp("lora") / "run"
    cfg = load_config(None, ARGS)
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=run)
    base = load_causal_lm(trainer.model_path, device="cpu")
    exp = make_batch(trainer.tokenizer)
    before = scores(trainer.model, exp)
    trainer.step()
    trainer.step_idx = 1
    ckpt = trainer.save()
    return trainer, base, exp, before, ckpt


def test_config_turns_lora_on_and_only_adapters_train(trained):
    trainer, base, *_ = trained
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    report = parameter_report(trainer.model, trainer.learner.optimizer)
    n_lora = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    assert report["params/trainable"] == n_lora
    assert report["params/total"] == sum(p.numel() for p in base.parameters()) + n_lora
    n_tensors = sum(1 for p in trainer.model.parameters() if p.requires_grad)
    # AdamW: two fp32 moments per parameter and a step count per tensor
    assert report["memory/optimizer_mb"] == pytest.approx((8 * n_lora + 4 * n_tensors) / 2**20)
    for name, p in trainer.model.get_base_model().named_parameters():  # the base did not move
        if ".lora_" not in name:
            torch.testing.assert_close(p, base.state_dict()[name.replace(".base_layer.", ".")], atol=0, rtol=0)


def test_reference_is_the_base_with_adapters_off_sharing_its_storage(trained):
    trainer, base, exp, before, _ = trained
    ref = trainer.reference
    assert ref.model is trainer.model  # no second copy
    policy_ptrs = {p.data_ptr() for p in trainer.model.parameters()}
    assert {p.data_ptr() for p in ref.model.parameters()} == policy_ptrs
    after = scores(trainer.model, exp)
    assert (after - before).abs().max() > 1e-3  # the adapters moved the policy
    torch.testing.assert_close(ref.logprobs(exp)[:, :before.shape[1]] * exp.action_mask, scores(base, exp),
                               atol=1e-5, rtol=0)
    assert all(p.requires_grad for n, p in trainer.model.named_parameters() if ".lora_" in n)  # still trainable


def test_merged_weights_are_peft_merge_and_load_into_a_plain_model(trained):
    trainer, base, exp, *_ = trained
    merged = dict(policy_weights(trainer.model))
    assert set(merged) == {n for n, _ in base.named_parameters()}
    plain = load_causal_lm(trainer.model_path, device="cpu")
    plain.load_state_dict(merged, strict=False)
    torch.testing.assert_close(scores(plain, exp), scores(trainer.model, exp), atol=1e-5, rtol=0)


def test_checkpoint_holds_the_adapter_and_export_merges_it(trained, tmp_path):
    trainer, _, exp, _, ckpt = trained
    policy = Path(ckpt) / "policy"
    assert (policy / "adapter_model.safetensors").exists() and not (policy / "model.safetensors").exists()
    resumed = Trainer(load_config(None, ARGS), run_dir=trainer.run_dir, resume=True)
    torch.testing.assert_close(scores(resumed.model, exp), scores(trainer.model, exp), atol=1e-6, rtol=0)
    from agentrl.cli import main

    assert main(["export", str(trainer.run_dir), str(tmp_path / "merged")]) == 0
    assert main(["export", str(tmp_path / "nothing"), str(tmp_path / "x")]) == 2  # a one-line error
    plain = load_causal_lm(tmp_path / "merged", device="cpu")
    assert not hasattr(plain, "peft_config")
    torch.testing.assert_close(scores(plain, exp), scores(trainer.model, exp), atol=1e-5, rtol=0)


def test_bad_lora_settings_fail_clearly(tiny_arith):
    path, _ = tiny_arith
    model = load_causal_lm(path, device="cpu")
    with pytest.raises(ValueError, match="lora.target_modules"):
        apply_lora(model, LoraConfig(r=4, target_modules=["no_such_proj"]))
    with pytest.raises(ValueError, match="alpha > 0"):
        apply_lora(model, LoraConfig(r=4, alpha=0))
    assert apply_lora(model, LoraConfig(r=0)) is model


CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "configs"
STAGE = ["lora.r=8", "lora.alpha=16", "optim.max_steps=12", "optim.eval_every=12", "optim.batch_size=16",
         "optim.micro_batch_size=16", "data.examples=64", "data.eval_examples=16", "log.tensorboard=false"]


@pytest.mark.parametrize("stage", ["sft", "rm", "dpo"])
def test_stages_train_adapters_and_write_a_merged_final_model(stage, tmp_path):
    import importlib

    from agentrl.stages import config as stage_config

    cls = {"sft": "SFTConfig", "rm": "RMConfig", "dpo": "DPOConfig"}[stage]
    extra = {"sft": ["optim.lr=1e-2", "sft.greedy_eval_tasks=0"], "rm": ["optim.lr=1e-2", "model.path=tiny"],
             "dpo": ["optim.lr=1e-2", "model.path=tiny"]}[stage]
    cfg = load_config(CONFIGS / f"{stage}_tiny.yaml", STAGE + extra, cls=getattr(stage_config, cls))
    summary = getattr(importlib.import_module(f"agentrl.stages.{stage}"), f"run_{stage}")(cfg, run_dir=tmp_path)
    final = Path(summary["model_dir"])
    assert (final / "config.json").exists() and not (final / "adapter_config.json").exists()
    before, after = summary["before"], summary["after"]
    if stage == "sft":
        assert after["eval/loss"] < before["eval/loss"] - 0.1
    elif stage == "rm":
        assert after["eval/accuracy"] > before["eval/accuracy"] or after["eval/accuracy"] == 1.0
    else:
        assert before["eval/margin"] == pytest.approx(0.0, abs=1e-5) and after["eval/margin"] > 0.02


def test_lora_with_zero3_on_ray_is_a_one_line_config_error(capsys, tmp_path):
    from agentrl.cli import main

    # LoRA over Ray trains (tests/distributed/test_ray_lora.py); ZeRO-3 would partition the base it merges
    assert main(["train", str(CONFIGS / "cpu_demo.yaml"), "--run-dir", str(tmp_path / "run"), "cluster.mode=ray",
                 "cluster.zero_stage=3", "learner.lora.r=8"]) == 2
    assert "learner.lora with cluster.zero_stage=3" in capsys.readouterr().err


def test_policy_weights_fold_every_adapted_module_the_embedding_included(tiny_arith):
    """Adapters on the embedding (peft's ``lora_embedding_A/B``) and on linear layers: the weights
    the engine receives equal peft's own ``merge_and_unload``, under the plain model's names."""
    import copy

    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    path, _ = tiny_arith
    torch.manual_seed(0)
    model = get_peft_model(load_causal_lm(path, device="cpu"),
                           PeftLora(r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.copy_(torch.randn_like(p) * 0.05)  # B starts at zero: give every adapter a delta
    want = copy.deepcopy(model).merge_and_unload().state_dict()
    got = dict(policy_weights(model))
    assert set(got) == {n for n, _ in load_causal_lm(path, device="cpu").named_parameters()}
    for name in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                 "model.layers.1.mlp.down_proj.weight"):
        base = model.get_base_model().state_dict()[name.replace(".weight", ".base_layer.weight")]
        assert (got[name] - base).abs().max() > 1e-4, name  # the delta is in
    for name, tensor in got.items():
        torch.testing.assert_close(tensor, want[name], atol=1e-6, rtol=0)


@pytest.mark.parametrize("worker", ["thread", "process"])
def test_lora_with_async_rollouts_gives_the_engine_a_plain_model_with_merged_weights(worker, tmp_path):
    """rollout.async with LoRA: the engine holds a plain model (not a copy of the peft model, whose
    names differ from the merged weights it is sent, and which would add the adapters' deltas twice):
    three steps train, and with max_staleness 0 the engine's log-probs are the learner's."""
    cfg = load_config(None, [*ARGS, "rollout.async=true", f"rollout.async_worker={worker}", "rollout.max_staleness=0",
                             "algo.kl_mode=none", "algo.drop_zero_std_groups=false"])
    torch.manual_seed(0)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    try:
        engine_model = trainer.engine.engine.model
        assert not hasattr(engine_model, "peft_config") and not any(".lora_" in n for n, _ in
                                                                     engine_model.named_parameters())
        rows = [trainer.step() for _ in range(3)]
    finally:
        trainer.rollouts.close()
    for r in rows:  # the batch of step s was generated with the weights of version s (merged once)
        assert r["mismatch/logprob_abs_diff_max"] < 1e-3, r["mismatch/logprob_abs_diff_max"]
    assert rows[-1]["staleness/max"] == 0
    if worker == "thread":  # the engine takes the last staged weights at its next request
        trainer.engine.generate([[1, 2, 3]], trainer.executor.params)
        merged = dict(policy_weights(trainer.model))
        for name, p in engine_model.named_parameters():
            assert torch.allclose(p, merged[name], atol=1e-6), name
