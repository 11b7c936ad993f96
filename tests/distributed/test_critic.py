"""The PPO critic: value shapes, micro-batch invariance, fitting returns, and PPO end to end in one process."""

from __future__ import annotations

import math

import torch

from agentrl.algorithms import gae, token_level_rewards
from agentrl.training.critic import Critic, ValueModel
from agentrl.training.experience import Experience


def batch(vocab: int, seed: int = 0) -> Experience:
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 10
    attn = torch.zeros(B, T, dtype=torch.long)
    amask = torch.zeros(B, T - 1)
    for b in range(B):
        length = 6 + b % 4
        attn[b, :length] = 1
        amask[b, 2:length - 1] = 1
    seq = torch.randint(3, vocab, (B, T), generator=g) * attn
    return Experience(sequences=seq, attention_mask=attn, action_mask=amask,
                      rewards=torch.randint(0, 2, (B,), generator=g).float(), group_ids=torch.arange(B))


def make_critic(tiny_cfg, *overrides: str) -> tuple[Critic, int]:
    from agentrl.rollout.build import make_env, resolve_model_path

    cfg = tiny_cfg("learner.critic_lr=1e-3", *overrides)
    critic = Critic.from_config(cfg, resolve_model_path(cfg, make_env(cfg)))
    return critic, critic.model.backbone.config.vocab_size


def with_returns(critic: Critic, exp: Experience) -> Experience:
    exp.values = critic.values(exp)
    exp.advantages, exp.returns = gae(token_level_rewards(exp.rewards, exp.action_mask), exp.values,
                                      exp.action_mask, 1.0, 0.95)
    return exp


def test_values_are_per_action_position_and_masked(tiny_cfg):
    critic, vocab = make_critic(tiny_cfg)
    exp = batch(vocab)
    v = critic.values(exp)
    assert v.shape == exp.action_mask.shape and v.dtype == torch.float32
    assert (v[exp.action_mask == 0] == 0).all() and (v[exp.action_mask == 1] != 0).all()
    # position t's value only depends on tokens up to t (causal): changing the last token keeps the rest
    changed = exp.select(slice(0, 1))
    last = int(changed.attention_mask.sum()) - 1
    changed.sequences[0, last] = (changed.sequences[0, last] + 1) % vocab
    torch.testing.assert_close(critic.values(changed)[0, :last - 1], v[0, :last - 1], atol=1e-5, rtol=1e-5)
    assert isinstance(critic.model, ValueModel)


def test_update_does_not_depend_on_micro_batch_size(tiny_cfg):
    a, vocab = make_critic(tiny_cfg, "learner.micro_batch_size=2")
    b, _ = make_critic(tiny_cfg, "learner.micro_batch_size=6")
    exp = with_returns(a, batch(vocab))
    ma, mb = a.train_step(exp), b.train_step(exp)
    assert ma["value_loss"] == mb["value_loss"] or math.isclose(ma["value_loss"], mb["value_loss"], rel_tol=1e-5)
    # the accumulated (clipped) gradients agree; weights would too, up to Adam's amplification of
    # float noise where a gradient is ~0 (see test_equivalence)
    for (n, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=n)


def test_critic_fits_the_returns(tiny_cfg):
    critic, vocab = make_critic(tiny_cfg, "algo.value_clip=null")
    exp = with_returns(critic, batch(vocab))
    losses = [critic.train_step(exp)["value_loss"] for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]
    state = critic.state_dict()
    critic.load_state_dict(state)


def test_ppo_with_critic_single_process(tiny_cfg):
    from agentrl.training.trainer import Trainer

    trainer = Trainer(tiny_cfg("algo.estimator=gae", "algo.kl_mode=reward", "algo.kl_coef=0.01"))
    assert isinstance(trainer.critic, Critic)
    for _ in range(2):
        m = trainer.step()
        trainer.step_idx += 1
        assert math.isfinite(m["critic/value_loss"]) and math.isfinite(m["loss/policy_loss"])


def test_cache_sized_calls_give_the_same_values_and_gradients(tiny_cfg):
    from agentrl.training.learner import call_rows

    a, vocab = make_critic(tiny_cfg, "learner.call_tokens=0")
    b, _ = make_critic(tiny_cfg, "learner.call_tokens=12")
    exp = with_returns(a, batch(vocab))
    assert len(call_rows(exp, call_tokens=12, shared_prefix=False)) > len(call_rows(exp, shared_prefix=False)) == 1
    torch.testing.assert_close(b.values(exp), exp.values, atol=1e-5, rtol=1e-5)
    ma, mb = a.train_step(exp), b.train_step(exp)
    assert math.isclose(ma["value_loss"], mb["value_loss"], rel_tol=1e-5)
    for (n, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=n)
