"""A real instruct model on every path: HF vs vLLM greedy parity with the chat template, GRPO (full
and LoRA) then vLLM == HF after the weight sync, a multi-turn episode token-exact against the chat
template, one SFT and one DPO step, checkpoints that reload."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from agentrl.config import load_config
from agentrl.env import fixed_tasks, make
from agentrl.models import load_causal_lm, load_tokenizer
from agentrl.rollout.engines import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors.single_turn import encode_prompt
from agentrl.training.learner import sequence_logprobs
from agentrl.training.lora import export_merged, policy_weights
from agentrl.training.trainer import Trainer

pytestmark = pytest.mark.real
GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)


@pytest.fixture(scope="module")
def hf(smollm2):
    return load_causal_lm(smollm2, device="cpu"), load_tokenizer(smollm2)


def chat_prompts(tok, n: int, seed: int = 0) -> list[list[int]]:
    env = make("agentrl/Arithmetic-v0", digits=2, split="test")
    return [encode_prompt(tok, t.prompt, chat_template=True) for t in fixed_tasks(env, n, seed)]


def greedy_ids(engine, prompts) -> list[list[int]]:
    return [c.token_ids for c in engine.generate(prompts, GREEDY)]


def test_hf_and_vllm_greedy_agree_on_20_chat_prompts(hf, vllm_engine):
    model, tok = hf
    vllm_engine.load_weights(model.named_parameters())  # the base weights, whatever ran before
    prompts = chat_prompts(tok, 20)
    assert tok.decode(prompts[0]).startswith("<|im_start|>system\n")  # the template's default system prompt
    hf_out, vllm_out = greedy_ids(HFEngine(model, tok), prompts), greedy_ids(vllm_engine, prompts)
    assert sum(a == b for a, b in zip(hf_out, vllm_out)) == 20, [tok.decode(a) for a in hf_out[:3]]


class SharedEngineTrainer(Trainer):
    """The trainer on the tier's vLLM engine (one engine per process: only the wiring differs)."""

    engine_for_tests = None

    def build_engine(self):
        return self.engine_for_tests


@pytest.mark.parametrize("lora", [False, True])
def test_grpo_steps_then_vllm_greedy_equals_the_trainers_and_the_checkpoint_reloads(
        smollm2, hf, vllm_engine, lora, tmp_path):
    base, tok = hf
    vllm_engine.load_weights(base.named_parameters())
    args = [f"model.path={smollm2}", "rollout.engine=vllm", "rollout.chat_template=true", "rollout.n_samples=4",
            "rollout.max_new_tokens=16", "data.prompts_per_step=2", "data.eval_tasks=4", "log.progress=false",
            "log.tensorboard=false", "model.warm_start.enabled=false", "algo.drop_zero_std_groups=false",
            "learner.micro_batch_size=8", "env.kwargs={digits: 2}", "algo.entropy_coef=0.01", "learner.lr=" + ("2e-3" if lora else "2e-5")]
    # the entropy bonus moves the weights even when every group's rewards are equal; the LoRA run's KL
    # term scores the reference: the same module with its adapters off
    args += ["algo.kl_mode=loss", "algo.kl_coef=0.01"] if lora else []
    args += ["learner.lora.r=8", "learner.lora.alpha=16"] if lora else []
    SharedEngineTrainer.engine_for_tests = vllm_engine
    trainer = SharedEngineTrainer(load_config(None, args), run_dir=tmp_path / "run")
    prompts = chat_prompts(tok, 4, seed=5)
    before = [c.logprobs for c in vllm_engine.generate(prompts, GREEDY)]
    for _ in range(2):
        metrics = trainer.step()
    trainer.step_idx = 2
    assert metrics["samples_used"] == 8 and metrics["params/trainable"] < (3e6 if lora else 2e8)
    engine_out = vllm_engine.generate(prompts, GREEDY)
    assert [c.logprobs for c in engine_out] != before  # the sync reached the engine
    assert [c.token_ids for c in engine_out] == greedy_ids(HFEngine(trainer.model, tok), prompts)
    seqs = [torch.tensor(p + c.token_ids) for p, c in zip(prompts, engine_out)]
    for seq, c, p in zip(seqs, engine_out, prompts):  # engine log-probs are the trainer's
        with torch.no_grad():
            lp, _ = sequence_logprobs(trainer.model, seq[None], torch.ones_like(seq)[None])
        torch.testing.assert_close(torch.tensor(c.logprobs), lp[0, len(p) - 1:], atol=2e-3, rtol=0)
    path = trainer.save()
    reloaded = load_causal_lm(export_merged(path, tmp_path / "merged") if lora else Path(path) / "policy",
                              device="cpu")
    merged = dict(policy_weights(trainer.model))
    for name, p in reloaded.named_parameters():
        torch.testing.assert_close(p, merged[name], atol=1e-6, rtol=0, msg=name)


class AnswerTwice:
    """A two-turn env on 2-digit addition: the first answer always gets feedback, the second is scored."""

    max_turns = 2
    feedback = "Check your work, then give the final answer as a number."

    @staticmethod
    def make():
        from agentrl.env import TextEnv

        inner = make("agentrl/Arithmetic-v0", digits=2, split="test")

        class Env(TextEnv):
            max_turns = AnswerTwice.max_turns

            def sample_task(self, rng):
                return inner.sample_task(rng)

            def reset(self, *, seed=None, options=None):
                self.turn = 0
                return super().reset(seed=seed, options=options)

            def step(self, action):
                self.turn += 1
                if self.turn == 1:
                    return AnswerTwice.feedback, 0.0, False, False, {}
                r = inner.score(action, self.task)
                return "", float(r.score), True, False, {"verified": True}

        return Env(), inner


def test_multi_turn_episode_is_the_chat_templates_rendering_of_the_conversation(hf):
    from agentrl.rollout.executors.multi_turn import MultiTurnExecutor

    model, tok = hf
    env, inner = AnswerTwice.make()
    tasks = fixed_tasks(inner, 3, seed=7)
    ex = MultiTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=40, temperature=0.0),
                           chat_template=True)
    for traj, task in zip(ex.run(tasks), tasks):
        assert traj.info["turns"] == 2 and [s.is_action for s in traj.segments] == [True, False, True]
        got = traj.prompt_ids + [t for s in traj.segments for t in s.token_ids]
        first, second = traj.info["responses"]
        conversation = [{"role": "user", "content": task.prompt}, {"role": "assistant", "content": first},
                        {"role": "user", "content": AnswerTwice.feedback}, {"role": "assistant", "content": second}]
        rendered = tok.apply_chat_template(conversation, tokenize=True)
        rendered = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
        assert got == rendered[:len(got)], (tok.decode(got), tok.decode(rendered))
        # what the template adds after the episode's last token: the closing newline (and <|im_end|>
        # when the last turn was cut at max_new_tokens)
        assert tok.decode(rendered[len(got):]) in ("\n", "<|im_end|>\n")


def test_one_sft_and_one_dpo_step(smollm2, tmp_path):
    from agentrl.stages.config import DPOConfig, SFTConfig
    from agentrl.stages.dpo import run_dpo
    from agentrl.stages.sft import run_sft

    common = [f"model.path={smollm2}", "env.kwargs={digits: 2}", "data.chat_template=true", "data.examples=16",
              "data.eval_examples=8", "optim.max_steps=1", "optim.batch_size=8", "optim.micro_batch_size=8",
              "optim.eval_every=1", "log.tensorboard=false", "checkpoint.save_final=false"]
    sft = run_sft(load_config(None, common + ["optim.lr=1e-4"], cls=SFTConfig), run_dir=tmp_path / "sft")
    assert sft["steps"] == 1 and sft["after"]["eval/loss"] < sft["before"]["eval/loss"]
    dpo = run_dpo(load_config(None, common + ["optim.lr=1e-5"], cls=DPOConfig), run_dir=tmp_path / "dpo")
    assert dpo["before"]["eval/margin"] == pytest.approx(0.0, abs=1e-5)
    assert dpo["steps"] == 1 and dpo["after"]["eval/margin"] > 0


def test_chat_stitching_properties_hold_with_smollm2s_own_tokenizer(smollm2):
    """tests/test_chat_stitching.py's properties with the real SmolLM2 tokenizer (its BPE, its special
    tokens), whose chat template is the one the main tier uses as a string."""
    import random

    from agentrl.models import load_tokenizer
    from agentrl.rollout.engines.base import SamplingParams
    from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
    from tests.test_chat_stitching import (
        CONVERSATIONS,
        OBSERVATIONS,
        ROLES,
        SMOLLM2_TEMPLATE,
        Scripted,
        ScriptedTurnsEnv,
        _check,
        _generated,
        _turns,
    )

    tok = load_tokenizer(smollm2)
    assert tok.chat_template == SMOLLM2_TEMPLATE
    rng = random.Random("real-smollm2")
    for _ in range(CONVERSATIONS):
        turns = _turns(rng, tok)
        observations = [rng.choice(OBSERVATIONS) for _ in turns[:-1]]
        env = ScriptedTurnsEnv(observations, rng.choice(ROLES))
        [traj] = MultiTurnExecutor(env, Scripted(turns), tok, SamplingParams(max_new_tokens=64),
                                   chat_template=True).run([env.tasks[0]])
        messages = [{"role": "user", "content": env.tasks[0].prompt}]
        for (ids, finish), obs in zip(turns, observations):
            messages += [{"role": "assistant", "content": _generated(tok, ids, finish)},
                         {"role": env.feedback_role, "content": obs}]
        _check(tok, traj.prompt_ids + [t for s in traj.segments for t in s.token_ids], messages, turns[-1][0])


def test_converting_the_gguf_file_draws_no_progress_bar_and_gives_the_cached_weights(smollm2, tmp_path, monkeypatch,
                                                                                      capfd):
    """A second conversion into an empty cache: no "Converting and de-quantizing" bar on the terminal
    (transformers draws it with tqdm.auto, past its own progress-bar switch) and the same weights."""
    from safetensors.torch import load_file

    from agentrl.models import ALIASES, alias_gguf, convert_gguf

    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    capfd.readouterr()
    out = convert_gguf(alias_gguf(next(iter(ALIASES))))
    printed = "".join(capfd.readouterr())
    assert out.is_relative_to(tmp_path) and (out / "config.json").is_file()
    assert "de-quantizing" not in printed and "%|" not in printed, printed[-500:]
    fresh, cached = load_file(out / "model.safetensors"), load_file(Path(smollm2) / "model.safetensors")
    assert fresh.keys() == cached.keys() and all(torch.equal(fresh[k], cached[k]) for k in fresh)
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    assert not isinstance(gguf_utils.tqdm, functools.partial)  # the library's bar is given back
