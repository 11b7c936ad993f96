"""Synchronous vs asynchronous training, side by side in one run: samples/s, env-step concurrency,
staleness and mismatch, and what bounds each case.

    python bench/async.py [--steps 6] [--reps 2] [--cases demo,code,tool] [--json out.json]

Arms (each a real ``Trainer`` in this process, built once per case):
- ``sync``: today's path: env steps one after another (``rollout.env_workers=1``), then the update;
- ``pool``: env steps concurrent (``env_workers=8``), still synchronous;
- ``async``: concurrent env steps and ``rollout.async=true, max_staleness=1`` (the rollout worker
  makes the next batch while the learner trains on this one).

Cases: ``demo`` the CPU demo (2-digit addition, 32 prompts x 8, no warm start: throughput only);
``code`` MBPP with the tiny model, every response run by the sandbox (``code_grpo_tiny.yaml``);
``tool`` a 3-turn tool env whose tool takes 50 ms (scripted delay). Blocks of ``--steps`` steps are
interleaved across the arms ``--reps`` times; each block starts its rollout worker afresh (nothing
made ahead during another arm's block). samples/s = samples trained on / wall seconds of the block.
Torch runs one OpenMP thread per call (``OMP_NUM_THREADS=1`` unless set): on 2 shared cores two-thread
teams stall (measured here: the sync learner step 19 s with 2 threads, 1.3 s with 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# one OpenMP thread per torch call (as bench/run_all and the tests): two-thread OpenMP teams stall each
# other on a shared 2-core machine (MACHINE.md: 5-30x); the async arm's two threads then use both cores
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from environments.arithmetic import ArithmeticEnv  # noqa: E402

ARMS = {"sync": ["rollout.env_workers=1"], "pool": ["rollout.env_workers=8"],
        "async": ["rollout.env_workers=8", "rollout.async=true", "rollout.max_staleness=1"]}
COMMON = ["model.warm_start.enabled=false", "model.device=cpu", "log.progress=false", "log.tensorboard=false",
          "algo.drop_zero_std_groups=false", "data.eval_tasks=2", "checkpoint.save_final=false"]
CASES = {
    "demo": ("examples/configs/cpu_demo.yaml", []),
    "code": ("examples/configs/code_grpo_tiny.yaml", ["data.prompts_per_step=4", "rollout.n_samples=4",
                                                       "algo.kl_mode=none", "checkpoint.every=0", "eval.envs=[]"]),
    "tool": ("examples/configs/cpu_demo.yaml", ["env.id=bench/DelayedTool-v0", "data.prompts_per_step=8",
                                                "rollout.n_samples=4"]),
}


class DelayedTool(ArithmeticEnv):
    """Arithmetic as a 3-turn tool episode: turns 1-2 call a tool that takes 50 ms and answers
    "tool: ok"; turn 3 is scored (after the tool's 50 ms too)."""

    max_turns = 3

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        self.turn += 1
        time.sleep(0.05)  # the tool's work (a subprocess, an HTTP call, ...), off the GIL
        if self.turn < self.max_turns:
            return "tool: ok", 0.0, False, False, {"verified": True}
        return super().step(action)


def build(case: str, arm: str, run_dir: Path) -> Any:
    from agentrl.config import load_config
    from agentrl.env import register
    from agentrl.training.trainer import Trainer

    register("bench/DelayedTool-v0", DelayedTool, digits=2, template="{expr}=", bare_answer=True)
    path, extra = CASES[case]
    cfg = load_config(ROOT / path, COMMON + extra + ARMS[arm])
    return Trainer(cfg, run_dir=run_dir)


def block(trainer: Any, steps: int) -> dict[str, float]:
    """``steps`` training steps with a fresh rollout worker; samples/s and the steps' mean metrics."""
    trainer.rollouts = trainer.build_rollouts()
    rows, samples = [], 0
    start = time.perf_counter()
    for _ in range(steps):
        m = trainer.step()
        trainer.step_idx += 1
        rows.append(m)
        samples += int(m["samples_used"])
    wall = time.perf_counter() - start
    trainer.rollouts.close()
    keys = ("time/generate", "time/update", "time/step", "staleness/mean", "staleness/max",
            "mismatch/logprob_abs_diff_mean", "mismatch/logprob_abs_diff_max", "failed/count")
    out = {k: statistics.mean(r[k] for r in rows if k in r) for k in keys if any(k in r for r in rows)}
    out.update(samples_per_s=samples / wall, wall_s=wall, env_concurrency=float(trainer.executor.pool.max_running))
    return out


def bound(r: dict[str, float], arm: str) -> str:
    gen, upd = r.get("time/generate", 0.0), r.get("time/update", 0.0)
    if arm != "async":
        return f"rollout {gen:.2f} s + learner {upd:.2f} s per step, one after the other"
    side = "rollout" if gen > upd else "learner"
    return f"{side} (rollout {gen:.2f} s vs learner {upd:.2f} s per step, overlapped)"


def run_case(case: str, steps: int, reps: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench_async_{case}_"))
    trainers = {arm: build(case, arm, tmp / arm) for arm in ARMS}
    for t in trainers.values():  # warm-up: one step each (allocations, first sandbox start)
        block(t, 1)
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for _ in range(reps):
        for arm, t in trainers.items():
            results[arm].append(block(t, steps))
    table = {}
    for arm, rs in results.items():
        merged = {k: statistics.median(r[k] for r in rs if k in r) for k in rs[0]}
        merged["bound"] = bound(merged, arm)
        table[arm] = merged
    base = table["sync"]["samples_per_s"]
    for arm in table:
        table[arm]["speedup"] = table[arm]["samples_per_s"] / base
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="steps per timed block")
    ap.add_argument("--reps", type=int, default=2, help="blocks per arm (interleaved)")
    ap.add_argument("--cases", default="demo,code,tool")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    out = {}
    for case in args.cases.split(","):
        out[case] = run_case(case, args.steps, args.reps)
        print(f"\n## {case}  (steps/block {args.steps}, blocks {args.reps}; median)")
        print(f"{'arm':6} {'samples/s':>10} {'x sync':>7} {'env conc':>8} {'stale mean/max':>15} "
              f"{'|dlogp| mean/max':>17}  bound")
        for arm, r in out[case].items():
            stale = f"{r.get('staleness/mean', 0):.2f}/{r.get('staleness/max', 0):.0f}"
            mis = f"{r.get('mismatch/logprob_abs_diff_mean', 0):.1e}/{r.get('mismatch/logprob_abs_diff_max', 0):.1e}"
            print(f"{arm:6} {r['samples_per_s']:10.1f} {r['speedup']:7.2f} {r['env_concurrency']:8.0f} "
                  f"{stale:>15} {mis:>17}  {r['bound']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
