"""Conformance of every installed ``InferenceEngine`` backend (hf always; vllm when installed).

Each backend must: return one completion per prompt in order within the token budget; report the
log-prob of each sampled token exactly as the learner scores it (``sequence_logprobs``, logits /
temperature); stop on EOS and stop tokens; be reproducible under a seed; and, after
``load_weights``, generate from the new weights (the weight-sync contract of the distributed path).
"""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from agentrl.env import make
from agentrl.models import load_causal_lm, load_tokenizer, tiny_model_dir
from agentrl.rollout.build import tiny_corpus
from agentrl.rollout.engines import Completion, InferenceEngine, SamplingParams
from agentrl.training.learner import sequence_logprobs

BACKENDS = ["hf"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
TEXTS = ["1+2=", "7+8=", "9+9+9=", "3", "4+5=", "12+1="]


@pytest.fixture(scope="module")
def model_dir():
    env = make("agentrl/Arithmetic-v0", digits=1, operators="+", terms=2, template="{expr}=", bare_answer=True)
    return str(tiny_model_dir(tiny_corpus(env, n=300), hidden_size=64, num_layers=2, num_heads=2,
                              intermediate_size=128, vocab_size=320, max_position_embeddings=256, seed=0))


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def reference(model_dir):
    """The learner's view of the model (scores sequences; never used by an engine)."""
    return load_causal_lm(model_dir, device="cpu").eval()


@pytest.fixture(scope="module", params=BACKENDS)
def engine(request, model_dir, tokenizer):
    if request.param == "hf":
        from agentrl.rollout.engines.hf import HFEngine

        yield HFEngine(load_causal_lm(model_dir, device="cpu"), tokenizer)
        return
    from agentrl.rollout.engines.vllm import VLLMEngine

    eng = VLLMEngine(model_dir, seed=0, dtype="float32", max_model_len=256)
    yield eng
    del eng


@pytest.fixture
def prompts(tokenizer):
    return [tokenizer.encode(t) for t in TEXTS]


def learner_logprobs(model, prompt: list[int], c: Completion, temperature: float) -> torch.Tensor:
    """What the learner computes for the completion's tokens (teacher-forced), (len,)."""
    seq = torch.tensor([prompt + c.token_ids])
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, seq, torch.ones_like(seq), temperature=temperature)
    return lp[0, len(prompt) - 1:]


def test_protocol_order_and_budget(engine, prompts, tokenizer):
    assert isinstance(engine, InferenceEngine)
    out = engine.generate(prompts, SamplingParams(max_new_tokens=5, temperature=1.0, seed=1))
    assert len(out) == len(prompts)
    for c in out:
        assert 1 <= len(c.token_ids) <= 5 and len(c.logprobs) == len(c.token_ids)
        assert all(lp <= 0.0 for lp in c.logprobs)
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == tokenizer.eos_token_id
        else:
            assert c.finish_reason == "length" and len(c.token_ids) == 5
    # order: a prompt's greedy completion does not depend on its neighbours
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    alone = engine.generate(prompts[2:3], greedy)[0]
    assert engine.generate(prompts, greedy)[2].token_ids == alone.token_ids


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_match_the_learner(engine, reference, prompts, temperature):
    out = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=temperature, seed=3))
    for p, c in zip(prompts, out):
        expect = learner_logprobs(reference, p, c, temperature if temperature > 0 else 1.0)
        torch.testing.assert_close(torch.tensor(c.logprobs), expect, atol=2e-4, rtol=1e-4)
        if temperature == 0.0:  # greedy: every token is the argmax of the reference model
            seq = torch.tensor([p + c.token_ids])
            logits = reference(input_ids=seq).logits[0, len(p) - 1:-1]
            assert logits.argmax(-1).tolist() == c.token_ids


def test_seed_reproducible(engine, prompts):
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11)
    a = [c.token_ids for c in engine.generate(prompts, params)]
    b = [c.token_ids for c in engine.generate(prompts, params)]
    assert a == b


def test_stop_token_ids(engine, prompts):
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    free = engine.generate(prompts[:1], greedy)[0]
    stop = free.token_ids[2]
    first = free.token_ids.index(stop)
    c = engine.generate(prompts[:1], SamplingParams(max_new_tokens=6, temperature=0.0, stop_token_ids=(stop,)))[0]
    assert c.token_ids == free.token_ids[:first + 1] and c.finish_reason == "stop"


def test_load_weights_generates_from_the_new_weights(engine, reference, prompts):
    """Perturb every parameter (embeddings included: the LM head is tied), load, compare."""
    moved = copy.deepcopy(reference)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    engine.load_weights(moved.named_parameters())
    try:
        out = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.0))
        for p, c in zip(prompts, out):
            torch.testing.assert_close(torch.tensor(c.logprobs), learner_logprobs(moved, p, c, 1.0),
                                       atol=2e-4, rtol=1e-4)
    finally:
        engine.load_weights(reference.named_parameters())
    back = engine.generate(prompts[:2], SamplingParams(max_new_tokens=6, temperature=0.0))
    for p, c in zip(prompts, back):
        torch.testing.assert_close(torch.tensor(c.logprobs), learner_logprobs(reference, p, c, 1.0),
                                   atol=2e-4, rtol=1e-4)


def test_sleep_wake_and_bad_input(engine, prompts):
    engine.sleep()
    engine.wake_up()
    assert len(engine.generate(prompts[:2], SamplingParams(max_new_tokens=2))) == 2
    with pytest.raises(ValueError):
        engine.generate([[]], SamplingParams(max_new_tokens=2))
