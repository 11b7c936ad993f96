"""Environment throughput: ``reset`` + ``step`` with its reward, per second, for each env.

    python bench/env.py [--seconds 3] [--envs agentrl/Arithmetic-v0 ...] [--json out.json]

For each env: a fixed set of tasks (test split where there is one), then ``reset(options={"task"})``
followed by ``step(response)`` in a loop for about ``--seconds`` seconds, once with the env's
reference answer (must score 1.0) and once with a wrong one (must score 0.0). Code envs
(HumanEval, MBPP) run the candidate's tests through the sandbox (``sandbox``, local backend),
which dominates their cost. Single-threaded, in this process. Fast envs cycle through their tasks
more than once in ``--seconds``; verifier caches then serve repeats, as they would in training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENVS = {  # env id -> (kwargs, a wrong response)
    "agentrl/Arithmetic-v0": ({"split": "test"}, "0"),
    "agentrl/GSM8K-v0": ({"split": "test"}, "The final answer is $\\boxed{-1}$."),
    "agentrl/Countdown-v0": ({"split": "test"}, "\\boxed{1+1}"),
    "agentrl/HumanEval-v0": ({}, "```python\ndef f():\n    return 0\n```"),
    "agentrl/MBPP-v0": ({"split": "test"}, "```python\ndef f():\n    return 0\n```"),
}


def throughput(env: Any, tasks: list[Any], respond: Any, seconds: float) -> tuple[float, float, int]:
    """(steps per second, mean reward, steps) of reset+step over ``tasks`` in a loop."""
    n, total, start = 0, 0.0, time.perf_counter()
    while True:
        task = tasks[n % len(tasks)]
        env.reset(options={"task": task})
        total += env.step(respond(task))[1]
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and n >= min(len(tasks), 8):
            return n / elapsed, total / n, n


def bench_env(env_id: str, seconds: float, n_tasks: int) -> dict[str, Any]:
    import agentrl
    from agentrl.env import fixed_tasks

    kwargs, wrong = ENVS.get(env_id, ({}, "wrong"))
    try:
        env = agentrl.make(env_id, **kwargs)
    except TypeError:
        env = agentrl.make(env_id)
    tasks = fixed_tasks(env, n_tasks, 0)
    right_sps, right_r, n1 = throughput(env, tasks, env.reference_answer, seconds)
    wrong_sps, wrong_r, n2 = throughput(env, tasks, lambda _: wrong, seconds)
    env.close()
    return {"env": env_id, "tasks": len(tasks), "reference_steps_per_s": right_sps, "reference_reward": right_r,
            "wrong_steps_per_s": wrong_sps, "wrong_reward": wrong_r, "steps": n1 + n2}


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| env | tasks | reset+step/s (reference answer) | mean reward | reset+step/s (wrong answer) | mean reward |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['env']} | | skipped: {r['error']} | | | |")
            continue
        print(f"| {r['env']} | {r['tasks']} | {r['reference_steps_per_s']:,.0f} | {r['reference_reward']:.2f} | "
              f"{r['wrong_steps_per_s']:,.0f} | {r['wrong_reward']:.2f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", nargs="+", default=list(ENVS))
    ap.add_argument("--seconds", type=float, default=2.0, help="per env and answer kind")
    ap.add_argument("--tasks", type=int, default=1000, help="distinct tasks (fewer when the dataset is smaller)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    from agentrl.env import list_envs

    known = set(list_envs())
    rows = []
    for env_id in args.envs:
        if env_id not in known:
            rows.append({"env": env_id, "error": "not registered"})
            continue
        try:
            rows.append(bench_env(env_id, args.seconds, args.tasks))
        except Exception as e:  # a bench of one env failing should not hide the others
            rows.append({"env": env_id, "error": f"{type(e).__name__}: {e}"[:120]})
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
