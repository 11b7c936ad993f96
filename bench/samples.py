"""What the episode records of ``samples.jsonl`` cost a training step (issue 32).

    python bench/samples.py [--steps 12] [--threads 1]

A real ``Trainer`` (tiny model, no warm start) steps with ``log.samples_every: 1``; before each step
the sample settings rotate over the cases below, so every case sees the same mix of batches (A/B
interleaved). The step's own stage timer gives ``time/samples`` (choosing the episodes, the
learner's no-grad forward over them when on, decoding every token, writing the JSON lines) beside
``time/step``. Setups: the CPU demo (2-digit addition, 32 prompts x 8 samples, one turn) and the
tiny tool-math config (GSM8K with a calculator, multi-turn, 64-token episodes). Medians after one
warm-up step. ``every 10`` is the share of a step at the default ``log.samples_every: 10``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _k, _v in {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)

SETUPS = {
    "arithmetic, 256 episodes/step": ("examples/configs/cpu_demo.yaml", []),
    "tool math, 4 multi-turn episodes/step": ("examples/configs/tool_math_grpo_tiny.yaml",
                                              ["rollout.max_new_tokens=32", "rollout.max_total_tokens=256"]),
}
CASES = [(4, False), (4, True), (16, True)]  # (samples_per_step, samples_learner_logprobs)


def measure(config: str, overrides: list[str], steps: int) -> list[tuple[str, float, float, float]]:
    """(case, median ms of time/samples, median ms of time/step, bytes per record) per case."""
    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    cfg = load_config(ROOT / config, [*overrides, "model.warm_start.enabled=false", "model.device=cpu",
                                      "log.progress=false", "log.tensorboard=false", "log.samples_every=1",
                                      "log.eval_samples=0", f"learner.total_steps={steps * len(CASES) + 1}"])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, run_dir=Path(tmp) / "run")
        times: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(CASES))}
        sizes: dict[int, list[int]] = {i: [] for i in range(len(CASES))}
        path = Path(tmp) / "run" / "samples.jsonl"
        for k in range(steps * len(CASES) + 1):
            case = (k - 1) % len(CASES)
            per_step, learner = CASES[max(case, 0)]
            trainer.samples.cfg = dataclasses.replace(cfg.log, samples_per_step=per_step,
                                                      samples_learner_logprobs=learner)
            before = path.stat().st_size if path.exists() else 0
            metrics = trainer.step()
            trainer.step_idx += 1
            if k == 0:
                continue  # warm-up
            times[case].append((metrics["time/samples"], metrics["time/step"]))
            with open(path, "rb") as f:
                f.seek(before)
                chunk = f.read()
            sizes[case].append(len(chunk) // max(1, chunk.count(b"\n")))
        trainer.rollouts.close()
    out = []
    for i, (per_step, learner) in enumerate(CASES):
        name = f"{per_step} per step, learner log-probs {'on' if learner else 'off'}"
        out.append((name, 1e3 * statistics.median(t for t, _ in times[i]),
                    1e3 * statistics.median(s for _, s in times[i]), statistics.median(sizes[i])))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12, help="measured steps per case")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} steps per case, {args.threads} thread(s)\n")
    print("| setup | case | samples ms | step ms | share of a step | every 10 | bytes/record |")
    print("|---|---|---|---|---|---|---|")
    for setup, (config, overrides) in SETUPS.items():
        for name, sample_ms, step_ms, size in measure(config, overrides, args.steps):
            share = sample_ms / step_ms
            print(f"| {setup} | {name} | {sample_ms:.1f} | {step_ms:.0f} | {100 * share:.1f}% | "
                  f"{10 * share:.2f}% | {size:,.0f} |")


if __name__ == "__main__":
    main()
