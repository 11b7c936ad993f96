"""The learner's update runs on real tokens (length buckets, each trimmed) with the one-batch loss and
gradient."""

import copy

import pytest
import torch

from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.models import load_causal_lm, load_tokenizer
from agentrl.training.buckets import (
    bucket_tokens,
    cache_sized_tokens,
    fit_calls,
    length_buckets,
    padded_tokens,
)
from agentrl.training.experience import Experience
from agentrl.training.learner import (
    PolicyLearner,
    batched_logprobs,
    call_rows,
    call_token_cap,
    sequence_logprobs,
)
from agentrl.types import Segment, Trajectory


def test_length_buckets_hand_computed():
    lengths = [10, 2, 10, 2]
    # one batch costs 4 x 10 = 40 tokens; two buckets 2 x 10 + 2 x 2 = 24
    assert length_buckets(lengths, overhead_tokens=0) == [[0, 2], [1, 3]]
    assert padded_tokens(lengths, length_buckets(lengths, 0)) == 24
    assert length_buckets(lengths, overhead_tokens=15) == [[0, 2], [1, 3]]   # 24 + 15 < 40
    assert length_buckets(lengths, overhead_tokens=16) == [[0, 1, 2, 3]]     # 24 + 16 = 40: fewer buckets win
    assert length_buckets([5], 0) == [[0]]


def test_shared_prompts_cost_once_per_bucket_hand_computed():
    # two groups of two rows, prompts of 30 tokens; responses 10 and 2 tokens in each group
    lengths = [40, 32, 40, 32]
    prompts = [(0, 30), (0, 30), (1, 30), (1, 30)]
    # one bucket: 2 distinct prompts x 30 + 4 rows x 10 = 100
    assert bucket_tokens(lengths, [0, 1, 2, 3], prompts) == 100
    # by length: {0, 2} and {1, 3} each hold both prompts: 2 x (2 x 30) + 2 x 10 + 2 x 2 = 144 > 100
    assert padded_tokens(lengths, [[0, 2], [1, 3]], prompts) == 144
    assert length_buckets(lengths, 0, prompts=prompts) == [[0, 1, 2, 3]]
    # without shared prompts the same split pays (2 x 40 + 2 x 32 = 144 < 4 x 40 = 160)
    assert length_buckets(lengths, 0) == [[0, 2], [1, 3]]
    # short prompts: the split pays again, 2 x (2 x 3) + 2 x 10 + 2 x 2 = 36 < 2 x 3 + 4 x 10 = 46
    short = [13, 5, 13, 5]
    prompts3 = [(0, 3), (0, 3), (1, 3), (1, 3)]
    assert length_buckets(short, 0, prompts=prompts3) == [[0, 2], [1, 3]]
    assert length_buckets(short, 10, prompts=prompts3) == [[0, 1, 2, 3]]  # 36 + 10 = 46: fewer buckets win
    # distinct prompts are padded to the bucket's longest: 2 x 7 + 2 x max(10, 4)
    assert bucket_tokens([17, 7], [0, 1], [(0, 7), (1, 3)]) == 34


def test_length_buckets_cover_every_row_once_and_never_cost_more():
    g = torch.Generator().manual_seed(0)
    for n in (3, 17, 64, 300):
        lengths = torch.randint(1, 200, (n,), generator=g).tolist()
        for overhead in (0, 64, 512):
            buckets = length_buckets(lengths, overhead)
            assert sorted(i for b in buckets for i in b) == list(range(n))
            assert padded_tokens(lengths, buckets) + overhead * (len(buckets) - 1) <= n * max(lengths)
            prompts = [(i // 8, 1 + i // 8 % 5) for i in range(n)]
            buckets = length_buckets(lengths, overhead, prompts=prompts)
            assert sorted(i for b in buckets for i in b) == list(range(n))
            cost = padded_tokens(lengths, buckets, prompts) + overhead * (len(buckets) - 1)
            assert cost <= bucket_tokens(lengths, list(range(n)), prompts)


def test_fit_calls_hand_computed():
    lengths = [10, 9, 10, 2, 8]
    # one bucket of 5 rows x 10 = 50 tokens; at most 20 per call: ceil(50 / 20) = 3 pieces of
    # 1, 2 and 2 rows, longest first (rows 0, 2 | 1, 4 | 3 by length)
    assert fit_calls(lengths, [[0, 1, 2, 3, 4]], 20) == [[0], [1, 2], [3, 4]]
    assert padded_tokens(lengths, fit_calls(lengths, [[0, 1, 2, 3, 4]], 20)) == 10 + 20 + 16
    # buckets within the cap, single rows and no cap are left alone
    assert fit_calls(lengths, [[0, 2], [1, 3, 4]], 30) == [[0, 2], [1, 3, 4]]
    assert fit_calls([50], [[0]], 10) == [[0]]
    assert fit_calls(lengths, [[0, 1, 2, 3, 4]], 0) == [[0, 1, 2, 3, 4]]
    # shared prompts of 30 tokens, responses 10 and 2: by length each piece holds both prompts
    # (2 x (2 x 30) + 2 x 10 + 2 x 2 = 144); whole groups cost 2 x (30 + 2 x 10) = 100
    lengths, prompts = [40, 32, 40, 32], [(0, 30), (0, 30), (1, 30), (1, 30)]
    assert fit_calls(lengths, [[0, 1, 2, 3]], 60, prompts) == [[0, 1], [2, 3]]
    assert fit_calls(lengths, [[0, 1, 2, 3]], 80) == [[0, 2], [1, 3]]  # no prompts: 160 tokens, 2 pieces


def test_fit_calls_cover_every_row_once_within_the_cap():
    g = torch.Generator().manual_seed(1)
    for n in (2, 17, 64, 300):
        lengths = torch.randint(1, 200, (n,), generator=g).tolist()
        for cap in (150, 1000, 5000):
            calls = fit_calls(lengths, length_buckets(lengths, 64), cap)
            assert sorted(i for c in calls for i in c) == list(range(n))
            # even pieces of length-sorted rows: each within the cap plus one row of the longest
            assert all(bucket_tokens(lengths, c) <= cap + max(lengths) for c in calls)


def test_cache_sized_tokens_and_the_learner_cap(tiny):
    assert cache_sized_tokens(512) == 2048                  # 2048 x 512 x 4 bytes = 4 MiB
    assert cache_sized_tokens(1536) == 682                  # SmolLM2-135M's MLP width
    assert cache_sized_tokens(1536, itemsize=2) == 1365     # bf16 holds twice the tokens
    assert cache_sized_tokens(10**6) == 256                 # never below the floor
    with pytest.raises(ValueError, match="positive"):
        cache_sized_tokens(0)
    model, _ = tiny
    assert call_token_cap(model) == cache_sized_tokens(model.config.intermediate_size)
    assert call_token_cap(model, 0) == 0 and call_token_cap(model, 777) == 777
    with pytest.raises(ValueError, match="learner.call_tokens must be -1"):
        call_token_cap(model, -2)


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    path, _ = tiny_arith
    return load_causal_lm(path, device="cpu"), load_tokenizer(path)


def uneven_batch(tok) -> Experience:
    """Two groups of 6 samples whose responses run 1-40 tokens (most of a padded batch is padding)."""
    g = torch.Generator().manual_seed(3)
    trajs = []
    for gid, prompt in enumerate(["12+34=", "7+8="]):
        p = tok(prompt)["input_ids"]
        for k in (1, 2, 5, 12, 33, 40):
            resp = torch.randint(3, len(tok), (k,), generator=g).tolist()
            logp = (-torch.rand(k, generator=g)).tolist()
            trajs.append(Trajectory(prompt_ids=p, segments=[Segment(resp, True, logp)], reward=float(k % 2),
                                    group_id=gid, task_id=str(gid)))
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)
    exp.advantages = torch.randn(exp.action_mask.shape, generator=g) * exp.action_mask
    return exp


@pytest.mark.parametrize("shared_prefix", [False, True])
@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_bucketed_update_has_the_one_batch_gradient(tiny, shared_prefix, loss_agg):
    model, tok = tiny
    exp = uneven_batch(tok)
    exp.old_logprobs = exp.action_mask * -0.5  # off the current policy: ratios and clipping take part
    results = []
    for overhead, cap in ((-1, 0), (0, 0), (64, 60)):  # one call; length buckets; buckets cut to 60 tokens
        m = copy.deepcopy(model)
        learner = PolicyLearner(m, LearnerConfig(grad_clip=0.0, shared_prefix=shared_prefix),
                                AlgoConfig(loss_agg=loss_agg), max_new_tokens=40)
        learner.bucket_overhead_tokens, learner.call_tokens = overhead, cap
        learner.optimizer = torch.optim.SGD(m.parameters(), lr=1.0)  # parameters move by exactly -grad
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
        parts = learner.micro_batches(exp)
        assert (len(parts) == 1) == (overhead < 0)
        assert cap == 0 or len(parts) > len(call_rows(exp, overhead, 0, shared_prefix))
        before = [p.detach().clone() for p in m.parameters()]
        metrics = learner.train_step(exp)
        grads = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, m.parameters())])
        results.append((grads, metrics, parts))
    g0, m0, _ = results[0]
    assert g0.abs().max() > 0
    for g1, m1, _ in results[1:]:
        torch.testing.assert_close(g1, g0, atol=1e-6, rtol=1e-5)
        for key in ("policy_loss", "entropy", "clipfrac", "ratio"):
            assert m1[key] == pytest.approx(m0[key], abs=1e-6), key
    # the buckets cost fewer tokens than the padded batch
    lengths = exp.attention_mask.sum(-1).tolist()
    assert padded_tokens(lengths, length_buckets(lengths, 0)) < len(lengths) * max(lengths)


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_scoring_in_calls_gives_the_one_batch_logprobs(tiny, shared_prefix):
    model, tok = tiny
    exp = uneven_batch(tok)
    mask = exp.action_mask
    with torch.no_grad():
        whole, _ = sequence_logprobs(model, exp.sequences, exp.attention_mask)
    whole = whole[:, :mask.shape[1]] * mask
    assert len(call_rows(exp, call_tokens=60, shared_prefix=shared_prefix)) > len(call_rows(exp)) > 1
    for micro_batch_size, call_tokens in ((64, 0), (64, 60), (5, 60)):
        out = batched_logprobs(model, exp, micro_batch_size, shared_prefix=shared_prefix, call_tokens=call_tokens)
        torch.testing.assert_close(out * mask, whole, atol=1e-5, rtol=1e-5)
