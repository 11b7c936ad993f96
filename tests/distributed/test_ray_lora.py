"""LoRA over Ray (cluster.mode=ray), all real on a local 2-CPU cluster: two DeepSpeed (ZeRO-2) policy
ranks train only the adapters, the reference is the ranks' base weights with the adapters off, and the
engine actor (HF inside Ray) gets merged weights: its greedy output equals the trainer's after a sync."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.engines.hf import HFEngine

pytestmark = [
    pytest.mark.slow,  # a Ray cluster and two DeepSpeed ranks: ~40 s
    pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("ray", "deepspeed", "peft")),
                       reason="needs ray, deepspeed and peft installed"),
]
PROMPTS = ["1+2=", "3+4=", "9+8=", "5+5="]


def test_lora_grpo_on_ray_trains_adapters_and_syncs_merged_weights(ray_cluster, ray_cfg):
    from agentrl.distributed.trainer import RayTrainer
    from agentrl.training.experience import Experience
    from agentrl.training.learner import batched_logprobs
    from agentrl.training.lora import adapters_disabled

    # the entropy bonus moves the adapters even when every reward of the untrained tiny model is 0
    cfg = ray_cfg("cluster.zero_stage=2", "rollout.engine=hf", "algo.estimator=group_norm", "algo.kl_mode=loss",
                  "algo.kl_coef=0.01", "algo.entropy_coef=0.01", "learner.lora.r=4", "learner.lora.alpha=8", "learner.lr=5e-2")
    trainer = RayTrainer(cfg)
    try:
        assert [g.name for g in trainer.groups] == ["engines", "policy"]  # no reference actor: the ranks' base
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        for _ in range(2):
            metrics = trainer.step()
            trainer.step_idx += 1
            assert metrics["samples_used"] > 0 and metrics["params/trainable_fraction"] < 0.5
        trainer.pull_weights()
        moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
        assert moved and all(".lora_" in n for n in moved)  # only adapters trained, on every rank alike
        assert max((p - before[n]).abs().max().item() for n, p in trainer.model.named_parameters()) > 1e-3
        prompts = [trainer.tokenizer.encode(p) for p in PROMPTS]
        greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
        got = trainer.engine.generate(prompts, greedy)  # the engine actor, after the last step's sync
        want = HFEngine(trainer.model, trainer.tokenizer).generate(prompts, greedy)
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=2e-4, rtol=1e-4)
        exp = Experience.from_trajectories(trainer.rollout(trainer.tasks.next(2)), trainer.tokenizer.pad_token_id)
        with adapters_disabled(trainer.model):  # the reference is the base, not the adapted policy
            base = batched_logprobs(trainer.model, exp, 8, cfg.rollout.temperature)
        ref, mask = trainer.reference.logprobs(exp), exp.action_mask.bool()  # ranks score shards: other padding
        torch.testing.assert_close(ref[mask], base[mask], atol=1e-4, rtol=0)
        assert (trainer.learner.logprobs(exp) - base)[mask].abs().max() > 1e-3
    finally:
        trainer.shutdown()
