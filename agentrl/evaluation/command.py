"""``agentrl eval``: evaluate a model (a path, a run directory or a checkpoint) on the configured envs,
print the per-dataset and per-difficulty tables, and write ``eval.json`` (with the record of every
episode behind them: docs/trajectories.md)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from agentrl.env import fixed_tasks
from agentrl.evaluation.held_out import held_out_warning
from agentrl.evaluation.metrics import (
    TaskResult,
    difficulty_of,
    eval_params,
    skipped_metrics,
    summarize,
    tables,
    task_results,
)
from agentrl.models import load_policy
from agentrl.rollout.build import make_engine, make_env, make_executor, resolve_model_path
from agentrl.rollout.failures import EnvFailures
from agentrl.runs.checkpoint import latest_checkpoint
from agentrl.runs.episodes import episode_record


def run_config_of(model: str | Path) -> Path | None:
    """The ``config.yaml`` of the run that ``model`` belongs to (a run dir, a checkpoint dir or its
    ``policy`` dir, a stage's final model dir), or None for any other model."""
    import yaml

    path = Path(model)
    for candidate in (path, path.parent, path.parent.parent, path.parent.parent.parent):
        saved = candidate / "config.yaml"
        if saved.is_file() and (candidate / "checkpoints").is_dir():
            try:
                data = yaml.safe_load(saved.read_text(encoding="utf-8"))
            except yaml.YAMLError:
                return None
            return saved if isinstance(data, dict) and "algo" in data else None  # an RL run's config
    return None


def default_out_dir(model: str | Path, now: float | None = None) -> Path:
    """Where ``agentrl eval`` writes without ``--out``: a new directory named after the model and the time,
    inside the run directory when the model is a run or one of its checkpoints (``RUN/evals/step_000040-
    20261202-081500``), else under ``evals/`` here; earlier evaluations are never overwritten."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path = Path(model)
    run_config = run_config_of(path)
    if run_config is not None:
        run = run_config.parent
        ckpt = latest_checkpoint(run) if path.resolve() == run.resolve() else path
        name = next((p.name for p in (ckpt, *ckpt.parents) if p and p.name.startswith("step_")), "final") if ckpt else "final"
        base = run / "evals" / f"{name}-{stamp}"
    else:
        base = Path("evals") / f"{path.name or 'model'}-{stamp}"
    out, k = base, 1
    while out.exists():  # two evaluations in one second
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return out


def run_eval(cfg: Any, out_dir: str | Path | None, model_path: str | None = None) -> dict[str, Any]:
    """``agentrl eval``: evaluate a model on ``eval.envs``; print tables and write ``eval.json`` (into
    ``out_dir``, or :func:`default_out_dir`)."""
    primary = make_env(cfg)
    path = model_path or cfg.model.path
    out_dir = out_dir or default_out_dir(path)
    if path == "tiny":  # --model tiny over a config naming another model: the tiny one, built for this env
        cfg = replace(cfg, model=replace(cfg.model, path="tiny"))
        path = resolve_model_path(cfg, primary)
    if (Path(path) / "checkpoints").is_dir():  # a run dir: its latest checkpoint
        path = str(latest_checkpoint(Path(path)) or path)
    if (Path(path) / "policy").is_dir():  # a training checkpoint dir
        path = str(Path(path) / "policy")
    model, tokenizer = load_policy(cfg, path)
    engine = make_engine(cfg, model, tokenizer, path)
    params, n = eval_params(cfg), cfg.eval.n_samples
    results: list[TaskResult] = []
    episodes: list[dict[str, Any]] = []  # the record of every episode behind the numbers (docs/trajectories.md)
    failures = EnvFailures(None, 1.0)  # an env that raises: its traceback once, then counts
    for env_id in cfg.eval.envs or [cfg.env.id]:
        kwargs = ({**cfg.env.kwargs, **cfg.env.eval_kwargs} if env_id == cfg.env.id
                  else cfg.eval.env_kwargs.get(env_id, cfg.env.eval_kwargs))
        env = make_env(replace(cfg, env=replace(cfg.env, id=env_id, kwargs=dict(kwargs))))
        executor = make_executor(cfg, env, engine, tokenizer)
        tasks = fixed_tasks(env, cfg.eval.max_tasks or cfg.data.eval_tasks, cfg.data.seed + 1000)
        if env_id == cfg.env.id and (warning := held_out_warning(env_id, primary, tasks, kwargs)):
            print(warning, file=sys.stderr, flush=True)
        trajs = executor.run(tasks, n_samples=n, params=params)
        failures.observe(trajs)
        results += task_results(tasks, trajs, n, env_id)
        episodes += [episode_record(t, tokenizer, split="eval", dataset=env_id,
                                    difficulty=difficulty_of(tasks[i // n])).to_dict() for i, t in enumerate(trajs)]
    report = {"model": str(path), "envs": cfg.eval.envs or [cfg.env.id], "n_samples": n, "k": list(cfg.eval.k),
              "sampling": asdict(params), "overall": summarize(results, cfg.eval.k),
              "skipped": skipped_metrics(results, cfg.eval.k), **tables(results, cfg.eval.k),
              "samples": [asdict(r) for r in results], "episodes": episodes}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(report_json(report), encoding="utf-8")
    print_tables(report)
    print(f"agentrl eval: wrote {out / 'eval.json'}", file=sys.stderr)
    return report


def report_json(report: dict[str, Any]) -> str:
    """``eval.json`` text: the report indented, each of its ``episodes`` on one line."""
    rest = {k: v for k, v in report.items() if k != "episodes"}
    head = json.dumps(rest, indent=1)[:-2]  # without the closing "\n}"
    episodes = ",\n".join(json.dumps(e, ensure_ascii=False) for e in report.get("episodes", []))
    return f'{head},\n "episodes": [\n{episodes}\n ]\n}}\n'


def print_tables(report: dict[str, Any]) -> None:
    """The per-dataset and per-difficulty tables of an ``eval.json`` report, with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    for title, rows in (("per dataset", report["datasets"]), ("per difficulty", report["difficulties"])):
        cols = sorted({k for r in rows.values() for k in r if "@" in k}, key=_metric_order)
        table = Table(title=f"eval {title} (n={report['n_samples']})")
        for name in ("set", "tasks", "accuracy", *cols, "length"):
            table.add_column(name, justify="left" if name == "set" else "right")
        for name, r in rows.items():
            table.add_row(name, f"{r['tasks']:.0f}", f"{r['accuracy']:.3f}",
                          *[f"{r[c]:.3f}" if c in r else "-" for c in cols], f"{r['response_length']:.1f}")
        console.print(table)
    for name, why in report.get("skipped", {}).items():
        console.print(f"{name}: not computed, {why}")


def _metric_order(name: str) -> tuple[bool, float]:
    kind, _, k = name.partition("@")
    return kind != "pass", int(k) if k.isdigit() else math.inf
