"""Turn-level credit and context policies on long multi-turn episodes (issue 31), with the tiny model.

Three commands, run one after the other (each prints what it did):

``warm CONFIG [dotted=overrides] --out DIR``
    A multi-turn warm start: the env's reference policy (``reference_action()``; a compaction request
    answered by ``reference_summary()``) plays ``--episodes`` training tasks through the run's own
    executor and context policy, so the examples are token-exact samples as RL will see them; SFT on
    their action tokens until dev success stops improving; the model is saved to DIR (then
    ``model.path=DIR model.warm_start.enabled=false`` starts RL from it).
``run CONFIG --warm DIR --arm NAME=OVERRIDES ... --seeds 0 1 2 --out RUNS``
    ``agentrl train`` for every arm and seed, one after the other (``OMP_NUM_THREADS=1``).
``cost [CONFIG]`` (the default, ``make bench``)
    Samples and tokens per episode of the reference policy: one sequence, each turn its own context
    (unmerged), merged by the prefix property, and under truncate / compact.
``report RUNS [--metric eval/accuracy] [--target-frac 1.0]``
    A table per arm (final held-out metric, steps to reach the reference arm's final value) and
    ``RUNS/curves.png``.

Example (the numbers in bench/README.md): see the "Long episodes" section there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def reference_episodes(cfg: Any, env: Any, engine: Any, tokenizer: Any, tasks: list[Any]) -> list[Any]:
    """One episode per task of the env's reference policy through the run's multi-turn executor and context
    policy (``MultiTurnExecutor.run_scripted``: a compaction request is answered by ``reference_summary()``)."""
    from agentrl.rollout.build import context_policy, sampling_params
    from agentrl.rollout.executors.multi_turn import MultiTurnExecutor

    ex = MultiTurnExecutor(env, engine, tokenizer, sampling_params(cfg), chat_template=cfg.rollout.chat_template,
                           max_total_tokens=cfg.rollout.max_total_tokens or None,
                           context=context_policy(cfg, engine, tokenizer))
    return ex.run_scripted(tasks, lambda e: e.reference_action())


def sft_examples(trajectories: list[Any]) -> list[Any]:
    """One SFT example per sample of each episode (a rebuilt context is its own example)."""
    from agentrl.types import Trajectory

    return [Trajectory(prompt_ids=list(p), segments=list(segs), reward=t.reward, task_id=t.task_id, group_id=i)
            for i, t in enumerate(trajectories) for p, segs in t.samples()]


def warm(args: argparse.Namespace) -> None:
    import torch

    from agentrl.config import load_config
    from agentrl.env import fixed_tasks
    from agentrl.evaluation.metrics import evaluate
    from agentrl.models import load_policy
    from agentrl.rollout.build import (
        make_engine,
        make_env,
        make_executor,
        resolve_model_path,
        sampling_params,
    )
    from agentrl.training.supervised import train_sft

    cfg = load_config(args.config, args.overrides)
    torch.manual_seed(cfg.data.seed)
    env, dev_env = make_env(cfg), make_env(cfg, cfg.env.dev_kwargs)
    path = resolve_model_path(cfg, env)
    model, tok = load_policy(cfg, path)
    engine = make_engine(cfg, model, tok, path)
    tasks = fixed_tasks(env, args.episodes, cfg.data.seed + 1)
    t0 = time.perf_counter()
    episodes = reference_episodes(cfg, env, engine, tok, tasks)
    for extra in args.also:  # the same tasks under other settings (another context policy)
        episodes += reference_episodes(load_config(args.config, args.overrides + extra.split()), env, engine,
                                       tok, tasks)
    examples = sft_examples(episodes)
    lengths = [len(p) + sum(len(s.token_ids) for s in segs) for t in episodes for p, segs in t.samples()]
    print(f"reference episodes: {len(episodes)} ({time.perf_counter() - t0:.0f} s), mean reward "
          f"{np.mean([t.reward for t in episodes]):.3f}, {len(examples)} samples of {np.mean(lengths):.0f} tokens "
          f"(max {max(lengths)}), compactions/episode {np.mean([t.info.get('compactions', 0) for t in episodes]):.2f}, "
          f"truncations/episode {np.mean([t.info.get('truncations', 0) for t in episodes]):.2f}", flush=True)
    dev = make_executor(cfg, dev_env, engine, tok)
    dev_tasks = fixed_tasks(dev_env, args.dev_tasks, cfg.data.seed + 2)
    metric = args.metric.split("/")[-1]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    best = [-1.0]

    def dev_score() -> float:  # the best weights so far are on disk at once (a stopped run keeps them)
        score = evaluate(dev, dev_tasks, sampling_params(cfg, greedy=True))[metric]
        if score > best[0]:
            best[0] = score
            model.save_pretrained(out)
            tok.save_pretrained(out)
        return score

    result = train_sft(model, examples, tok.pad_token_id, lr=args.lr, batch_size=args.batch_size,
                       max_steps=args.max_steps, eval_every=args.eval_every, patience=args.patience,
                       target_accuracy=args.target, dev_accuracy=dev_score, seed=cfg.data.seed,
                       micro_batch_size=args.micro_batch_size)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    summary = {"steps": result.steps, f"dev_{metric}": result.best_dev_accuracy, "seconds": result.seconds,
               "history": result.history, "config": str(args.config), "overrides": args.overrides}
    (out / "warm_start.json").write_text(json.dumps(summary, indent=1))
    print(f"warm start: {result.steps} steps in {result.seconds:.0f} s, best dev {metric} "
          f"{result.best_dev_accuracy:.3f} -> {out}", flush=True)


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for seed in args.seeds:
        for spec in args.arm:
            name, _, overrides = spec.partition("=")
            run_dir = out / f"{name}-s{seed}"
            if (run_dir / "metrics.jsonl").exists() and not args.overwrite:
                print(f"{run_dir}: done already", flush=True)
                continue
            cmd = [sys.executable, "-m", "agentrl.cli", "train", str(args.config), "--run-dir", str(run_dir),
                   "--overwrite", f"model.path={args.warm}", "model.warm_start.enabled=false", f"data.seed={seed}",
                   "log.progress=false", "log.tensorboard=false", "checkpoint.save_final=false",
                   *overrides.split(), *args.overrides]
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            (run_dir / "stdout.txt").write_text(done.stdout + done.stderr) if run_dir.exists() else None
            print(f"{name} seed {seed}: exit {done.returncode} in {time.perf_counter() - t0:.0f} s "
                  f"(load {load:.1f} -> {os.getloadavg()[0]:.1f}) {done.stdout.strip().splitlines()[-1:]}",
                  flush=True)


def curves(run_dir: Path, metric: str) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(int(r["step"]), float(r[metric])) for r in rows if metric in r]


def cost(args: argparse.Namespace) -> None:
    """Samples and tokens per episode of the reference policy under each way of cutting an episode into
    samples (no model is trained: the env's reference policy plays through the real executor)."""
    from agentrl.config import load_config
    from agentrl.env import fixed_tasks
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_engine, make_env, resolve_model_path
    from agentrl.rollout.context import merge_samples

    cfg = load_config(args.config, args.overrides)
    env = make_env(cfg)
    path = resolve_model_path(cfg, env)
    model, tok = load_policy(cfg, path)
    engine = make_engine(cfg, model, tok, path)
    tasks = fixed_tasks(env, args.episodes, cfg.data.seed + 1)
    none = load_config(args.config, args.overrides + ["rollout.context.policy=none", "rollout.context.max_tokens=100000"])
    whole = reference_episodes(none, env, engine, tok, tasks)

    def per_turn(t: Any) -> list[tuple[list[int], list[Any]]]:  # every turn a sample of its whole context
        out, seen = [], list(t.prompt_ids)
        for s in t.segments:
            if s.is_action:
                out.append((list(seen), [s]))
            seen += s.token_ids
        return out

    def tokens(samples: list[tuple[list[int], list[Any]]]) -> int:
        return sum(len(p) + sum(len(s.token_ids) for s in segs) for p, segs in samples)

    rows = [("episode: one sequence", [t.samples() for t in whole]),
             ("turn: each turn its own context, unmerged", [per_turn(t) for t in whole]),
             ("turn: merged by the prefix property", [merge_samples(per_turn(t)) for t in whole])]
    for policy in ("truncate", "compact"):
        c = load_config(args.config, args.overrides + [f"rollout.context.policy={policy}"])
        rows.append((f"turn + {policy} at {c.rollout.context.max_tokens or 'the model context'}",
                     [t.samples() for t in reference_episodes(c, env, engine, tok, tasks)]))
    base = np.mean([tokens(x) for x in rows[0][1]])
    print(f"{len(tasks)} reference episodes of {Path(args.config).name} "
          f"({np.mean([len(t.turn_rewards) for t in whole]):.1f} turns each)")
    print("| samples | samples per episode | tokens per episode | longest sample | vs one sequence |")
    print("|---|---:|---:|---:|---:|")
    for name, eps in rows:
        n = np.mean([tokens(x) for x in eps])
        print(f"| {name} | {np.mean([len(x) for x in eps]):.2f} | {n:.0f} | "
              f"{max(tokens([s]) for x in eps for s in x)} | {n / base:.2f}x |")


def mean_curve(cs: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The seeds' curves averaged at the steps every seed evaluated."""
    steps = sorted(set.intersection(*[{s for s, _ in c} for c in cs]))
    return [(s, float(np.mean([dict(c)[s] for c in cs]))) for s in steps]


def first_reach(curve: list[tuple[int, float]], target: float) -> float:
    return next((float(s) for s, v in curve if v >= target), float("nan"))


def report(args: argparse.Namespace) -> None:
    out = Path(args.runs)
    arms: dict[str, list[list[tuple[int, float]]]] = {}
    for d in sorted(p for p in out.iterdir() if (p / "metrics.jsonl").exists()):
        arms.setdefault(d.name.rsplit("-s", 1)[0], []).append(curves(d, args.metric))
    ref = args.reference or next(iter(arms))
    final = {a: [np.mean([v for _, v in c[-args.last:]]) for c in cs] for a, cs in arms.items()}
    target = args.target_frac * float(np.mean(final[ref]))
    print(f"{args.metric}; target {target:.3f} = the {ref} arm's final value (mean over its seeds of the last "
          f"{args.last} evaluations)")
    print("| arm | seeds | before RL | final (mean ± std over seeds) | steps to target, per seed | steps to target, "
          f"seed-mean curve | vs {ref} |")
    print("|---|---:|---:|---:|---|---:|---:|")
    reach = {a: first_reach(mean_curve(cs), target) for a, cs in arms.items()}
    for a, cs in arms.items():
        per_seed = ", ".join(str(int(x)) if not np.isnan(x) else "-" for x in (first_reach(c, target) for c in cs))
        ratio = reach[a] / reach[ref] if reach[ref] else float("nan")
        print(f"| {a} | {len(cs)} | {np.mean([c[0][1] for c in cs]):.3f} | {np.mean(final[a]):.3f} ± "
              f"{np.std(final[a]):.3f} | {per_seed} | {reach[a]:.0f} | {ratio:.2f}x |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (a, cs) in enumerate(arms.items()):
        for c in cs:
            ax.plot([s for s, _ in c], [v for _, v in c], color=f"C{i}", alpha=0.3 if len(cs) > 1 else 1.0)
        m = mean_curve(cs)
        ax.plot([s for s, _ in m], [v for _, v in m], color=f"C{i}", linewidth=2.5, label=f"{a} ({len(cs)} seeds)")
    ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("RL step")
    ax.set_ylabel(f"held-out {args.metric}")
    ax.set_title(out.name)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / f"curves_{args.metric.replace('/', '_')}.png", dpi=110)
    print(f"curves: {out / ('curves_' + args.metric.replace('/', '_') + '.png')}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warm")
    w.add_argument("config")
    w.add_argument("overrides", nargs="*")
    w.add_argument("--out", required=True)
    w.add_argument("--episodes", type=int, default=256)
    w.add_argument("--also", action="append", default=[],
                   help="OVERRIDES: the same reference episodes once more under these settings (repeatable)")
    w.add_argument("--dev-tasks", type=int, default=16)
    w.add_argument("--metric", default="accuracy", help="the dev metric that picks the warm start")
    w.add_argument("--lr", type=float, default=1e-3)
    w.add_argument("--batch-size", type=int, default=16)
    w.add_argument("--micro-batch-size", type=int, default=8)
    w.add_argument("--max-steps", type=int, default=400)
    w.add_argument("--eval-every", type=int, default=50)
    w.add_argument("--patience", type=int, default=3)
    w.add_argument("--target", type=float, default=1.0, help="stop once the dev metric reaches this")
    r = sub.add_parser("run")
    r.add_argument("config")
    r.add_argument("overrides", nargs="*", help="dotted overrides for every arm")
    r.add_argument("--warm", required=True)
    r.add_argument("--arm", action="append", required=True, help="NAME=OVERRIDES (space-separated)")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--out", required=True)
    r.add_argument("--overwrite", action="store_true")
    q = sub.add_parser("report")
    q.add_argument("runs")
    q.add_argument("--metric", default="eval/accuracy")
    q.add_argument("--reference", default=None, help="the arm whose final value is the target (default: first)")
    q.add_argument("--target-frac", type=float, default=1.0)
    q.add_argument("--last", type=int, default=2, help="evaluations averaged into the final value")
    c = sub.add_parser("cost")
    c.add_argument("config", nargs="?", default=str(ROOT / "examples" / "configs" / "guess_number_long.yaml"))
    c.add_argument("overrides", nargs="*")
    c.add_argument("--episodes", type=int, default=16)
    args = p.parse_args(argv if argv is not None else (sys.argv[1:] or ["cost"]))  # make bench: the cost table
    {"warm": warm, "run": run, "report": report, "cost": cost}[args.command](args)


if __name__ == "__main__":
    main()
