"""SFT batches whose rows begin alike (the system prompt every warm-start example repeats) run that prefix
once: the same log-probs and gradients as the plain forward, checked on random batches against it."""

from __future__ import annotations

import random

import pytest
import torch

from agentrl.algorithms import sft_loss
from agentrl.training.learner import sequence_logprobs
from agentrl.training.packing import SHARED_PREFIX_MIN, common_prefix
from agentrl.training.supervised import batch_logprobs, make_batch
from agentrl.types import Segment, Trajectory


def _model(arch: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    common = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256, pad_token_id=1, eos_token_id=0)
    if arch == "qwen2":  # grouped KV heads, biases on q/k/v
        return Qwen2ForCausalLM(Qwen2Config(num_key_value_heads=2, tie_word_embeddings=False, **common))
    return LlamaForCausalLM(LlamaConfig(num_key_value_heads=4, tie_word_embeddings=True, **common))


def _examples(rng: random.Random, prefix: int, rows: int, loss_in_prefix: bool) -> list[Trajectory]:
    """``rows`` examples that share ``prefix`` leading tokens, then differ; lengths vary. With
    ``loss_in_prefix`` an action segment sits inside the shared part (a chat's first assistant turn)."""
    head = [rng.randrange(2, 97) for _ in range(prefix)]
    out = []
    for i in range(rows):
        own = [rng.randrange(2, 97) for _ in range(rng.randint(1, 9))]
        own[0] = 2 + (i % 95)  # rows differ right after the prefix (row 0 and 95 may match: fine)
        resp = [rng.randrange(2, 97) for _ in range(rng.randint(1, 12))]
        if loss_in_prefix:
            segs = [Segment(head[prefix // 2:], True), Segment(own, False), Segment(resp, True)]
            prompt = head[:prefix // 2]
        else:
            segs, prompt = [Segment(resp, True)], head + own
        out.append(Trajectory(prompt_ids=prompt, segments=segs, reward=0.0, task_id="", group_id=i))
    return out


def _loss_and_grads(model, batch, shared: bool) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    lp = (batch_logprobs(model, batch) if shared else
          sequence_logprobs(model, batch.sequences, batch.attention_mask)[0])
    loss = sft_loss(lp, batch.action_mask, num_tokens=int(batch.action_mask.sum()))
    loss.backward()
    return loss.detach(), lp.detach() * batch.action_mask, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("case", ["system_prompt", "loss_in_prefix", "prefix_is_a_whole_row", "at_threshold"])
def test_a_shared_prefix_gives_the_plain_forwards_logprobs_and_gradients(arch, case):
    model = _model(arch).train()
    rng = random.Random(hash((arch, case)) % 1000)
    prefix = {"system_prompt": 40, "loss_in_prefix": 40, "prefix_is_a_whole_row": 30,
              "at_threshold": SHARED_PREFIX_MIN}[case]
    examples = _examples(rng, prefix, rows=7, loss_in_prefix=case == "loss_in_prefix")
    if case == "prefix_is_a_whole_row":  # one row is the prefix and one response token: the cap keeps it its own
        examples.append(Trajectory(prompt_ids=examples[0].prompt_ids[:prefix], segments=[Segment([5], True)],
                                   reward=0.0, task_id="", group_id=99))
    batch = make_batch(examples, 1)
    n = common_prefix(batch.sequences, batch.attention_mask)
    assert n >= SHARED_PREFIX_MIN
    plain_loss, plain_lp, plain_g = _loss_and_grads(model, batch, shared=False)
    loss, lp, grads = _loss_and_grads(model, batch, shared=True)
    assert loss.item() == pytest.approx(plain_loss.item(), abs=1e-5)
    assert torch.allclose(lp, plain_lp, atol=1e-5)
    for g, h in zip(grads, plain_g):
        assert torch.allclose(g, h, atol=1e-6, rtol=1e-4)


def test_the_shared_path_runs_the_prefix_once(monkeypatch):
    """The prefix really is run once: the first decoder call sees one row of ``common_prefix`` tokens."""
    import agentrl.training.packing as packing

    model = _model("llama")
    batch = make_batch(_examples(random.Random(3), 24, rows=5, loss_in_prefix=False), 1)
    shapes = []
    real = packing.decode

    def spy(model, head, **kw):
        shapes.append(tuple(kw["input_ids"].shape))
        return real(model, head, **kw)

    monkeypatch.setattr(packing, "decode", spy)
    with torch.no_grad():
        batch_logprobs(model, batch)
    assert shapes[0] == (1, common_prefix(batch.sequences, batch.attention_mask))
    assert shapes[1][0] == 5


def test_common_prefix_by_hand():
    def cp(rows: list[list[int]], lens: list[int]) -> int:
        seq = torch.tensor(rows)
        mask = (torch.arange(seq.shape[1])[None] < torch.tensor(lens)[:, None]).long()
        return common_prefix(seq, mask)

    assert cp([[7, 8, 3, 4], [7, 8, 5, 6]], [4, 4]) == 2
    assert cp([[7, 8, 3, 1], [7, 8, 3, 4]], [3, 4]) == 2        # the shortest row keeps its last token
    assert cp([[7, 8, 3, 1, 1], [7, 8, 3, 1, 1]], [3, 3]) == 2  # equal rows, padding alike: still capped
    assert cp([[5, 8], [6, 8]], [2, 2]) == 0
    assert cp([[7, 8, 9]], [3]) == 0                           # one row shares with nobody
    assert cp([[7, 1], [7, 1]], [1, 1]) == 0                   # a one-token row has no prefix to give


def _groups(rng: random.Random, prefix: int, prompts: int, n: int, shortest: bool) -> tuple[torch.Tensor, ...]:
    """RL rows: ``prompts`` distinct prompts that begin with one ``prefix`` (a system prompt), ``n`` samples each
    (some groups of one), right-padded; with ``shortest`` one prompt is the prefix and one token of its own."""
    from agentrl.training.experience import Experience

    head = [rng.randrange(2, 97) for _ in range(prefix)]
    trajs = []
    for g in range(prompts):
        own = [2 + g] + [rng.randrange(2, 97) for _ in range(0 if shortest and g == 0 else rng.randint(0, 8))]
        for _ in range(1 if g == prompts - 1 else n):
            resp = [rng.randrange(2, 97) for _ in range(rng.randint(1, 10))]
            trajs.append(Trajectory(prompt_ids=head + own, segments=[Segment(resp, True)], reward=0.0, task_id="",
                                    group_id=g))
    e = Experience.from_trajectories(trajs, 1)
    return e.sequences, e.attention_mask, e.action_mask


@pytest.mark.parametrize(("arch", "checkpointing"), [("llama", False), ("qwen2", False), ("llama", True)])
@pytest.mark.parametrize("shortest", [False, True])
def test_distinct_prompts_that_begin_alike_run_that_beginning_once(arch, checkpointing, shortest, monkeypatch):
    """The learner's path: groups' prompts differ but share a system prompt; it runs once for all of them, and the
    log-probs, entropies and gradients are the plain forward's (with decoder activation checkpointing too)."""
    import agentrl.training.packing as packing
    from agentrl.training.activation_checkpointing import enable_activation_checkpointing
    from agentrl.training.packing import prompt_lengths

    model = _model(arch).train()
    if checkpointing:
        assert enable_activation_checkpointing(model) > 0
    seq, mask, amask = _groups(random.Random(7 + shortest), 30, prompts=4, n=3, shortest=shortest)
    P = prompt_lengths(amask, mask)
    calls = []
    real = packing.decode

    def spy(model, head, **kw):
        calls.append(tuple(kw["input_ids"].shape))
        return real(model, head, **kw)

    out = {}
    for shared in (False, True):
        model.zero_grad()
        monkeypatch.setattr(packing, "decode", spy if shared else real)
        lp, ent = sequence_logprobs(model, seq, mask, with_entropy=True, prompt_lens=P if shared else None)
        (-(lp * amask).sum()).backward()
        out[shared] = (lp * amask, ent * amask, [p.grad.clone() for p in model.parameters()])
    assert calls[0] == (1, 30) and calls[1][0] == 4 and calls[2][0] == seq.shape[0]  # prefix, prompts, samples
    assert torch.allclose(out[True][0], out[False][0], atol=1e-5)
    assert torch.allclose(out[True][1], out[False][1], atol=1e-4)
    for g, h in zip(out[True][2], out[False][2]):
        assert torch.allclose(g, h, atol=1e-6, rtol=1e-4)
