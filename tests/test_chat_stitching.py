"""Token exactness of stitched multi-turn contexts, as properties over random conversations.

For random conversations — empty replies, replies of whitespace or of fragments of the template's
own special text, turns cut at random token counts, several feedback roles, tool responses — run
through the multi-turn executor and through the OpenAI-compatible endpoint (a real uvicorn on
127.0.0.1), the context the policy continues from must be the chat template's rendering of the same
conversation, whose assistant messages are exactly what the policy generated (a final stop token
that is the template's own turn end is the template's), and must hold every special token as the
special token: one turn closing per closed turn, a cut turn's included (verl #6921's class of bug).

Templates: SmolLM2-135M-Instruct's (its string; the real tokenizer runs the same property in
tests/real), ChatML with an EOS that is not the turn end (our tiny models), Qwen-style ChatML that
stops on ``<|im_end|>``, and Llama-3- and Gemma-style headers (written here without the ``trim`` the
originals apply to contents, which no stitching can reproduce for a reply of whitespace).
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from agentrl.env import TextEnv
from agentrl.models import CHAT_TEMPLATE, train_tokenizer
from agentrl.rollout.chat_turns import turn_closing
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.rollout.openai_server import PolicyServer
from agentrl.types import Task

SMOLLM2_TEMPLATE = (  # SmolLM2-135M-Instruct's chat template, as its tokenizer ships it
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
GEMMA_TEMPLATE = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
# name: (template, eos, special tokens it needs beyond ours)
TEMPLATES = {
    "smollm2": (SMOLLM2_TEMPLATE, "<|im_end|>", []),
    "chatml_eos_apart": (CHAT_TEMPLATE, "<|endoftext|>", []),
    "chatml_qwen": (CHAT_TEMPLATE, "<|im_end|>", []),
    "llama3": (LLAMA3_TEMPLATE, "<|eot_id|>", ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                               "<|eot_id|>"]),
    "gemma": (GEMMA_TEMPLATE, "<end_of_turn>", ["<start_of_turn>", "<end_of_turn>"]),
}
PIECES = ["", "\n", " ", "  \n", "\n\n", "<", "<|", "|>", "im_end", "<|im_", "|im_start|", "end", "eot_id",
          "<start_of", "_turn>", "<|eot", "header_id|>", "assistant", "\nuser", "ok", "x = 1", "if a<", "}",
          "<tool_call>", '{"name": "calculator"}', "</tool_call>", "Answer: 42", "é", "∑"]
OBSERVATIONS = ["", "\n", "<tool_response>\n9\n</tool_response>", "result: <", "|im_end|", "try again",
                "  spaced  ", "end_of_turn>", "line1\nline2"]
ROLES = ["user", "tool"]
CONVERSATIONS = 30  # per template and path


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, Any]:
    corpus = PIECES + OBSERVATIONS + ["Q: what is 6 * 7?", "system", "user", "model", "helpful assistant"] * 3
    out = {}
    for name, (template, eos, extra) in TEMPLATES.items():
        tok = train_tokenizer(corpus, 400)
        if extra:
            tok.add_special_tokens({"additional_special_tokens": extra})
        tok.chat_template, tok.eos_token = template, eos
        out[name] = tok
    return out


def _turns(rng: random.Random, tok: Any) -> list[tuple[list[int], str]]:
    """1-4 scripted completions (ids, finish_reason): random pieces, then EOS (stop) or cut anywhere."""
    out = []
    for _ in range(rng.randint(1, 4)):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if len(ids) > 1 and rng.random() < 0.4:
            out.append((ids[:rng.randint(1, len(ids) - 1)], "length"))
        else:
            out.append((ids, "stop"))
    return out


class Scripted:
    """The policy's scripted completions, in order, one prompt per call (the test is the stitching)."""

    def __init__(self, turns: list[tuple[list[int], str]]) -> None:
        self.turns = list(turns)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        assert len(prompts) == 1
        ids, finish = self.turns.pop(0)
        return [Completion(list(ids), [-0.5] * len(ids), finish)]


def _generated(tok: Any, ids: list[int], finish: str) -> str:
    """The assistant message the policy wrote: its tokens' text, less a final stop token that is the
    start of the template's turn closing (that token is the template's text)."""
    if finish == "stop" and ids and turn_closing(tok).startswith(tok.decode(ids[-1:])):
        ids = ids[:-1]
    return tok.decode(ids)


def _check(tok: Any, context: list[int], messages: list[dict[str, str]], last: list[int]) -> None:
    """``context`` is the rendering of ``messages`` (ending with a feedback message) plus the last action."""
    expected = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + tok.decode(last)
    assert tok.decode(context) == expected
    want = tok(expected, add_special_tokens=False)["input_ids"]
    specials = set(tok.all_special_ids)
    for s in specials:  # every special token is one (never spelled by plain-text pieces), as often
        assert context.count(s) == want.count(s), (tok.convert_ids_to_tokens(s), tok.decode(context))


class ScriptedTurnsEnv(TextEnv):
    """Multi-turn: after each action the next scripted observation, in ``feedback_role``."""

    max_turns = 8

    def __init__(self, observations: list[str], role: str) -> None:
        super().__init__()
        self.observations, self.feedback_role = observations, role
        self.tasks = [Task(id="t", prompt="Q: what is 6 * 7?", answer="42")]

    def reset(self, *, seed=None, options=None):
        self.k = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        self.k += 1
        if self.k > len(self.observations):
            return "", 0.0, True, False, {}
        return self.observations[self.k - 1], 0.0, False, False, {}


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_executor_stitches_the_templates_rendering(tokenizers, template):
    tok, rng = tokenizers[template], random.Random(f"executor-{template}")
    for _ in range(CONVERSATIONS):
        turns = _turns(rng, tok)
        observations = [rng.choice(OBSERVATIONS) for _ in turns[:-1]]
        env = ScriptedTurnsEnv(observations, rng.choice(ROLES))
        ex = MultiTurnExecutor(env, Scripted(turns), tok, SamplingParams(max_new_tokens=64), chat_template=True)
        [traj] = ex.run([env.tasks[0]])
        assert [s.token_ids for s in traj.segments if s.is_action] == [ids for ids, _ in turns]
        messages = [{"role": "user", "content": env.tasks[0].prompt}]
        for (ids, finish), obs in zip(turns, observations):
            messages += [{"role": "assistant", "content": _generated(tok, ids, finish)},
                         {"role": env.feedback_role, "content": obs}]
        context = traj.prompt_ids + [t for s in traj.segments for t in s.token_ids]
        _check(tok, context, messages, turns[-1][0])


@pytest.fixture(scope="module")
def endpoint(tokenizers):
    """One real endpoint; each test swaps in its tokenizer and scripted engine."""
    server = PolicyServer(Scripted([]), tokenizers["smollm2"], SamplingParams(max_new_tokens=64),
                          chat_template=True, batch_wait_s=0.0).start()
    yield server
    server.close()


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_the_endpoint_stitches_the_templates_rendering(endpoint, tokenizers, template):
    tok, rng = tokenizers[template], random.Random(f"endpoint-{template}")
    endpoint.tokenizer, endpoint._turn_closing = tok, None
    with httpx.Client(timeout=30) as client:
        for _ in range(CONVERSATIONS):
            turns = _turns(rng, tok)
            endpoint.engine = Scripted(turns)
            eid, url = endpoint.new_episode()
            sent = [{"role": "user", "content": "Q: what is 6 * 7?"}]  # what the agent sends
            rendered = list(sent)  # the same conversation as the policy generated it
            for k, (ids, finish) in enumerate(turns):
                r = client.post(f"{url}/chat/completions", json={"model": "m", "messages": sent})
                assert r.status_code == 200, r.text
                if k == len(turns) - 1:
                    break
                feedback = {"role": rng.choice(ROLES), "content": rng.choice(OBSERVATIONS)}
                sent += [r.json()["choices"][0]["message"], feedback]
                rendered += [{"role": "assistant", "content": _generated(tok, ids, finish)}, feedback]
            ep = endpoint.pop_episode(eid)
            assert ep.rewritten == 0
            _check(tok, ep.context(), rendered, turns[-1][0])


@pytest.mark.parametrize("reply", ["", "\n"])
def test_the_endpoint_keeps_the_newline_after_the_turn_end(endpoint, tokenizers, reply):
    """The reviewer's cases on SmolLM2's template: a reply that is only the EOS, and a reply of "\\n"
    (which also occurs in the template's closing text) once lost the "\\n" after <|im_end|>."""
    tok = tokenizers["smollm2"]
    endpoint.tokenizer, endpoint._turn_closing = tok, None
    ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    endpoint.engine = Scripted([(ids, "stop"), (ids, "stop")])
    eid, url = endpoint.new_episode()
    messages = [{"role": "user", "content": "hi"}]
    with httpx.Client(timeout=30) as client:
        first = client.post(f"{url}/chat/completions", json={"messages": messages}).json()
        messages += [first["choices"][0]["message"], {"role": "user", "content": "again"}]
        client.post(f"{url}/chat/completions", json={"messages": messages})
    text = tok.decode(endpoint.pop_episode(eid).context())
    assert f"{reply}<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n" in text


def test_a_turn_cut_on_a_fragment_of_the_turn_end_is_still_closed(tokenizers):
    """A code turn cut at max_new_tokens after ``if a<``: the feedback once began with the plain text
    ``|im_end|>``, so the special token never entered the context and the turn was never closed."""
    tok = tokenizers["chatml_qwen"]
    cut = tok("if a<", add_special_tokens=False)["input_ids"]
    assert tok.decode(cut[-1:]) == "<"
    env = ScriptedTurnsEnv(["SyntaxError"], "user")
    engine = Scripted([(cut, "length"), (tok("ok", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
                                         "stop")])
    [traj] = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64), chat_template=True).run(
        [env.tasks[0]])
    feedback = [s.token_ids for s in traj.segments if not s.is_action][0]
    assert feedback[0] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(feedback).startswith("<|im_end|>\n<|im_start|>user\nSyntaxError<|im_end|>")
