"""Log-probs through the LM head in chunks: the full logits' values and gradients, one chunk at a time."""

import pytest
import torch

from agentrl.models import load_causal_lm, load_tokenizer
from agentrl.training import packing
from agentrl.training.learner import FrozenModel, sequence_logprobs
from agentrl.training.packing import prompt_lengths
from agentrl.training.supervised import batch_logprobs, make_batch
from tests.test_packing import make_batch as make_experience


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    path, _ = tiny_arith
    torch.manual_seed(0)
    return load_causal_lm(path, device="cpu"), load_tokenizer(path)


def run(model, exp, chunk, shared, temperature=1.0):
    """Log-probs, entropy (valid positions) and every gradient of a loss using both."""
    model.zero_grad(set_to_none=True)
    lens = prompt_lengths(exp.action_mask, exp.attention_mask) if shared else None
    lp, ent = sequence_logprobs(model, exp.sequences, exp.attention_mask, temperature=temperature,
                                with_entropy=True, entropy_grad=True, prompt_lens=lens, chunk_tokens=chunk)
    ((lp * exp.advantages).sum() + 0.1 * (ent * exp.action_mask).sum()).backward()
    valid = exp.attention_mask[:, 1:].bool()
    return lp.detach()[valid], ent.detach()[valid], {n: p.grad.clone() for n, p in model.named_parameters()}


def head_rows(model):
    """Record the rows the LM head sees per call (a forward hook)."""
    rows: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda m, args, out: rows.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
    return rows, handle


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_entropy_and_gradients_match_full_logits(tiny, shared, temperature, monkeypatch):
    model, tok = tiny
    exp = make_experience(tok, seed=1)
    full = run(model, exp, 0, shared, temperature)
    monkeypatch.setattr(packing, "SMALL_LOGITS_BYTES", 0)  # these logits are small: force the chunked path
    rows, handle = head_rows(model)
    chunked = run(model, exp, 7, shared, temperature)  # 7 divides no row length: chunks cross rows
    handle.remove()
    assert rows and max(rows) <= 7  # the head never saw more than one chunk (forward and recompute)
    torch.testing.assert_close(chunked[0], full[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(chunked[1], full[1], atol=1e-5, rtol=0)
    for name, g in full[2].items():
        torch.testing.assert_close(chunked[2][name], g, atol=1e-5, rtol=1e-4, msg=name)


def test_small_logits_run_the_head_once_without_checkpointing(tiny, monkeypatch):
    """Under SMALL_LOGITS_BYTES (or within one chunk) one head call per states, no recompute; same
    values and gradients as the chunked path."""
    model, tok = tiny
    exp = make_experience(tok, seed=4)
    monkeypatch.setattr(packing, "SMALL_LOGITS_BYTES", 0)
    chunked = run(model, exp, 7, False)
    monkeypatch.undo()
    calls = []
    monkeypatch.setattr(packing, "checkpoint", lambda *a, **k: calls.append(1))
    rows, handle = head_rows(model)
    fast = run(model, exp, 7, False)
    handle.remove()
    assert not calls and rows == [exp.sequences.numel() - len(exp)]  # the head saw every row once
    for a, b in zip(fast[:2], chunked[:2]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for name, g in chunked[2].items():
        torch.testing.assert_close(fast[2][name], g, atol=1e-5, rtol=1e-4, msg=name)


def test_full_logits_path_runs_the_head_on_the_whole_batch(tiny):
    model, tok = tiny
    exp = make_experience(tok, seed=2)
    rows, handle = head_rows(model)
    sequence_logprobs(model, exp.sequences, exp.attention_mask, chunk_tokens=0)
    handle.remove()
    assert rows == [exp.sequences.numel()]


def test_reference_and_packed_sft_logprobs_are_chunked_and_unchanged(tiny):
    model, tok = tiny
    exp = make_experience(tok, seed=3)
    ref = FrozenModel(load_causal_lm(model.name_or_path, device="cpu"), micro_batch_size=4)
    rows, handle = head_rows(ref.model)
    chunked = ref.logprobs(exp)
    handle.remove()
    assert max(rows) <= 1024
    with torch.no_grad():
        full, _ = sequence_logprobs(ref.model, exp.sequences, exp.attention_mask, chunk_tokens=0)
    torch.testing.assert_close(chunked[:, :full.shape[1]] * exp.action_mask, full * exp.action_mask,
                               atol=1e-5, rtol=0)
    pairs = [(tok("12+34=")["input_ids"], tok("46")["input_ids"]), (tok("7+8=")["input_ids"], tok("15")["input_ids"])]
    packed = make_batch(pairs, tok.pad_token_id, packing=True, pack_length=64)
    with torch.no_grad():
        lp = batch_logprobs(model, packed)
        logits = model(input_ids=packed.sequences, attention_mask=packed.attention_mask,
                       position_ids=packed.position_ids).logits[:, :-1]
        want = torch.log_softmax(logits.float(), -1).gather(-1, packed.sequences[:, 1:, None])[..., 0]
    torch.testing.assert_close(lp * packed.action_mask, want * packed.action_mask, atol=1e-5, rtol=0)
