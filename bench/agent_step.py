"""Benchmark: one GRPO step of an agentic config (default ``examples/configs/terminal_tiny.yaml``), where its
seconds go, and the same step on another checkout, A/B interleaved.

    python bench/agent_step.py [--config FILE] [--steps 4] [--warmup 1] [--threads 1] [--rounds 1]
                               [--before DIR] [--flame OUT.svg] [overrides ...]

Each round runs, in a fresh process per checkout, ``Trainer.step()`` (the code ``agentrl train``
runs) ``--warmup`` times unmeasured, then ``--steps`` times, on the config's warm-started policy (its
warm start is read from the cache; a config whose warm start is not cached makes it first, minutes).
The CPU column is the whole machine's busy CPU seconds per measured step (``/proc/stat``: the
workspaces, verifiers and an async rollout process count; so does anything else running). The phase
table says where a step's seconds go (``bench/_phases.py``: wall seconds per phase summed over the env
worker threads, so phases that overlap can sum past the step). ``--before DIR`` (a ``git
worktree`` of an earlier commit) runs the same steps there in the same rounds (with that checkout's own
copy of the config when the config is a file of this repository), alternating which goes
first; the table has both and the ratios of their median and mean step times. ``--flame OUT.svg`` records the
whole run with py-spy (every thread and the workspace runtimes; ``pip install py-spy``) as a flame
graph. Run on a quiet machine, one compute process at a time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _ab import by_checkout, checkout_worker

HERE = Path(__file__).resolve().parent


def worker(root: str, config: str, overrides: list[str], steps: int, warmup: int) -> dict:
    """Steps of ``config`` with the checkout at ``root``: step seconds, stage means and phase rows."""
    sys.path.insert(0, root)
    sys.path.insert(1, str(HERE))
    from _phases import Phases

    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    cfg = load_config(config, overrides)
    run_dir = tempfile.mkdtemp(prefix="agentrl-bench-step-")
    try:
        trainer = Trainer(cfg, run_dir=run_dir)
        phases = Phases().install()
        for _ in range(warmup):
            trainer.step()
        phases.reset()
        busy = machine_cpu_s()
        metrics = [trainer.step() for _ in range(steps)]
        cpu_per_step = (machine_cpu_s() - busy) / steps
        trainer.rollouts.close()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    stages = sorted({k for m in metrics for k in m if k.startswith("time/")})
    import environments

    assert environments.__file__.startswith(root), (environments.__file__, root)  # this checkout's code ran
    grades = getattr(trainer.env, "grades", None)
    return {"grade_cache": grades.stats() if grades is not None else None,"step_s": [m["time/step"] for m in metrics],
            "samples": [m.get("samples_used", 0.0) for m in metrics],
            "generated": [m.get("dynamic/refill_rounds", 0.0) for m in metrics],
            "reward": [m.get("reward/mean", float("nan")) for m in metrics],
            "stages": {k: statistics.mean(m.get(k, 0.0) for m in metrics) for k in stages},
            "phases": phases.rows(steps), "cpu_s": cpu_per_step}


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (``/proc/stat``: every process and the kernel), so that a
    step's CPU counts its workspaces, verifiers and rollout process too."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def table(runs: dict[str, list[dict]]) -> str:
    out = ["| checkout | round | median step s | mean step s | CPU s a step (machine) | steps | rounds of refill (mean) "
           "| reward (mean) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, results in runs.items():
        for i, r in enumerate(results):
            out.append(f"| {name} | {i + 1} | {statistics.median(r['step_s']):.2f} | {statistics.mean(r['step_s']):.2f} "
                       f"| {r['cpu_s']:.2f} | {len(r['step_s'])} | {statistics.mean(r['generated']):.1f} "
                       f"| {statistics.mean(r['reward']):.3f} |")
    if len(runs) == 2:
        (a, ra), (b, rb) = runs.items()
        for what, f in (("median", statistics.median), ("mean", statistics.mean)):  # async steps vary: the mean
            v = {n: f([s for r in rs for s in r["step_s"]]) for n, rs in runs.items()}  # is the throughput
            out.append(f"\n{what} step: {a} {v[a]:.2f} s, {b} {v[b]:.2f} s: {b} / {a} = {v[b] / v[a]:.2f}x")
    for name, results in runs.items():
        last = results[-1]
        out += [f"\n{name}: where a step goes (last round; phases summed over threads)", "",
                "| phase | s per step | calls per step | ms per call |", "|---|---:|---:|---:|"]
        out += [f"| {p} | {s:.3f} | {n:.1f} | {ms:.1f} |" for p, s, n, ms in last["phases"]]
        if last.get("grade_cache"):
            c = last["grade_cache"]
            out.append(f"\ngrade cache (warm-up included): {c['hits']} of {c['hits'] + c['misses']} grades answered "
                       "from it")
        out += ["", "| stage (time/*) | s per step |", "|---|---:|"]
        out += [f"| {k[5:]} | {v:.3f} |" for k, v in last["stages"].items()]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="examples/configs/terminal_tiny.yaml")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--before", default=None, metavar="DIR", help="run the same steps in this checkout too")
    ap.add_argument("--flame", default=None, metavar="OUT.svg", help="record a flame graph with py-spy")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    args.config = str(Path(args.config).resolve())
    if args.flame:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        argv = [a for a in sys.argv[1:] if a not in ("--flame", args.flame)]
        os.execv(spy, [spy, "record", "--subprocesses", "--threads", "--rate", "50", "-o", args.flame, "--",
                       sys.executable, str(Path(__file__).resolve()), *argv])
    runs = by_checkout(args.before, args.rounds, lambda root: checkout_worker(
        "agent_step", root, args.config, args.overrides, args.steps, args.warmup, args.threads))
    print(table(runs))


if __name__ == "__main__":
    main()
