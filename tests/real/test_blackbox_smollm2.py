"""The black-box agent endpoint with a real chat template (SmolLM2's ChatML): moved here from
tests/adapters, where its ``real and slow`` markers kept it out of every tier of ``make test``."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

from agentrl.models import load_causal_lm, load_tokenizer  # noqa: E402
from agentrl.rollout.engines.base import SamplingParams  # noqa: E402
from agentrl.rollout.engines.hf import HFEngine  # noqa: E402
from agentrl.rollout.openai_server import PolicyServer  # noqa: E402

pytestmark = pytest.mark.real


def test_chat_template_stitching_matches_the_template(smollm2):
    """The stitched context is what the template renders for the agent's conversation: the policy's own
    turn-end token is kept, the rest of the closing added."""
    tok = load_tokenizer(smollm2)
    engine = HFEngine(load_causal_lm(smollm2, device="cpu"), tok)
    srv = PolicyServer(engine, tok, SamplingParams(max_new_tokens=6, temperature=1.0), chat_template=True).start()
    try:
        eid, url = srv.new_episode()
        client = openai.OpenAI(base_url=url, api_key="x")
        msgs = [{"role": "user", "content": "What is 3+4?"}]
        msgs.append({"role": "assistant", "content": client.chat.completions.create(
            model="p", messages=msgs).choices[0].message.content})
        msgs.append({"role": "user", "content": "Are you sure?"})
        client.chat.completions.create(model="p", messages=msgs)
        ep = srv.pop_episode(eid)
    finally:
        srv.close()
    assert ep.rewritten == 0 and [s.is_action for s in ep.segments] == [True, False, True]
    stitched = tok.decode(ep.context()[:-len(ep.segments[-1].token_ids)])
    assert stitched == tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
