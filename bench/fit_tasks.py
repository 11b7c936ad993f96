"""Benchmark: can a config's RL raise success on the few training tasks it trains on? (The overfit check.)

    python bench/fit_tasks.py [--config FILE] [--tasks 16] [--steps 30] [--blocks 5] [--threads 2] [--show N]
                              [--variant "OVERRIDES" ...] [overrides ...]

Held-out success asks two things at once: does the policy get better on what it trains on, and does that carry
to tasks it never saw. This bench asks the first alone. Each variant (``--variant``, space-separated overrides on
top of the shared ones; default: the config as it is) runs in a fresh process: the config's ``Trainer`` (the
warm start read from the cache, or made first) trains on a fixed set of ``--tasks`` training tasks (the env's
first draws from a generator seeded by ``data.seed``, or a seeded pick of a dataset env's tasks), every step all
of them (``data.prompts_per_step`` = ``--tasks``) x ``rollout.n_samples``, synchronously, for ``--steps``
``Trainer.step()``. The table has the mean reward of every episode of those tasks in each block of steps (the first
is the policy the RL starts from, plus its first updates), how many tasks gained or lost more than 0.25 between the
first and the last block, the last step's KL, how many of the tasks' episodes the updates changed and how many
of those rose or fell in reward (after the first step and after the last: the tasks replayed under one seed before
and after, each episode from its own random stream, so a changed episode is the policy's doing, not the draws'; a
correct policy gradient at a small step raises more than it lowers), and how the first update moved its own
batch's samples (the mean change of their log-probs, nats, for the better-than-group samples and the worse);
``--show N`` prints, after the table, up to N episodes per variant whose reward the updates changed, with the tokens
where the replay after the last step parts from the one before (what the policy now writes instead). A
pipeline whose RL learns nothing here (a sign, mask or reward defect, or a policy that cannot move) will not lift
held-out success either; one that climbs here and not there is a generalisation question. Run on a quiet machine,
one compute process at a time.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _ab import fresh_process

ROOT = Path(__file__).resolve().parent.parent


def worker(config: str, overrides: list[str], n_tasks: int, steps: int, show: int = 0) -> dict:
    """``steps`` synchronous RL steps of ``config`` on ``n_tasks`` fixed training tasks: each task's mean reward
    at each step (every episode, before any group is dropped), and each step's KL (None without a KL term)."""
    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    fixed_overrides = [f"data.prompts_per_step={n_tasks}", "rollout.async=false", "log.eval_every=0",
                       "learner.max_seconds=0", "run.max_seconds=0", f"learner.total_steps={steps}"]
    cfg = load_config(config, [*overrides, *fixed_overrides])
    run_dir = tempfile.mkdtemp(prefix="agentrl-bench-fit-")
    try:
        trainer = Trainer(cfg, run_dir=run_dir)
        try:
            return fit(trainer, cfg, n_tasks, steps, show)
        finally:
            trainer.rollouts.close()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def fit(trainer: Any, cfg: Any, n_tasks: int, steps: int, show: int = 0) -> dict:
    """``worker``'s steps on a built ``trainer`` (``cfg``: its ``RunConfig``); ``show``: how many reward-changing
    episodes to describe (:func:`parting`)."""
    import numpy as np

    from agentrl.training.tasks import TaskSource

    rng = np.random.default_rng(cfg.data.seed)
    pool = getattr(trainer.env, "tasks", None)
    if pool:
        tasks = [pool[int(i)] for i in rng.permutation(len(pool))[:n_tasks]]
    else:
        tasks = [trainer.env.sample_task(rng) for _ in range(n_tasks)]
    trainer.env.tasks = tasks  # the task source walks these, epoch after epoch
    trainer.tasks = TaskSource(trainer.env, cfg.rl_seed)
    seen: list = []
    sample = trainer.sample

    def watched(batch_tasks: list) -> list:
        trajs = sample(batch_tasks)
        seen.extend(trajs)
        return trajs

    trainer.sample = watched
    first_update: dict[str, float | None] = {}
    update = trainer.update

    def measured(exp: Any) -> dict[str, float]:  # the first update: how it moves its own batch's samples
        if first_update:
            return update(exp)
        before = trainer.learner.logprobs(exp)
        out = update(exp)
        first_update.update(moves(exp, before, trainer.learner.logprobs(exp)))
        return out

    trainer.update = measured
    ids = [t.id for t in tasks]
    per_step: list[list[float | None]] = []
    kls: list[float | None] = []
    first = replay(trainer, tasks, cfg.data.seed)
    moved: list[tuple[int, int, int]] = []
    last = first
    for s in range(steps):
        seen.clear()
        m = trainer.step()
        if s in (0, steps - 1):  # the same tasks on the same random numbers: the episodes the updates changed
            last = replay(trainer, tasks, cfg.data.seed)
            moved.append(changed(first, last))
        by_task: dict[str, list[float]] = {}
        for traj in seen:
            by_task.setdefault(traj.task_id, []).append(traj.reward)
        per_step.append([statistics.mean(by_task[i]) if i in by_task else None for i in ids])
        kls.append(m.get("kl"))
        print(f"step {s + 1}: reward {statistics.mean(r for r in per_step[-1] if r is not None):.3f}", flush=True)
    return {"per_step": per_step, "kl": kls, "moved": moved, "episodes": len(first), "first_update": first_update,
            "changes": parting(first, last, trainer.tokenizer, show)}


def moves(exp: Any, before: Any, after: Any) -> dict[str, float | None]:
    """How one update moved the log-prob of each sample it trained on (summed over its action tokens, nats):
    the mean change of the samples with a positive advantage and of those with a negative one, and the share of
    the positive ones that rose (None where the batch has no such sample). A small policy-gradient step raises the
    advantage-weighted sum of the samples' log-probs; which side carries that rise is what this shows (on a peaked
    policy the push-down of the worse samples can carry all of it)."""
    mask = exp.action_mask
    delta = ((after - before) * mask).sum(-1)
    adv = (exp.advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    pos, neg = adv > 0, adv < 0
    return {"pos": delta[pos].mean().item() if pos.any() else None,
            "neg": delta[neg].mean().item() if neg.any() else None,
            "pos_up": (delta[pos] > 0).float().mean().item() if pos.any() else None}


def replay(trainer: Any, tasks: list, seed: int) -> list[tuple[tuple[int, ...], float, str]]:
    """The tokens, reward and task id of ``rollout.n_samples`` episodes of each task under a fixed seed (each episode
    samples from its own stream, so two policies are compared on the same random numbers); the training RNG left as
    it was."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed + 3000)
        return [(tuple(t.response_ids), t.reward, t.task_id) for t in trainer.executor.run(tasks)]


def changed(before: list, after: list) -> tuple[int, int, int]:
    """(episodes whose tokens changed, of those the ones whose reward rose, fell) between two replays."""
    pairs = [(a[1], b[1]) for a, b in zip(before, after) if a[0] != b[0]]
    return len(pairs), sum(y > x for x, y in pairs), sum(y < x for x, y in pairs)


def parting(before: list, after: list, tokenizer: Any, show: int, context: int = 12) -> list[str]:
    """Up to ``show`` episodes of two replays whose reward differs: the task, the rewards, the ``context`` tokens
    both wrote before they part, and the next three tokens of each."""
    out = []
    for (a, r, task), (b, q, _) in zip(before, after):
        if len(out) >= show:
            break
        if r == q:
            continue
        d = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        shared, was, now = (tokenizer.decode(list(t)) for t in (a[max(0, d - context):d], a[d:d + 3], b[d:d + 3]))
        out.append(f"{task} {r:g} -> {q:g}: ...{shared!r} {was!r} -> {now!r}")
    return out


def run_variant(config: str, overrides: list[str], n_tasks: int, steps: int, threads: int, show: int = 0) -> dict:
    """``worker`` in a fresh process with ``threads`` torch threads."""
    return fresh_process("fit_tasks", f"worker({config!r}, {overrides!r}, {n_tasks}, {steps}, {show})", str(ROOT),
                         threads)


def blocks(per_step: list[list[float | None]], k: int) -> list[list[float]]:
    """Each task's mean reward in each of ``k`` consecutive blocks of steps: (k, tasks)."""
    k = max(1, min(k, len(per_step)))
    edges = [round(i * len(per_step) / k) for i in range(k + 1)]
    out = []
    for a, b in zip(edges, edges[1:]):
        cols = list(zip(*per_step[a:b]))
        out.append([statistics.mean(v for v in col if v is not None) if any(v is not None for v in col) else 0.0
                    for col in cols])
    return out


def table(results: dict[str, dict], k: int) -> str:
    out = ["| variant | steps | " + " | ".join(f"block {i + 1}" for i in range(k))
           + " | tasks up / down | KL (last) | episodes changed: step 1 / last | first update, nats: better / worse |",
           "|---|---:|" + "---:|" * k + "---|---:|---:|---:|"]
    for name, r in results.items():
        b = blocks(r["per_step"], k)
        up = sum(1 for x, y in zip(b[0], b[-1]) if y - x > 0.25)
        down = sum(1 for x, y in zip(b[0], b[-1]) if x - y > 0.25)
        curve = " | ".join(f"{statistics.mean(row):.3f}" for row in b)
        kl = r["kl"][-1]
        moved = " / ".join(f"{n} ({up} up, {down} down)" for n, up, down in r["moved"]) + f" of {r['episodes']}"
        f = r.get("first_update") or {}
        better = "-" if f.get("pos") is None else f"{f['pos']:+.3f} ({f['pos_up']:.0%} up)"
        first = f"{better} / {'-' if f.get('neg') is None else format(f['neg'], '+.3f')}"
        out.append(f"| {name} | {len(r['per_step'])} | {curve} | {up} / {down} | "
                   f"{'-' if kl is None else f'{kl:.4f}'} | {moved} | {first} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="examples/configs/terminal_tiny.yaml")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show", type=int, default=0, metavar="N",
                    help="print up to N episodes per variant whose reward the updates changed, where they part")
    ap.add_argument("--variant", action="append", default=None, metavar="OVERRIDES",
                    help="space-separated overrides of one variant (repeatable; default: the config as it is)")
    ap.add_argument("overrides", nargs="*", help="overrides every variant shares")
    args = ap.parse_args()
    if args.tasks < 1 or args.steps < 1 or args.show < 0:
        ap.error("--tasks and --steps must be at least 1, --show at least 0")
    config = str(Path(args.config).resolve())
    results = {}
    for v in args.variant or [""]:
        name = v or "the config"
        results[name] = run_variant(config, [*args.overrides, *shlex.split(v)], args.tasks, args.steps, args.threads,
                                    args.show)
        print(f"{name}: done", flush=True)
    print(table(results, args.blocks))
    for name, r in results.items():
        if r.get("changes"):
            print(f"\n{name}: episodes whose reward changed (before -> after the last step, where they part)")
            print("\n".join(r["changes"]))


if __name__ == "__main__":
    main()
