"""``agentrl report RUN_DIR``: PNG plots of a run's ``metrics.jsonl`` and a markdown summary.

Plots (``RUN_DIR/report/*.png``, one per panel that has data): reward, KL, entropy, response
length, eval accuracy (with pass@k / maj@k), turns per episode and how episodes ended (multi-turn),
staleness and engine/learner mismatch (asynchronous runs), failed episodes and seconds per stage.
Shares (accuracy, end reasons) are drawn on a 0-1 axis, so one task of twenty is not a crash.
``RUN_DIR/report.md`` sums up the run: config highlights, steps, first and last values, final
evaluation, time per stage, checkpoints. Every metric key is described in ``docs/metrics.md``.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from agentrl.runs.checkpoint import list_checkpoints
from agentrl.runs.tracking import read_metrics

PANELS: dict[str, tuple[str, ...]] = {
    "reward": ("reward/mean",),
    "kl": ("kl", "loss/kl"),
    "entropy": ("loss/entropy",),
    "response_length": ("response_length/mean",),
    "eval_accuracy": ("eval/accuracy", "eval/pass@*", "eval/maj@*"),
    "episode_turns": ("episode/turns",),
    "end_reasons": ("episode/end_reason/*",),
    "staleness": ("staleness/mean", "staleness/max"),
    "mismatch": ("mismatch/*",),
    "failed": ("failed/*",),
    "time_per_stage": ("time/*",),
}
"""Panel name -> metric keys (shell patterns) drawn in it."""
SHARES = ("eval_accuracy", "end_reasons")
"""Panels of shares in [0, 1]: their y-axis is 0-1."""
SUMMARY_KEYS = ("reward/mean", "kl", "loss/entropy", "response_length/mean", "episode/turns", "episode/end_reason/*",
                "failed/count", "staleness/mean", "mismatch/logprob_abs_diff_mean", "throughput/tokens_per_s")
"""Metrics of the report's first table (first and last value), in this order."""


def panel_keys(rows: list[dict[str, float]], patterns: tuple[str, ...]) -> list[str]:
    """Metric keys present in ``rows`` that match ``patterns`` (pattern order, then sorted)."""
    present = sorted({k for r in rows for k in r})
    out: list[str] = []
    for p in patterns:
        out += [k for k in present if fnmatch.fnmatchcase(k, p) and k not in out]
    return out


def series(rows: list[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric."""
    pts = [(r["step"], r[key]) for r in rows if key in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_panels(rows: list[dict[str, float]], out_dir: Path) -> dict[str, Path]:
    """One PNG per panel that has data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, patterns in PANELS.items():
        keys = panel_keys(rows, patterns)
        if not keys:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for key in keys:
            x, y = series(rows, key)
            ax.plot(x, y, marker="o" if len(x) < 30 else None, label=key)
        ax.set_title(name.replace("_", " "))
        ax.set_xlabel("step")
        ax.set_ylim(*y_range(name, [v for key in keys for v in series(rows, key)[1]]))
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written[name] = path
    return written


def y_range(name: str, values: list[float]) -> tuple[float, float | None]:
    """The y-axis of a panel: 0-1 for shares (``SHARES``); otherwise from 0 (or the lowest value, when
    below 0) to matplotlib's choice (None)."""
    if name in SHARES:
        return 0.0, 1.02
    low = min([0.0, *[v for v in values if np.isfinite(v)]])
    return (low * 1.05 if low < 0 else 0.0), None


def _first_last(rows: list[dict[str, float]], key: str) -> str:
    _, y = series(rows, key)
    return f"{y[0]:.4g} → {y[-1]:.4g}" if y else "-"


def summary_markdown(run_dir: Path, rows: list[dict[str, float]], plots: dict[str, Path]) -> str:
    """The text of ``report.md``."""
    cfg: dict[str, Any] = {}
    if (run_dir / "config.yaml").exists():
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    train = [r for r in rows if "reward/mean" in r]
    lines = [f"# Run report: {run_dir.name}", ""]
    if cfg:
        lines += [f"- model: `{cfg.get('model', {}).get('path')}`; env: `{cfg.get('env', {}).get('id')}`; "
                  f"estimator: `{cfg.get('algo', {}).get('estimator')}`; engine: "
                  f"`{cfg.get('rollout', {}).get('engine')}`"]
    lines += [f"- training steps logged: {len(train)} (last step {int(rows[-1]['step']) if rows else 0})", ""]
    lines += ["| metric | first → last |", "|---|---|"]
    for key in panel_keys(train, SUMMARY_KEYS):
        lines.append(f"| {key} | {_first_last(rows, key)} |")
    evals = [r for r in rows if "eval/accuracy" in r]
    if evals:
        lines += ["", "## Evaluation", "", "| step | " + " | ".join(k[5:] for k in _eval_keys(evals)) + " |",
                  "|---|" + "---|" * len(_eval_keys(evals))]
        for r in evals:
            lines.append(f"| {int(r['step'])} | " + " | ".join(f"{r.get(k, float('nan')):.3f}"
                                                            for k in _eval_keys(evals)) + " |")
    stages = panel_keys(train, ("time/*",))
    if stages:
        lines += ["", "## Time per stage (mean seconds per step)", "", "| stage | seconds |", "|---|---|"]
        lines += [f"| {k[5:]} | {np.mean(series(train, k)[1]):.3f} |" for k in stages]
    ckpts = list_checkpoints(run_dir)
    lines += ["", "## Checkpoints", ""] + ([f"- `{p.relative_to(run_dir)}`" for p in ckpts] or ["- none"])
    if plots:
        lines += ["", "## Plots", ""] + [f"![{n}]({p.relative_to(run_dir)})" for n, p in plots.items()]
    return "\n".join(lines) + "\n"


def _eval_keys(evals: list[dict[str, float]]) -> list[str]:
    return panel_keys(evals, PANELS["eval_accuracy"])


def write_report(run_dir: str | Path) -> Path:
    """Render the plots and ``report.md`` of a run; returns the markdown's path."""
    run = Path(run_dir)
    rows = read_metrics(run)
    if not rows:
        raise FileNotFoundError(f"no metrics in {run / 'metrics.jsonl'}")
    plots = plot_panels(rows, run / "report")
    out = run / "report.md"
    out.write_text(summary_markdown(run, rows, plots), encoding="utf-8")
    return out
