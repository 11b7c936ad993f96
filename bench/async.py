"""Synchronous vs asynchronous training, side by side in one run: samples/s, env-step concurrency,
staleness and mismatch, and what bounds each case.

    python bench/async.py [--steps 6] [--reps 2] [--cases demo,code,tool] [--ray] [--json out.json]

Arms (each a real ``Trainer`` in this process, built once per case):
- ``sync``: today's path: env steps one after another (``rollout.env_workers=1``), then the update;
- ``pool``: env steps concurrent (``env_workers=8``), still synchronous;
- ``async``: concurrent env steps and ``rollout.async=true, max_staleness=1`` (the rollout worker
  makes the next batch while the learner trains on this one).

Over Ray (``--ray``: three more arms, each a ``RayTrainer`` on one local Ray cluster started by this
process, 8 logical CPUs on the 2 cores; a DeepSpeed policy rank and an HF engine actor, each one torch
thread):
- ``ray-sync``: today's Ray path: the driver runs the executor, env steps one after another, the
  engine actor idles while the policy actor trains, then the streamed weight sync;
- ``ray-pool``: the same with concurrent env steps (``env_workers=8``);
- ``ray-async``: ``rollout.async=true, max_staleness=1`` with versioned engine actors and one
  env-worker actor running the executor (``cluster.env_workers.num=1``): generation on the engine
  actor overlaps the update on the policy actor.

Cases: ``demo`` the CPU demo (2-digit addition, 32 prompts x 8, no warm start: throughput only);
``code`` MBPP with the tiny model, every response run by the sandbox (``code_grpo_tiny.yaml``);
``tool`` a 3-turn tool env whose tool takes 50 ms (scripted delay). Blocks of ``--steps`` steps are
interleaved across the arms ``--reps`` times; each block starts its rollout worker afresh (nothing
made ahead during another arm's block). Each block's first step fills the pipeline and is not timed
(an asynchronous run pays it once, not per step): samples/s = samples trained on in the ``--steps``
timed steps / their wall seconds (steady state); ``+fill x`` is the ratio with the fill step counted.
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
# 8 logical CPUs place the three Ray trainers' actors at once (one trainer's run at a time); each actor
# reserves half a CPU and runs one torch thread, as the one-process arms do
RAY = ["cluster.mode=ray", "cluster.num_cpus=8", "cluster.policy.num=1", "cluster.policy.cpus=0.5",
       "cluster.engines.cpus=0.5", "cluster.reference.cpus=0.5", "cluster.critic.cpus=0.5",
       "cluster.env_workers.cpus=0.5"]
RAY_ARMS = {"ray-sync": RAY + ["rollout.env_workers=1"], "ray-pool": RAY + ["rollout.env_workers=8"],
            "ray-async": RAY + ["rollout.env_workers=8", "rollout.async=true", "rollout.max_staleness=1",
                                "cluster.env_workers.num=1"]}
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
    cfg = load_config(ROOT / path, COMMON + extra + {**ARMS, **RAY_ARMS}[arm])
    if arm in RAY_ARMS:
        from agentrl.distributed.trainer import RayTrainer

        return RayTrainer(cfg, run_dir=run_dir)
    return Trainer(cfg, run_dir=run_dir)


def env_concurrency(trainer: Any) -> float:
    """The most env steps in flight at once (the env-worker actors' sum over Ray)."""
    ex = trainer.executor
    return float(ex.max_running() if hasattr(ex, "max_running") else ex.pool.max_running)


def block(trainer: Any, steps: int) -> dict[str, float]:
    """One step that fills the pipeline, then ``steps`` timed training steps, with a fresh rollout
    worker; steady-state samples/s, samples/s with the fill step counted, and the steps' mean metrics."""
    trainer.rollouts = trainer.build_rollouts()
    rows, samples = [], 0
    start = time.perf_counter()
    first = trainer.step()  # the async arm's first batch cannot overlap anything: once per run, not per step
    trainer.step_idx += 1
    filled = time.perf_counter()
    for _ in range(steps):
        m = trainer.step()
        trainer.step_idx += 1
        rows.append(m)
        samples += int(m["samples_used"])
    end = time.perf_counter()
    wall = end - filled
    trainer.rollouts.close()
    keys = ("time/generate", "time/update", "time/step", "staleness/mean", "staleness/max",
            "mismatch/logprob_abs_diff_mean", "mismatch/logprob_abs_diff_max", "failed/count")
    out = {k: statistics.mean(r[k] for r in rows if k in r) for k in keys if any(k in r for r in rows)}
    conc = max([r.get("env/max_running", 0.0) for r in rows] + [env_concurrency(trainer)])
    out.update(samples_per_s=samples / wall, wall_s=wall, env_concurrency=conc,
               with_fill=(samples + int(first["samples_used"])) / (end - start))  # the process worker's own pool
    return out


def bound(r: dict[str, float], arm: str) -> str:
    gen, upd = r.get("time/generate", 0.0), r.get("time/update", 0.0)
    if "async" not in arm:
        return f"rollout {gen:.2f} s + learner {upd:.2f} s per step, one after the other"
    side = "rollout" if gen > upd else "learner"
    return f"{side} (rollout {gen:.2f} s vs learner {upd:.2f} s per step, overlapped)"


def run_case(case: str, steps: int, reps: int, arms: list[str]) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench_async_{case}_"))
    trainers = {arm: build(case, arm, tmp / arm) for arm in arms}
    for t in trainers.values():  # warm-up: one step each (allocations, first sandbox start)
        block(t, 1)
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for _ in range(reps):
        for arm, t in trainers.items():
            results[arm].append(block(t, steps))
    table = {}
    for arm, rs in results.items():
        merged = {k: statistics.median(r[k] for r in rs if k in r) for k in rs[0]}
        merged["bound"] = bound(merged, arm)
        table[arm] = merged
    base, base_fill = table["sync"]["samples_per_s"], table["sync"]["with_fill"]
    for arm in table:
        table[arm]["speedup"] = table[arm]["samples_per_s"] / base
        table[arm]["speedup_with_fill"] = table[arm]["with_fill"] / base_fill
    if "ray-sync" in table:
        for arm in RAY_ARMS:
            table[arm]["x_ray_sync"] = table[arm]["samples_per_s"] / table["ray-sync"]["samples_per_s"]
    for t in trainers.values():  # the Ray trainers' actors go; Ray itself stays for the next case
        getattr(t, "shutdown", lambda: None)()
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="steps per timed block")
    ap.add_argument("--reps", type=int, default=2, help="blocks per arm (interleaved)")
    ap.add_argument("--cases", default="demo,code,tool")
    ap.add_argument("--ray", action="store_true", help="add the arms over Ray (ray-sync, ray-pool, ray-async)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    arms = list(ARMS) + (list(RAY_ARMS) if args.ray else [])
    out = {}
    for case in args.cases.split(","):
        out[case] = run_case(case, args.steps, args.reps, arms)
        print(f"\n## {case}  (steps/block {args.steps}, blocks {args.reps}; median)")
        print(f"{'arm':9} {'samples/s':>10} {'x sync':>7} {'+fill x':>7} {'env conc':>8} {'stale mean/max':>15} "
              f"{'|dlogp| mean/max':>17}  bound")
        for arm, r in out[case].items():
            stale = f"{r.get('staleness/mean', 0):.2f}/{r.get('staleness/max', 0):.0f}"
            mis = f"{r.get('mismatch/logprob_abs_diff_mean', 0):.1e}/{r.get('mismatch/logprob_abs_diff_max', 0):.1e}"
            print(f"{arm:9} {r['samples_per_s']:10.1f} {r['speedup']:7.2f} {r['speedup_with_fill']:7.2f} "
                  f"{r['env_concurrency']:8.0f} "
                  f"{stale:>15} {mis:>17}  {r['bound']}", flush=True)
        if "ray-sync" in out[case]:
            t = out[case]
            print(f"over Ray: ray-async {t['ray-async']['x_ray_sync']:.2f}x ray-sync, "
                  f"{t['ray-async']['samples_per_s'] / t['ray-pool']['samples_per_s']:.2f}x ray-pool", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
