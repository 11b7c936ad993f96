"""Benchmark: the supervised steps of a config's warm start (default ``examples/configs/terminal_tiny.yaml``),
this checkout and another, A/B interleaved.

    python bench/warm_start.py [--config FILE] [--steps 40] [--warmup 5] [--threads 2] [--rounds 2]
                               [--before DIR] [overrides ...]

Each round runs, in a fresh process per checkout, the warm start's own code on the config's reference
examples (``agentrl.training.warm_start.reference_examples``: the env's reference episodes, as ``agentrl
train`` makes them) and ``train_sft`` for ``--warmup`` + ``--steps`` optimizer steps at the config's batch
size and learning rate, without dev evaluations; a step's seconds come from the warm start's curve
(``SFTResult.curve``). Both checkouts start from the same weights and examples, so their losses must
agree; the table has them. ``--before DIR`` is a ``git worktree`` of an earlier commit (its own copy of the
config when the config is a file of this repository). Run on a quiet machine, one compute process at a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from _ab import by_checkout, checkout_worker


def worker(root: str, config: str, overrides: list[str], steps: int, warmup: int) -> dict:
    """``warmup`` + ``steps`` warm-start steps of ``config`` with the checkout at ``root``: seconds a step,
    the last loss, the examples' tokens."""
    sys.path.insert(0, root)
    import torch

    from agentrl.config import load_config
    from agentrl.env import fixed_tasks
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.training.supervised import train_sft
    from agentrl.training.warm_start import reference_examples

    cfg = load_config(config, overrides)
    ws = cfg.model.warm_start
    env = make_env(cfg)
    model, tokenizer = load_policy(cfg, resolve_model_path(cfg, env))
    torch.manual_seed(cfg.data.seed)
    tasks = fixed_tasks(env, min(ws.examples, ws.batch_size * (steps + warmup)), cfg.data.seed + 1)
    examples = reference_examples(cfg, env, HFEngine(model, tokenizer), tokenizer, tasks, log=lambda *_: None)
    result = train_sft(model, examples, tokenizer.pad_token_id, lr=ws.lr, batch_size=ws.batch_size,
                       max_steps=steps + warmup, eval_every=0, patience=1, seed=cfg.data.seed, log=lambda *_: None)
    import agentrl

    assert agentrl.__file__.startswith(root), (agentrl.__file__, root)  # this checkout's code ran
    seconds = [s for _, _, s in result.curve]
    step_s = [b - a for a, b in zip(seconds[warmup - 1:], seconds[warmup:])] if warmup else seconds
    tokens = statistics.mean(len(getattr(e, "prompt_ids", e[0])) + len(getattr(e, "response_ids", e[1]))
                             for e in examples)
    return {"step_s": step_s, "loss": result.final_loss, "tokens": tokens, "examples": len(examples)}


def table(runs: dict[str, list[dict]]) -> str:
    out = ["| checkout | round | median step s | mean step s | steps | last loss | tokens an example |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name, results in runs.items():
        for i, r in enumerate(results):
            out.append(f"| {name} | {i + 1} | {statistics.median(r['step_s']):.3f} | {statistics.mean(r['step_s']):.3f} "
                       f"| {len(r['step_s'])} | {r['loss']:.4f} | {r['tokens']:.0f} |")
    if len(runs) == 2:
        (a, _), (b, _) = runs.items()
        for what, f in (("median", statistics.median), ("mean", statistics.mean)):
            v = {n: f([s for r in rs for s in r["step_s"]]) for n, rs in runs.items()}
            out.append(f"\n{what} step: {a} {v[a]:.3f} s, {b} {v[b]:.3f} s: {b} / {a} = {v[b] / v[a]:.2f}x")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="examples/configs/terminal_tiny.yaml")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", default=None, metavar="DIR", help="run the same steps in this checkout too")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    args.config = str(Path(args.config).resolve())
    runs = by_checkout(args.before, args.rounds, lambda root: checkout_worker(
        "warm_start", root, args.config, args.overrides, args.steps, args.warmup, args.threads), digits=3)
    print(table(runs))


if __name__ == "__main__":
    main()
