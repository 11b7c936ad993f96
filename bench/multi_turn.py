"""Multi-turn defaults of the tiny model, measured: the custom-env README's guess-the-number env
(examples/custom_env/README.md, section 3) trained with its README config at several learning rates,
from a partial warm start (dev success ~0.5: RL has something to learn) and from the full one (~0.95:
RL must not break it). Each arm is one ``agentrl train`` process run after the other (one compute
process at a time); the warm start of a target is computed once and cached. Prints held-out success
after the warm start, at each evaluation and at the end, the largest gradient norm, and CPU seconds.

    python bench/multi_turn.py                                  # targets 0.5 0.95, lr 3e-4 1e-4 3e-5
    python bench/multi_turn.py --targets 0.5 --lrs 3e-4 1e-4 --steps 40 --extra algo.kl_mode=loss algo.kl_coef=0.05
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_readme_env(where: Path) -> Path:
    """The README's ``guess_env.py`` and ``guess.yaml`` in ``where``; returns the config's path."""
    text = (ROOT / "examples" / "custom_env" / "README.md").read_text(encoding="utf-8")
    section = text.split("## 3. Several turns and tools")[1]
    env = next(b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "class GuessEnv" in b)
    (where / "guess_env.py").write_text(env)
    (where / "guess.yaml").write_text(re.findall(r"```yaml\n(.*?)```", section, re.S)[0])
    return where / "guess.yaml"


def run_arm(config: Path, run: Path, target: float, lr: str, steps: int, extra: list[str]) -> dict[str, object]:
    """One training run; its held-out curve, largest gradient norm and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(config.parent), str(ROOT)])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    argv = [sys.executable, "-m", "agentrl.cli", "train", str(config), "--run-dir", str(run), "--overwrite",
            f"learner.lr={lr}", "learner.max_seconds=0", f"learner.total_steps={steps}", "log.eval_every=10",
            "data.eval_tasks=100", f"model.warm_start.target_accuracy={target}", "log.progress=false",
            "log.tensorboard=false", "checkpoint.save_final=false", *extra]
    done = subprocess.run(argv, cwd=config.parent, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
    return {"target": target, "lr": lr, "evals": evals, "grad_max": max(r.get("loss/grad_norm", 0.0) for r in rows),
            "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", type=float, nargs="+", default=[0.5, 0.95], help="warm-start dev targets")
    p.add_argument("--lrs", nargs="+", default=["3e-4", "1e-4", "3e-5"], help="RL learning rates")
    p.add_argument("--steps", type=int, default=40, help="RL steps per arm (evaluated every 10)")
    p.add_argument("--extra", nargs="*", default=[], help="more overrides for every arm")
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_readme_env(Path(tmp))
        results = []
        for target in args.targets:
            for lr in args.lrs:
                results.append(run_arm(config, Path(tmp) / f"t{target}-lr{lr}", target, lr, args.steps, args.extra))
                r = results[-1]
                print(f"target {target} lr {lr}: held-out {' '.join(f'{x:.2f}' for x in r['evals'])}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}\n")
    print("| warm-start target | RL lr | held-out after warm start | every 10 steps | at the end | max grad norm | CPU s |")
    print("|---:|---:|---:|---|---:|---:|---:|")
    for r in results:
        e = r["evals"]
        print(f"| {r['target']} | {r['lr']} | {e[0]:.2f} | {' '.join(f'{x:.2f}' for x in e[1:-1])} | {e[-1]:.2f} "
              f"| {r['grad_max']:.2f} | {r['cpu_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
