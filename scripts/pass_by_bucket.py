"""Where RL can learn: the sampled pass rate of a config's (cached) warm-started policy per bucket of tasks.

    python scripts/pass_by_bucket.py examples/configs/terminal_smollm2_lora.yaml \\
        --families sort_dedup,checksums,fix_json_config --batches 3 [KEY=VALUE ...]

Builds the config's ``Trainer`` (its warm start from the cache, or made now), narrows a Terminal-style env to
``--families`` after that (the warm start's cache key keeps the config's env), and runs ``--batches`` rollout
batches of ``--tasks`` training tasks x ``--samples`` samples at ``rollout.temperature``, nothing trained. It prints,
per bucket of ``--key`` metadata fields, the samples, their mean reward and how many tasks had a success: a bucket
whose groups never hold a success gives a group estimator nothing to reinforce (docs/agent_tasks.md).
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="dotted KEY=VALUE overrides of the config")
    ap.add_argument("--families", default="", help="comma-separated env families to draw from (default: all)")
    ap.add_argument("--key", default="family,difficulty", help="task metadata fields naming a bucket")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=12, help="tasks a batch")
    ap.add_argument("--samples", type=int, default=8, help="samples a task")
    ap.add_argument("--json", default="", help="also write the table here")
    args = ap.parse_args(argv)

    from agentrl.config import load_config
    from agentrl.training.curriculum import Curriculum
    from agentrl.training.trainer import Trainer

    cfg = load_config(args.config, [*args.overrides, "algo.drop_zero_std_groups=false", "log.eval_every=0",
                                    f"rollout.n_samples={args.samples}", f"data.prompts_per_step={args.tasks}",
                                    "data.eval_tasks=2", "log.progress=false", "log.tensorboard=false"])
    trainer = Trainer(cfg, run_dir=tempfile.mkdtemp(prefix="pass-by-bucket-"))
    if args.families:
        trainer.tasks.env.families = args.families.split(",")
    bucket = Curriculum(args.key.split(","), args.samples).bucket  # the curriculum's buckets, by the same rule
    seen: dict[str, Any] = {}  # task id -> task, as the source hands them out
    draw = trainer.tasks.next

    def next_tasks(k: int) -> list[Any]:
        out = draw(k)
        seen.update((t.id, t) for t in out)
        return out

    trainer.tasks.next = next_tasks
    by: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for _ in range(args.batches):
        for t in trainer.produce().generated:
            by[bucket(seen[t.task_id])][t.task_id].append(float(t.reward))
    trainer.rollouts.close()
    table = {}
    for b, ts in sorted(by.items()):
        rewards = [r for v in ts.values() for r in v]
        table[b] = {"samples": len(rewards), "pass": sum(rewards) / len(rewards), "tasks": len(ts),
                    "tasks_with_a_success": sum(max(v) > 0 for v in ts.values())}
    print(f"{'bucket':<28} {'samples':>7} {'pass':>6} {'tasks with a success':>22}")
    for b, row in table.items():
        print(f"{b:<28} {row['samples']:>7} {row['pass']:>6.2f} {row['tasks_with_a_success']:>14} of {row['tasks']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=1)
    return table


if __name__ == "__main__":
    main()
