"""Episodes longer than the context (agentrl.rollout.context) and step-wise samples: the truncation rule
by hand; none / truncate / compact through the multi-turn executor (every sample within the context,
token-exact, each generated token trained once, summaries trained as actions); chat templates render
every rebuilt context as the conversation it stands for; step-wise samples merged by the prefix
property give the episode's sample back, and the same gradient under every loss aggregation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from agentrl.algorithms import AGGREGATIONS
from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.models import CHAT_TEMPLATE, train_tokenizer
from agentrl.rollout.context import ContextPolicy, extension, marker_text, merge_samples
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.credit import batch_advantages
from agentrl.training.experience import Experience
from agentrl.training.learner import PolicyLearner
from agentrl.types import ContextReset, Segment, Task, Trajectory
from environments.guess_number import GuessNumberEnv

# ---------------------------------------------------------------- the rules by hand


def test_truncation_by_hand():
    prompt = [1, 2]
    turns = [([10], [11, 11]), ([20], [21, 21]), ([30], [31, 31])]
    observations = ["a", "b", "c"]
    render = lambda obs, prev, finish: [99, ord(obs)]  # noqa: E731
    marker = lambda n: [50 + n]  # noqa: E731
    keep_all = ContextPolicy("truncate", max_tokens=20, turn_tokens=2, keep=1.0)
    # two turns kept: prompt, marker for 1 omitted turn, the feedback that preceded turn 1, turns 1 and 2
    assert keep_all.truncated(prompt, turns, observations, render, marker) == [1, 2, 51, 99, ord("a"), 20, 21, 21,
                                                                               30, 31, 31]
    # 10 tokens: 8 of room for history and prompt; only the last turn fits
    small = ContextPolicy("truncate", max_tokens=10, turn_tokens=2, keep=1.0)
    assert small.truncated(prompt, turns, observations, render, marker) == [1, 2, 52, 99, ord("b"), 30, 31, 31]
    # keep .5 of the 16 tokens of room: 8 for the history, so again only the last turn
    half = ContextPolicy("truncate", max_tokens=20, turn_tokens=2, keep=0.5)
    assert half.truncated(prompt, turns, observations, render, marker) == [1, 2, 52, 99, ord("b"), 30, 31, 31]
    # no room even for the marker and the last feedback
    assert ContextPolicy("truncate", max_tokens=6, turn_tokens=2).truncated(prompt, turns, observations, render,
                                                                            marker) is None


def test_compaction_is_asked_while_it_fits():
    p = ContextPolicy("compact", max_tokens=100, turn_tokens=10, summary_tokens=20)
    # after this feedback (5) and a turn (10): 60 + 15 + request (8) + summary (20) = 103 > 100
    assert p.compact_due(60, 5, 8) and p.room_for_summary(60, 8)
    assert not p.compact_due(50, 5, 8)
    assert p.fits(80, 10) and not p.fits(81, 10)
    assert ContextPolicy().fits(10**9, 10**9)  # no limit
    with pytest.raises(ValueError, match="max_tokens"):
        ContextPolicy("truncate")


def test_merge_samples_by_hand():
    a, b = Segment([5, 6], True, [-1.0, -1.0]), Segment([8], True, [-1.0])
    # the second context extends the first sample (prompt, action) by a feedback token 7: merged
    assert extension([1, 5, 6], [1, 5, 6, 7]) == [7]
    merged = merge_samples([([1], [a]), ([1, 5, 6, 7], [b])])
    assert len(merged) == 1 and merged[0][0] == [1]
    assert [(s.token_ids, s.is_action) for s in merged[0][1]] == [([5, 6], True), ([7], False), ([8], True)]
    # a rewritten history starts a new sample
    assert extension([1, 5, 6], [1, 9, 6, 7]) is None
    assert [p for p, _ in merge_samples([([1], [a]), ([1, 9, 6, 7], [b])])] == [[1], [1, 9, 6, 7]]


# ---------------------------------------------------------------- through the executor

CORPUS = [GuessNumberEnv(rounds=4)._prompt(), "1 is too low. 2 is too high. Round 1 of 4, 3 left. New number from",
          "Summary: the number is from 10 to 40.", marker_text(12), GuessNumberEnv.compaction_instruction] * 4


@pytest.fixture(scope="module")
def tok() -> Any:
    return train_tokenizer(CORPUS, 320)


class Guesser:
    """Guesses the numbers 1, 2, 3, ... in turn; answers a compaction request with a fixed summary."""

    def __init__(self, tok: Any, start: int = 0) -> None:
        self.tok, self.n, self.contexts, self.limits, self.generated = tok, start, [], [], 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out = []
        for p in prompts:
            self.contexts.append(list(p))
            self.limits.append(params.max_new_tokens)
            asked = "Summarize" in self.tok.decode(p[-60:])
            self.n += 0 if asked else 1
            text = "Summary: the number is from 10 to 40." if asked else str(self.n % 50 + 1)
            ids = (self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])
            ids = ids[:params.max_new_tokens]
            self.generated += len(ids)
            out.append(Completion(ids, [-0.5] * len(ids), "stop"))
        return out


def _run(tok: Any, policy: str, max_tokens: int, chat: bool = False, rounds: int = 4,
         seed: int = 0) -> tuple[Trajectory, Guesser]:
    """One episode of a fixed task (its hidden numbers from ``seed``: a task whose first number the Guesser hits at
    once gets the next round's longer feedback, and at 200 tokens no room left to compact — 3 tasks in 300)."""
    env = GuessNumberEnv(rounds=rounds, guesses=6, high=50, feedback="direction")
    engine = Guesser(tok)
    context = ContextPolicy(policy, max_tokens, turn_tokens=8, summary_tokens=24)
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=8), chat_template=chat, context=context)
    [traj] = ex.run([env.sample_task(np.random.default_rng(seed))])
    return traj, engine


def _tokens(prompt: list[int], segments: list[Segment]) -> list[int]:
    return prompt + [t for s in segments for t in s.token_ids]


@pytest.mark.parametrize("policy,limit", [("truncate", 160), ("compact", 200)])
def test_long_episode_samples_fit_and_are_token_exact(tok, policy, limit):
    traj, engine = _run(tok, policy, max_tokens=limit)
    assert traj.resets and all(r.reason == policy for r in traj.resets)
    assert traj.info[{"truncate": "truncations", "compact": "compactions"}[policy]] == len(traj.resets)
    for context, new in zip(engine.contexts, engine.limits):  # every call leaves room for its generation
        assert len(context) + new <= limit
    for prompt, segments in traj.samples():
        assert len(_tokens(prompt, segments)) <= limit
    # each generated token is trained exactly once (in the sample it was generated in)
    assert traj.num_action_tokens == engine.generated
    exp = Experience.from_trajectories([traj], tok.pad_token_id)
    assert len(exp) == len(traj.samples()) and int(exp.action_mask.sum()) == engine.generated
    assert exp.several_samples_per_episode
    # each call's context is the sample it is recorded in, up to that call: token-exact
    samples = [_tokens(p, s) for p, s in traj.samples()]
    assert all(any(s[:len(c)] == c for s in samples) for c in engine.contexts)
    for r in traj.resets:
        assert r.prompt_ids[:len(traj.prompt_ids)] == traj.prompt_ids
    n = len(traj.prompt_ids)
    if policy == "truncate":
        assert all(tok.decode(r.prompt_ids[n:]).startswith("[") for r in traj.resets)
        assert all("earlier turns omitted]" in tok.decode(r.prompt_ids[n:]) for r in traj.resets)
    else:  # the summary is the last action of the sample before, and opens the next context
        before = [traj.segments] + [r.segments for r in traj.resets[:-1]]
        for segs, r in zip(before, traj.resets):
            summary = segs[-1]
            assert summary.is_action and not segs[-2].is_action
            assert r.prompt_ids[n:n + len(summary.token_ids)] == summary.token_ids
            following = [s for s in r.segments if s.is_action]
            assert not following or following[0].turn == summary.turn  # it serves the turn after it
        assert len(traj.info["summaries"]) == len(traj.resets)


def test_summaries_serve_the_next_turn_and_turns_map_to_rewards(tok):
    traj, _ = _run(tok, "compact", max_tokens=260)
    assert traj.info["compactions"] >= 2
    actions = [s for _, segs in traj.samples() for s in segs if s.is_action]
    turns = [s.turn for s in actions]
    assert turns == sorted(turns) and max(turns) == len(traj.turn_rewards) - 1
    assert len(actions) == len(traj.turn_rewards) + traj.info["compactions"]  # a summary shares its turn
    assert len(traj.state_keys) == len(traj.turn_rewards)
    exp = Experience.from_trajectories([traj], tok.pad_token_id)
    assert int(exp.turn_ids.max()) == len(traj.turn_rewards) - 1
    assert bool(((exp.turn_ids >= 0) == exp.action_mask.bool()).all())


def test_without_a_policy_the_episode_ends_when_the_context_is_full(tok):
    traj, engine = _run(tok, "none", max_tokens=160)
    assert traj.info["end_reason"] == "context_full" and traj.truncated and not traj.resets
    assert len(_tokens(traj.prompt_ids, traj.segments)) <= 160
    unlimited, _ = _run(tok, "none", max_tokens=0)
    assert unlimited.info["end_reason"] == "terminated"
    assert len(_tokens(unlimited.prompt_ids, unlimited.segments)) > 160


def test_a_prompt_with_no_room_for_a_turn_fails_its_episode(tok):
    traj, engine = _run(tok, "truncate", max_tokens=40)
    assert traj.info["failed"] and "no room for a turn" in traj.info["error"] and not engine.contexts


@pytest.fixture(scope="module")
def chat_tok() -> Any:
    t = train_tokenizer(CORPUS, 400)
    t.chat_template, t.eos_token = CHAT_TEMPLATE, "<|im_end|>"  # stops on the turn end, as Qwen does
    return t


@pytest.mark.parametrize("policy", ["truncate", "compact"])
def test_rebuilt_contexts_are_the_templates_rendering(chat_tok, policy):
    """A rebuilt context is the chat template's rendering of: the task, the marker (or the summary) as the
    assistant's reply, the feedback after it, then the kept turns as they were generated."""
    tok = chat_tok
    traj, _ = _run(tok, policy, max_tokens=220, chat=True)
    assert traj.resets
    env = GuessNumberEnv(rounds=4, guesses=6, high=50, feedback="direction")
    for r in traj.resets:
        text = tok.decode(r.prompt_ids)
        head = tok.apply_chat_template([{"role": "user", "content": env._prompt()}], tokenize=False,
                                       add_generation_prompt=True)
        assert text.startswith(head)
        reply, rest = text[len(head):].split("<|im_end|>\n<|im_start|>user\n", 1)
        if policy == "compact":
            assert reply == "Summary: the number is from 10 to 40."
        else:
            assert reply.startswith("[") and reply.endswith("earlier turns omitted]")
        observation, after = rest.split("<|im_end|>\n<|im_start|>assistant\n", 1)
        assert "too low" in observation or "too high" in observation or "right" in observation
        # whatever follows is whole turns: the policy's replies, each closed, and the feedback to them
        assert after.count("<|im_start|>assistant\n") == after.count("<|im_end|>\n<|im_start|>user\n")
        rendered = tok(text, add_special_tokens=False)["input_ids"]
        assert rendered.count(tok.convert_tokens_to_ids("<|im_end|>")) == r.prompt_ids.count(
            tok.convert_tokens_to_ids("<|im_end|>"))


# ---------------------------------------------------------------- step-wise samples: the same gradient


def _tiny_model(vocab: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).float()


def _stepwise(traj: Trajectory) -> Trajectory:
    """The episode as rollout.samples=turn records it before merging: each turn its own sample, whose
    context is everything the policy saw before that turn."""
    samples, seen = [], list(traj.prompt_ids)
    for s in traj.segments:
        if s.is_action:
            samples.append((list(seen), [s]))
        seen += s.token_ids
    first, rest = samples[0], samples[1:]
    return Trajectory(prompt_ids=first[0], segments=first[1], reward=traj.reward, task_id=traj.task_id,
                      group_id=traj.group_id, turn_rewards=traj.turn_rewards, info=dict(traj.info),
                      state_keys=traj.state_keys, resets=[ContextReset("turn", p, segs) for p, segs in rest])


def _merged(traj: Trajectory) -> Trajectory:
    (prompt, segments), *rest = merge_samples(traj.samples())
    return Trajectory(prompt_ids=prompt, segments=segments, reward=traj.reward, task_id=traj.task_id,
                      group_id=traj.group_id, turn_rewards=traj.turn_rewards, info=dict(traj.info),
                      state_keys=traj.state_keys, resets=[ContextReset("rewrite", p, s) for p, s in rest])


def _grads(model: Any, exp: Experience, agg: str) -> list[torch.Tensor]:
    algo = AlgoConfig(loss_agg=agg)
    exp.advantages, exp.returns = batch_advantages(exp, algo)
    learner = PolicyLearner(model, LearnerConfig(lr=0.0, micro_batch_size=2, call_tokens=0, grad_clip=0.0),
                            algo, max_new_tokens=8)
    learner.train_step(exp)
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_turn_samples_give_the_episode_gradient(tok, agg):
    """Three episodes of one task (rewards differ): as one sample each, and as one sample per turn (the
    group baseline and the seq-mean aggregations must count each episode once). Merging the turn samples
    by the prefix property gives the episode samples back, token for token."""
    episodes = []
    for seed, reward, start in ((0, 1.0, 0), (1, 0.0, 7), (2, 0.5, 40)):  # other guesses, other lengths
        env = GuessNumberEnv(rounds=1, guesses=5, high=50)
        ex = MultiTurnExecutor(env, Guesser(tok, start), tok, SamplingParams(max_new_tokens=8))
        task = Task(id=f"t{seed}", prompt=env._prompt(), answer="50", metadata={"numbers": [50]})  # never found
        [t] = ex.run([task])
        t.reward, t.group_id = reward, 7
        t.turn_rewards = [0.0] * (len(t.turn_rewards) - 1) + [reward]
        episodes.append(t)
    assert all(len([s for s in t.segments if s.is_action]) > 1 for t in episodes)
    stepwise = [_stepwise(t) for t in episodes]
    for t, s in zip(episodes, stepwise):
        merged = _merged(s)
        assert not merged.resets and merged.prompt_ids == t.prompt_ids
        assert [(x.token_ids, x.is_action, x.logprobs) for x in merged.segments] == [
            (x.token_ids, x.is_action, x.logprobs) for x in t.segments]
    one = Experience.from_trajectories(episodes, tok.pad_token_id)
    many = Experience.from_trajectories(stepwise, tok.pad_token_id)
    assert len(many) > len(one) and many.several_samples_per_episode
    model = _tiny_model(len(tok))
    g_one = _grads(model, one, agg)
    model.zero_grad(set_to_none=True)
    g_many = _grads(model, many, agg)
    scale = max(float(a.abs().max()) for a in g_one)
    assert scale > 1e-4
    for a, b in zip(g_one, g_many):
        assert torch.allclose(a, b, atol=1e-5 * scale, rtol=1e-4), agg


@pytest.mark.parametrize("estimator", ["group_norm", "rloo", "dr_grpo", "reinforce", "reinforce_baseline"])
def test_old_configs_and_one_final_reward_give_the_old_advantages_and_gradient(tok, estimator):
    """The default config takes the trajectory-level path unchanged; with a reward on the last turn only,
    turn-level credit at turn_gamma=1 (and step groups at weight 0) gives the same advantages and gradient."""
    from agentrl.algorithms import compute_advantages

    episodes = []
    for k, reward in enumerate((1.0, 0.0, 0.0, 1.0)):
        env = GuessNumberEnv(rounds=1, guesses=4, high=50)
        ex = MultiTurnExecutor(env, Guesser(tok, 9 * k), tok, SamplingParams(max_new_tokens=8))
        [t] = ex.run([Task(id=f"t{k}", prompt=env._prompt(), answer="50", metadata={"numbers": [50]})])
        t.reward, t.group_id, t.turn_rewards = reward, k // 2, [0.0] * (len(t.turn_rewards) - 1) + [reward]
        episodes.append(t)
    exp = Experience.from_trajectories(episodes, tok.pad_token_id)
    old, _ = compute_advantages(estimator, exp.rewards, exp.group_ids, exp.action_mask)  # the code before
    default, _ = batch_advantages(exp, AlgoConfig(estimator=estimator))
    assert torch.equal(default, old)
    model = _tiny_model(len(tok))
    grads = []
    for algo in (AlgoConfig(estimator=estimator), AlgoConfig(estimator=estimator, turn_gamma=1.0),
                 AlgoConfig(estimator=estimator, turn_gamma=1.0, step_adv_weight=0.0)):
        adv, _ = batch_advantages(exp, algo)
        assert torch.allclose(adv, old, atol=1e-5)
        model.zero_grad(set_to_none=True)
        exp.advantages = adv
        PolicyLearner(model, LearnerConfig(lr=0.0, call_tokens=0, grad_clip=0.0), algo).train_step(exp)
        grads.append([p.grad.clone() for p in model.parameters()])
    for g in grads[1:]:
        assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(grads[0], g))


@pytest.mark.parametrize("turn_gamma", [None, 1.0])
def test_neg_adv_weight_damps_only_the_negative_advantages(tok, turn_gamma):
    """algo.neg_adv_weight scales the negative advantages of either credit path and keeps the positive ones."""
    episodes = []
    for k, reward in enumerate((1.0, 0.0, 0.0, 0.0)):
        env = GuessNumberEnv(rounds=1, guesses=4, high=50)
        ex = MultiTurnExecutor(env, Guesser(tok, 9 * k), tok, SamplingParams(max_new_tokens=8))
        [t] = ex.run([Task(id=f"t{k}", prompt=env._prompt(), answer="50", metadata={"numbers": [50]})])
        t.reward, t.group_id, t.turn_rewards = reward, 0, [0.0] * (len(t.turn_rewards) - 1) + [reward]
        episodes.append(t)
    exp = Experience.from_trajectories(episodes, tok.pad_token_id)
    full, _ = batch_advantages(exp, AlgoConfig(turn_gamma=turn_gamma))
    assert (full[0][exp.action_mask[0] > 0] > 0).all() and (full[1:][exp.action_mask[1:] > 0] < 0).all()
    for w in (0.0, 0.5):
        adv, _ = batch_advantages(exp, AlgoConfig(turn_gamma=turn_gamma, neg_adv_weight=w))
        assert torch.equal(adv[0], full[0]) and torch.allclose(adv[1:], full[1:] * w)


def test_a_context_policy_implies_turn_samples():
    """truncate|compact made the user also set rollout.samples=turn, its only valid value (issue 46, 7)."""
    from agentrl.config import load_config

    for policy in ("truncate", "compact"):
        assert load_config(None, [f"rollout.context.policy={policy}"]).rollout.samples == "turn"
    assert load_config(None, []).rollout.samples == "episode"


@pytest.mark.parametrize("overrides,message", [
    (["rollout.context.policy=compact", "algo.estimator=gae"], "(implied by rollout.context.policy=compact)"),
    (["rollout.context.policy=shrink"], "valid: none, truncate, compact"),
    (["rollout.samples=step"], "valid: episode, turn"),
    (["algo.turn_gamma=1.5"], "expected a discount in (0, 1]"),
    (["algo.step_adv_weight=-1"], "expected a weight >= 0"),
    (["algo.neg_adv_weight=-0.5"], "algo.neg_adv_weight: expected a weight in [0, 1]"),
    (["algo.neg_adv_weight=2"], "algo.neg_adv_weight: expected a weight in [0, 1]"),
    (["algo.turn_gamma=0.9", "algo.estimator=gae"], "not gae"),
    (["algo.turn_gamma=0.9", "algo.gamma=0.99"], "leave algo.gamma"),
    (["rollout.samples=turn", "rollout.context.policy=truncate", "algo.estimator=ppo"], "use an outcome estimator"),
    (["rollout.context.truncate_keep=0"], "expected a fraction in (0, 1]"),
    (["rollout.context.max_tokens=-5"], "expected a token count >= 0"),
])
def test_credit_and_context_settings_are_checked_at_load(overrides, message):
    from agentrl.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_context_policy_resolves_the_models_context(tok):
    from agentrl.config import load_config
    from agentrl.rollout.build import context_policy

    class Model:
        class config:  # noqa: N801
            max_position_embeddings = 1024

    class Engine:
        model = Model()

    cfg = load_config(None, ["rollout.samples=turn", "rollout.context.policy=compact", "rollout.max_new_tokens=16"])
    p = context_policy(cfg, Engine(), tok)
    assert (p.name, p.max_tokens, p.turn_tokens, p.summary_tokens) == ("compact", 1024, 16, 16)
    with pytest.raises(ValueError, match="set rollout.context.max_tokens"):
        context_policy(cfg, object(), tok)  # the tokenizer's model_max_length is no real limit
    assert context_policy(load_config(None, []), object(), tok).max_tokens == 0  # none: no limit known, none set


@pytest.mark.slow  # two short training runs of the tiny model
@pytest.mark.parametrize("policy", ["truncate", "compact"])
def test_training_past_the_context_keeps_every_sample_inside_it(tmp_path, policy):
    import json

    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    cfg = load_config(None, [
        "env.id=agentrl/GuessNumber-v0", "env.kwargs={rounds: 3, guesses: 6, high: 50, feedback: direction}",
        "model.warm_start.enabled=false", "model.tiny.hidden_size=64", "model.tiny.num_heads=2",
        "model.tiny.intermediate_size=128", "data.prompts_per_step=2", "data.eval_tasks=2", "rollout.n_samples=2",
        "rollout.max_new_tokens=4", "rollout.samples=turn", f"rollout.context.policy={policy}",
        "rollout.context.max_tokens=300", "rollout.context.summary_tokens=8", "algo.turn_gamma=0.9",
        "algo.step_adv_weight=1.0", "learner.total_steps=2", "learner.lr=1e-4", "log.progress=false",
        "log.tensorboard=false", "checkpoint.save_final=false"])
    assert Trainer(cfg, run_dir=tmp_path).fit()["steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "samples/count" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["samples/max_tokens"] <= 300 and r["context/max_tokens_max"] <= 300
        counted = {"truncate": "episode/truncations", "compact": "episode/compactions"}[policy]
        assert r["samples/per_episode"] > 1 and r[counted] > 0
        assert r["samples/count"] > 4 and "credit/step_group_frac" in r and "loss/policy_loss" in r
