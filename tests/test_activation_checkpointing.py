"""Decoder activation checkpointing: the plain forward's values and gradients (shared-prompt KV path and
LoRA included), fewer saved activations, and nothing changed outside training."""

import copy

import pytest
import torch

from agentrl.config.sections import LoraConfig
from agentrl.models import load_causal_lm, load_tokenizer
from agentrl.training.activation_checkpointing import (
    decoder_layers,
    disable_activation_checkpointing,
    enable_activation_checkpointing,
)
from agentrl.training.lora import apply_lora
from tests.test_packing import make_batch as make_experience


@pytest.fixture(scope="module")
def tiny_path(tiny_arith):
    return tiny_arith[0]


@pytest.fixture(scope="module")
def loaded(tiny_path):
    """The tiny model loaded once (each test checkpoints its own copy)."""
    return load_causal_lm(tiny_path, device="cpu"), load_tokenizer(tiny_path)


def run(model, exp, shared):
    """Log-probs, entropy (valid positions) and the trainable parameters' gradients of a loss using both."""
    from agentrl.training.learner import sequence_logprobs
    from agentrl.training.packing import prompt_lengths

    model.zero_grad(set_to_none=True)
    lens = prompt_lengths(exp.action_mask, exp.attention_mask) if shared else None
    lp, ent = sequence_logprobs(model, exp.sequences, exp.attention_mask, with_entropy=True, entropy_grad=True,
                                prompt_lens=lens, chunk_tokens=7)
    ((lp * exp.advantages).sum() + 0.1 * (ent * exp.action_mask).sum()).backward()
    valid = exp.attention_mask[:, 1:].bool()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return lp.detach()[valid], ent.detach()[valid], grads


def saved_bytes(model, exp, shared):
    """Bytes autograd saves for backward in one forward of the learner's log-probs."""
    from agentrl.training.learner import sequence_logprobs
    from agentrl.training.packing import prompt_lengths

    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    lens = prompt_lengths(exp.action_mask, exp.attention_mask) if shared else None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sequence_logprobs(model, exp.sequences, exp.attention_mask, with_entropy=True, prompt_lens=lens)
    return total[0]


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_checkpointed_values_and_gradients_match_the_plain_forward(loaded, shared, lora):
    torch.manual_seed(0)
    model = copy.deepcopy(loaded[0])
    if lora:
        model = apply_lora(model, LoraConfig(r=4))
        for n, p in model.named_parameters():  # non-zero B: the adapters' gradients are not all zero
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.02)
    model.train()
    exp = make_experience(loaded[1], seed=4)
    plain = run(model, exp, shared)
    plain_saved = saved_bytes(model, exp, shared)
    assert enable_activation_checkpointing(model) == len(decoder_layers(model))
    ckpt = run(model, exp, shared)
    assert saved_bytes(model, exp, shared) < 0.6 * plain_saved
    torch.testing.assert_close(ckpt[0], plain[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(ckpt[1], plain[1], atol=1e-5, rtol=0)
    assert plain[2].keys() == ckpt[2].keys()
    for name, g in plain[2].items():
        torch.testing.assert_close(ckpt[2][name], g, atol=1e-5, rtol=1e-4, msg=name)
    disable_activation_checkpointing(model)
    assert saved_bytes(model, exp, shared) == plain_saved


def test_generation_and_state_dict_are_unchanged(loaded):
    model, tok = copy.deepcopy(loaded[0]), loaded[1]
    keys = list(model.state_dict())
    ids = tok("12+34=", return_tensors="pt")["input_ids"]
    before = model.generate(ids, max_new_tokens=4, do_sample=False)
    enable_activation_checkpointing(model)
    enable_activation_checkpointing(model)  # idempotent
    model.train()
    with torch.no_grad():
        after = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert list(model.state_dict()) == keys and torch.equal(before, after)
