"""Metrics: ``metrics.jsonl`` always, TensorBoard by default, wandb when configured, a progress bar
(on a terminal; a plain status line every few steps in a log file), a per-stage timer, and PNG
learning curves at the end. (The episodes of ``samples.jsonl``: ``agentrl.training.samples``.)"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentrl.config import ConfigError, LogConfig


def check_sinks(cfg: LogConfig) -> None:
    """Fail before a run starts when a configured sink cannot work (wandb not installed)."""
    if cfg.wandb_project and importlib.util.find_spec("wandb") is None:
        raise ConfigError("log.wandb_project is set but wandb is not installed: pip install wandb "
                          "(or drop log.wandb_project)")


class StageTimer:
    """Wall-clock seconds per named stage of a step: ``with timer("generate"): ...``."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - start

    def pop(self) -> dict[str, float]:
        """This step's times as ``time/<stage>`` metrics; resets the timer."""
        out = {f"time/{k}": v for k, v in self.times.items()}
        self.times = {}
        return out


HEARTBEAT_S = 20.0
"""A phase longer than this says where it is (every this many seconds) in a log file."""


@contextmanager
def heartbeat(label: str, progress: Callable[[], tuple[int, int]] | None = None,
              say: Callable[[str], None] = print, every: float | None = None) -> Iterator[None]:
    """While the block runs, ``say`` a line every ``every`` seconds (default ``HEARTBEAT_S``; none for a
    shorter block): ``label``, the seconds so far and, from ``progress() -> (done, total)``, the episodes ended."""
    stop, started = threading.Event(), time.monotonic()
    every = HEARTBEAT_S if every is None else every

    def beat() -> None:
        while not stop.wait(every):
            done = progress() if progress is not None else None
            count = f"{done[0]}/{done[1]} episodes, " if done and done[1] else ""
            say(f"{label}: {count}{time.monotonic() - started:.0f} s")

    thread = threading.Thread(target=beat, name="agentrl-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class Tracker:
    """Writes metrics rows to every sink and drives the progress bar."""

    def __init__(self, run_dir: Path, cfg: LogConfig, total_steps: int, config: dict[str, Any] | None = None,
                 start_step: int = 0):
        """``start_step`` > 0 resumes: TensorBoard events after it (a crashed run's) are purged."""
        self.run_dir, self.cfg = run_dir, cfg
        self.path = run_dir / "metrics.jsonl"
        self._tb = self._wandb = self._progress = None
        self.total_steps, self._plain = total_steps, cfg.progress and not sys.stdout.isatty()
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=start_step + 1 if start_step else None)
        if cfg.wandb_project:
            check_sinks(cfg)
            import wandb  # optional dependency

            self._wandb = wandb.init(project=cfg.wandb_project, name=cfg.name, config=config, dir=str(run_dir))
        if cfg.progress and not self._plain:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[status]}"), transient=False)
            self._progress.start()
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, status="")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, int | float) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)
        if (self._progress is not None or self._plain) and "reward/mean" in metrics:
            status = f"reward {metrics.get('reward/mean', float('nan')):.3f}"
            if metrics.get("groups/count"):  # a step whose groups all scored alike trains on no reward signal
                varied = metrics.get("groups/varied", 0.0)
                status += f" | {varied:.0f}/{metrics['groups/count']:.0f} groups varied" + ("" if varied else
                                                                                            ": no reward signal")
            if "throughput/tokens_per_s" in metrics:
                status += f" | {metrics['throughput/tokens_per_s']:.0f} tok/s"
            if "time/step" in metrics:
                status += f" | {metrics['time/step']:.2f} s/step"
                stages = [f"{k[5:]} {v:.2f}" for k, v in metrics.items() if k.startswith("time/") and k != "time/step"]
                status += f" ({', '.join(stages)})" if stages else ""
            if self._progress is not None:
                self._progress.update(self._task, completed=step, status=status)
            elif step % max(1, self.total_steps // 20) == 0 or step == self.total_steps:
                print(f"step {step}/{self.total_steps} | {status}", flush=True)  # a whole line in a log file

    @contextmanager
    def phase(self, label: str, progress: Callable[[], tuple[int, int]] | None = None) -> Iterator[None]:
        """A phase of the run beside the training bar (an evaluation): on a terminal a second bar of its
        episodes, updated every second; in a log file a :func:`heartbeat` line every ``HEARTBEAT_S``."""
        if self._progress is None:
            with heartbeat(label, progress, self.print):
                yield
            return
        bar = self._progress.add_task(label, total=None, status="")
        def update(_: str) -> None:
            if progress is not None:
                done, total = progress()
                self._progress.update(bar, completed=done, total=total or None)

        with heartbeat(label, None, update, every=1.0):
            yield
        self._progress.remove_task(bar)

    def print(self, text: str) -> None:
        """A line above the progress bar (or plain print)."""
        if self._progress is not None:
            self._progress.console.print(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """Every row of a run's ``metrics.jsonl`` (a half-written last line of a crashed run is skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def plot_curves(run_dir: Path, keys: tuple[str, ...] = ("reward/mean", "eval/accuracy"),
                out_name: str = "learning_curve.png") -> Path | None:
    """A PNG of the given metrics against the step (one panel each)."""
    rows = read_metrics(run_dir)
    keys = tuple(k for k in keys if any(k in r for r in rows))
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.5), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 30 else None)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(run_dir) / out_name
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def closing_line(summary: dict[str, Any], warm: bool, steps_run: int, start_step: int = 0) -> str:
    """The last line of ``agentrl train``: held-out accuracy before and after RL, and the steps that ran."""
    before, after = summary["eval_before"], summary["eval_after"]
    start = "after warm start" if warm else "before RL"
    steps = f"{steps_run} step{'' if steps_run == 1 else 's'}" + (
        f" (steps {start_step + 1}-{start_step + steps_run} of a resumed run)" if start_step else "")
    line = (f"held-out accuracy: {start} {before:.3f} -> after RL {after:.3f} ({after - before:+.3f}) "
            f"in {steps}, {summary['rl_seconds']:.0f} s of RL")
    tasks = int(summary.get("eval_tasks") or 0)
    if tasks:  # how much of that is noise: n tasks (x samples), the standard error of each accuracy
        n = tasks * max(1, int(summary.get("eval_samples") or 1))
        errors = [math.sqrt(p * (1 - p) / n) for p in (before, after) if 0 <= p <= 1]  # NaN: not measured
        how = "greedy" if summary.get("eval_greedy") else f"sampled ({summary.get('eval_samples', 1)} per task)"
        line += f"; {how} on {tasks} held-out tasks" + (f", standard error +-{max(errors):.3f}" if errors else "")
    if lift := summary.get("eval_lift"):  # the same tasks before and after: the lift's own error is smaller
        line += (f"; lift paired by task {lift['lift']:+.3f}, standard error {lift['se']:.3f} ({lift['up']} tasks "
                 f"up, {lift['down']} down)")
    if summary.get("sampled_after") is not None:  # what RL's samples see: a weak signal when far below greedy
        was = summary.get("sampled_before")
        line += (f"; sampled (temperature {summary.get('temperature', 1.0):g}, 1 per task) "
                 + (f"{was:.3f} -> " if was is not None else "") + f"{summary['sampled_after']:.3f}")
        if lift := summary.get("sampled_lift"):  # the same tasks (multi-turn: the same random numbers) paired
            line += f" (paired standard error {lift['se']:.3f}; {lift['up']} up, {lift['down']} down)"
    return line
