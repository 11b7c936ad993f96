"""The streamed weight sync's pieces without Ray: buckets in the engine's dtype and a reload that
consumes them as they arrive (the Ray path itself: tests/distributed/test_ray_e2e.py)."""

import copy

import pytest
import torch

from agentrl.distributed.weight_sync import StreamingReload, bucket_bytes, from_bucket, to_buckets
from agentrl.rollout.engines import SamplingParams
from agentrl.rollout.engines.hf import HFEngine

pytest.importorskip("numpy")


def named(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(f"w{i}", torch.randn(n, 8, generator=g)) for i, n in enumerate((4, 16, 1, 32, 8))]


@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.float16])
def test_buckets_round_trip_in_the_engine_dtype(dtype):
    src = named()
    buckets = list(to_buckets(src, dtype, bucket_bytes=600))
    assert len(buckets) > 1 and all(bucket_bytes(b) > 0 for b in buckets[:-1])
    got = [(n, t) for b in buckets for n, t in from_bucket(b)]
    assert [n for n, _ in got] == [n for n, _ in src]
    for (_, t), (_, s) in zip(got, src):
        assert t.dtype == (dtype or s.dtype)
        assert torch.equal(t, s.to(dtype or s.dtype))
    size = 2 if dtype is not None else 4
    assert sum(bucket_bytes(b) for b in buckets) == sum(s.numel() for _, s in src) * size


def test_buckets_are_snapshots_unless_told_otherwise():
    src = named()
    buckets = list(to_buckets(src))
    src[0][1].add_(1.0)
    assert not torch.equal(next(from_bucket(buckets[0]))[1], src[0][1])


def test_streaming_reload_loads_buckets_as_they_arrive(tiny_arith):
    from agentrl.models import load_causal_lm, load_tokenizer

    path, _ = tiny_arith
    policy, tok = load_causal_lm(path, device="cpu"), load_tokenizer(path)
    engine = HFEngine(copy.deepcopy(policy), tok)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    buckets = list(to_buckets(policy.named_parameters(), torch.float32, bucket_bytes=64 << 10))
    assert len(buckets) > 2
    calls = []
    original = engine.load_weights

    def load(tensors):  # one reload over a lazy iterator: it may start before the last bucket is in
        calls.append(type(tensors))
        original(tensors)

    engine.load_weights = load
    reload = StreamingReload(engine)
    for b in buckets:
        reload.add(b)
    stats = reload.end()
    assert len(calls) == 1 and calls[0] is not list and stats["bytes"] == sum(bucket_bytes(b) for b in buckets)
    assert 0 <= stats["reload_s"] <= stats["seconds"]
    for (n, p), (_, q) in zip(policy.named_parameters(), engine.model.named_parameters()):
        assert torch.equal(p, q), n
    prompt = [tok.encode("12+3=")]
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    assert engine.generate(prompt, greedy)[0].token_ids == HFEngine(policy, tok).generate(prompt, greedy)[0].token_ids


def test_streaming_reload_reraises_the_engine_error():
    class Broken:
        def load_weights(self, tensors):
            for name, _ in tensors:
                raise KeyError(f"engine model has no parameter {name!r}")

    reload = StreamingReload(Broken())
    reload.add(next(to_buckets(named())))
    with pytest.raises(KeyError, match="w0"):
        reload.end()
