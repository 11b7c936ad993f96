"""A black-box agent written against the openai package trains 2 steps; the endpoint records every
completion token-exact and stitches an episode's completions into one trajectory."""

from __future__ import annotations

import threading

import pytest

openai = pytest.importorskip("openai")

from agentrl.models import load_causal_lm, load_tokenizer  # noqa: E402
from agentrl.rollout.engines.base import SamplingParams  # noqa: E402
from agentrl.rollout.engines.hf import HFEngine  # noqa: E402
from agentrl.rollout.openai_server import PolicyServer  # noqa: E402
from tests.adapters.conftest import FILES, sums, train  # noqa: E402


@pytest.mark.slow
def test_openai_agent_trains_two_steps(tmp_path, tiny, jsonl):
    data = jsonl([{"prompt": p, "label": a} for p, a in sums()])
    env = {"id": f"agent:{FILES / 'openai_agent.py'}:solve", "kwargs": {"dataset": data, "concurrency": 16}}
    steps = train(tmp_path, tiny, env, "data.prompts_per_step=2")  # an openai client costs ~0.1 s of CPU
    assert all(r["samples_used"] == 8 for r in steps)


@pytest.fixture(scope="module")
def server(tiny):
    tok = load_tokenizer(tiny)
    engine = HFEngine(load_causal_lm(tiny, device="cpu"), tok)
    srv = PolicyServer(engine, tok, SamplingParams(max_new_tokens=4, temperature=1.0)).start()
    yield srv, engine, tok
    srv.close()


def test_completions_are_recorded_token_exact_and_stitched(server):
    srv, engine, tok = server
    eid, url = srv.new_episode()
    client = openai.OpenAI(base_url=url, api_key="x")
    first = client.chat.completions.create(model="p", messages=[{"role": "user", "content": "1+2="}])
    text = first.choices[0].message.content
    msgs = [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": text},
            {"role": "user", "content": "again"}]
    client.chat.completions.create(model="p", messages=msgs, max_tokens=2)
    ep = srv.pop_episode(eid)
    assert ep.completions == 2 and ep.rewritten == 0
    assert ep.prompt_ids == tok("1+2=", add_special_tokens=False)["input_ids"]
    kinds = [s.is_action for s in ep.segments]
    assert kinds == [True, False, True]
    assert tok.decode(ep.segments[0].token_ids, skip_special_tokens=True) == text
    assert ep.segments[1].token_ids == tok("\nagain\n", add_special_tokens=False)["input_ids"]
    assert len(ep.segments[2].token_ids) <= 2
    assert all(len(s.logprobs) == len(s.token_ids) for s in ep.segments if s.is_action)
    # the recorded log-probs are the policy's for exactly these tokens (no re-tokenization)
    import torch

    ids = ep.context()
    with torch.no_grad():
        logits = engine.model(torch.tensor([ids])).logits[0].log_softmax(-1)
    start = len(ep.prompt_ids)
    seg = ep.segments[0]
    want = [logits[start + i - 1, t].item() for i, t in enumerate(seg.token_ids)]
    assert want == pytest.approx(seg.logprobs, abs=1e-3)


def test_completions_endpoint_and_concurrent_agents(server):
    srv, _, tok = server
    results: dict[int, list[str]] = {}

    def agent(k: int) -> None:
        eid, url = srv.new_episode()
        client = openai.OpenAI(base_url=url, api_key="x")
        a = client.completions.create(model="p", prompt=f"{k}+1=", max_tokens=3).choices[0].text
        b = client.completions.create(model="p", prompt=f"{k}+1={a} ok", max_tokens=3).choices[0].text
        ep = srv.pop_episode(eid)
        assert [s.is_action for s in ep.segments] == [True, False, True] and ep.rewritten == 0
        assert ep.segments[1].token_ids == tok(" ok", add_special_tokens=False)["input_ids"]
        results[k] = [a, b]

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [0, 1, 2, 3]
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/ep/999/v1", api_key="x").completions.create(
            model="p", prompt="x")


@pytest.mark.parametrize("stepwise", [False, True])
def test_a_rewritten_history_is_feedback_or_a_new_sample(server, stepwise):
    """An agent that edits its history (drops its first exchange): appended whole as feedback with
    rollout.samples=episode; with rollout.samples=turn the policy continues exactly what the agent sent,
    and that context starts a new sample of the episode."""
    srv, _, tok = server
    srv.stepwise = stepwise
    try:
        eid, url = srv.new_episode()
        client = openai.OpenAI(base_url=url, api_key="x")
        text = client.completions.create(model="p", prompt="1+2=", max_tokens=3).choices[0].text
        client.completions.create(model="p", prompt=f"1+2={text} ok", max_tokens=3)  # extends: same sample
        client.completions.create(model="p", prompt="summary: 3. 2+2=", max_tokens=3)  # rewritten
        ep = srv.pop_episode(eid)
    finally:
        srv.stepwise = False
    assert ep.rewritten == 1 and ep.completions == 3
    if not stepwise:
        assert not ep.resets and [s.is_action for s in ep.segments] == [True, False, True, False, True]
        assert ep.segments[3].token_ids == tok("summary: 3. 2+2=", add_special_tokens=False)["input_ids"]
        return
    assert [s.is_action for s in ep.segments] == [True, False, True]
    [reset] = ep.resets
    assert reset.reason == "rewrite"
    assert reset.prompt_ids == tok("summary: 3. 2+2=", add_special_tokens=False)["input_ids"]
    assert [s.is_action for s in reset.segments] == [True]
    assert ep.context() == reset.prompt_ids + reset.segments[0].token_ids  # what the policy continued


def test_streamed_completions_are_recorded_like_plain_ones(server):
    srv, _, tok = server
    eid, url = srv.new_episode()
    client = openai.OpenAI(base_url=url, api_key="x")
    stream = client.chat.completions.create(model="p", messages=[{"role": "user", "content": "2+2="}], stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage is not None]
    ep = srv.pop_episode(eid)
    assert ep.completions == 1 and tok.decode(ep.segments[0].token_ids, skip_special_tokens=True) == text
    assert finish and finish[-1] in ("stop", "length")
    assert usage and usage[0].completion_tokens == len(ep.segments[0].token_ids)
    eid, url = srv.new_episode()
    pieces = list(openai.OpenAI(base_url=url, api_key="x").completions.create(model="p", prompt="3+3=", stream=True))
    assert "".join(p.choices[0].text for p in pieces) == tok.decode(srv.pop_episode(eid).segments[0].token_ids,
                                                                    skip_special_tokens=True)


def test_a_seeded_episode_samples_the_same_completions_beside_other_agents(server):
    """An episode opened with a seed: its completions are the same when it runs alone and when three other
    agents' requests share its engine calls (each completion draws from its own stream, not the batch's)."""
    srv, _, _ = server

    def agent(k: int, seed: int, out: dict[int, list[list[int]]]) -> None:
        eid, url = srv.new_episode(seed)
        client = openai.OpenAI(base_url=url, api_key="x")
        a = client.completions.create(model="p", prompt=f"{k}+1=", max_tokens=4).choices[0].text
        client.completions.create(model="p", prompt=f"{k}+1={a} ok", max_tokens=4)
        out[k] = [s.token_ids for s in srv.pop_episode(eid).segments if s.is_action]

    def play(agents: list[tuple[int, int]]) -> dict[int, list[list[int]]]:
        out: dict[int, list[list[int]]] = {}
        threads = [threading.Thread(target=agent, args=(k, seed, out)) for k, seed in agents]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return out

    alone = play([(0, 7)])[0]
    assert play([(1, 11), (0, 7), (2, 12), (3, 13)])[0] == alone
    assert play([(0, 7), (1, 11)])[0] == alone
    others = [play([(0, s)])[0] for s in (8, 9, 10)]
    assert any(o != alone for o in others)  # the seed is what fixes them
