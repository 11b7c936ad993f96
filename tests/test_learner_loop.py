"""The learner's gradient on real multi-turn chat episodes is a plain loop's: each sample run alone through the
model, its own tokens only, ``-sum(A * logp)`` over the tokens the policy generated, normalised by hand.

Everything the learner does to save work must leave that gradient as it is: padding and length buckets, the
system prompt run once for the prompts that share it, token-balanced micro-batches, samples with a zero
advantage left out of the forward, feedback tokens masked out of the loss. The episodes are sampled by the HF
engine from a tiny random model playing GuessNumber through the chat template (several turns, the env's feedback
between them), so the batch has what a training batch has; the advantages are drawn at random, a whole group
of zeros and a group of one among them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.models import train_tokenizer
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.experience import Experience
from agentrl.training.learner import PolicyLearner
from environments.guess_number import GuessNumberEnv

CORPUS = ["Guess the number between 1 and 50.", "Too low. Too high. Correct!", "<guess>17</guess>"] * 20


@pytest.fixture(scope="module")
def batch() -> tuple[Any, Experience]:
    """(model, Experience) of 3 tasks x 3 episodes and 1 x 1, with random advantages on the generated tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = train_tokenizer(CORPUS, 320)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1,
                                         max_position_embeddings=1024)).float()
    env = GuessNumberEnv(rounds=1, guesses=3, high=50)
    ex = MultiTurnExecutor(env, HFEngine(model, tok), tok, SamplingParams(max_new_tokens=12, temperature=1.0),
                           chat_template=True)
    rng = np.random.default_rng(0)
    tasks = [env.sample_task(rng) for _ in range(4)]
    trajs = ex.run(tasks[:3], n_samples=3) + ex.run(tasks[3:], group_offset=3, n_samples=1)
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(exp.action_mask.shape, generator=g)
    adv[exp.group_ids == 1] = 0.0  # a group whose rewards all agree: its samples are not run
    exp.advantages = adv * exp.action_mask
    return model, exp


def plain_loop_grads(model: Any, exp: Experience, agg: str) -> list[torch.Tensor]:
    """The gradient of the one-epoch PPO loss (ratio 1: ``-A * logp``) by a loop over the samples, each alone."""
    model.zero_grad(set_to_none=True)
    mask, adv = exp.action_mask, exp.advantages
    for i in range(len(mask)):
        n = int(exp.attention_mask[i].sum())
        ids = exp.sequences[i, :n]
        assert bool(exp.attention_mask[i, :n].all())  # right-padded: the sample's own tokens come first
        logp = torch.log_softmax(model(input_ids=ids[None]).logits[0, :-1].float(), -1)
        lp = logp.gather(-1, ids[1:, None])[:, 0]
        token_loss = -(adv[i, :n - 1] * lp * mask[i, :n - 1])
        if agg == "token-mean":
            loss = token_loss.sum() / mask.sum()
        else:  # seq-mean-token-mean: each sample's token mean, then the mean over samples
            loss = token_loss.sum() / mask[i].sum().clamp(min=1) / len(mask)
        loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def learner_grads(model: Any, exp: Experience, agg: str, **learner: Any) -> list[torch.Tensor]:
    """The gradient ``PolicyLearner.train_step`` applies (lr 0, no clipping: the model is left as it was)."""
    model.zero_grad(set_to_none=True)
    algo = AlgoConfig(loss_agg=agg, kl_mode="none")
    PolicyLearner(model, LearnerConfig(lr=0.0, grad_clip=0.0, **learner), algo, max_new_tokens=12).train_step(exp)
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("learner", [
    {"micro_batch_size": 2},                                   # padded micro-batches, shared system prompt
    {"micro_batch_size": 64, "shared_prefix": False},          # one padded forward, no sharing
    {"micro_batch_size": 64, "micro_batch_tokens": 96},        # token-balanced micro-batches
    {"micro_batch_size": 3, "call_tokens": 64},                # forwards cut into cache-sized pieces
])
def test_learner_gradient_is_the_plain_loops(batch, agg, learner):
    model, exp = batch
    assert (exp.action_mask.sum(-1) > 0).all() and (exp.group_ids == 1).sum() == 3
    feedback = exp.attention_mask[:, 1:].bool() & ~exp.action_mask.bool()
    assert feedback.sum(-1).gt(int(feedback.sum(-1).min())).any()  # turns of env feedback between the actions
    want = plain_loop_grads(model, exp, agg)
    got = learner_grads(model, exp, agg, **learner)
    scale = max(float(g.abs().max()) for g in want)
    assert scale > 1e-5
    for name_param, a, b in zip(model.named_parameters(), want, got):
        assert torch.allclose(a, b, atol=1e-5 * scale, rtol=1e-4), (name_param[0], learner, agg)


@pytest.mark.parametrize("window", [1, 0])
def test_branch_credit_reaches_the_learner_as_a_plain_loops(batch, window):
    """Branch-point credit (``algo.branch_window``) on the real episodes, rewards set by hand so every group of
    three holds both outcomes: the advantages keep the window from where each episode parts from its nearest
    sibling of another reward, and the learner's gradient is still the plain loop's on those sparse advantages."""
    from dataclasses import replace

    from agentrl.algorithms.branch import branch_window
    from agentrl.training.credit import batch_advantages

    model, base = batch
    rewards = torch.tensor([1.0, 0.0, 0.0] * 3 + [1.0])
    exp = replace(base, rewards=rewards, advantages=None)
    full, _ = batch_advantages(exp, AlgoConfig())
    adv, _ = batch_advantages(exp, AlgoConfig(branch_window=window))
    keep = branch_window(exp.sequences, exp.action_mask, exp.group_ids, rewards, window)
    assert torch.equal(adv, full * keep)
    kept = keep.sum(-1)
    if window == 1:  # one token an episode (none for one equal to a sibling of another reward)
        assert set(kept[:9].tolist()) <= {0.0, 1.0} and kept[:9].sum() >= 6
    assert torch.equal(keep[9], exp.action_mask[9])  # alone in its group: every token keeps its (zero) advantage
    exp.advantages = adv
    want = plain_loop_grads(model, exp, "token-mean")
    got = learner_grads(model, exp, "token-mean", micro_batch_size=2)
    scale = max(float(g.abs().max()) for g in want)
    assert scale > 1e-6
    for a, b in zip(want, got):
        assert torch.allclose(a, b, atol=1e-5 * scale, rtol=1e-4)
