"""One GRPO training step, agentrl vs TRL's ``GRPOTrainer``, side by side on CPU.

    python bench/train_step.py [--configs short long] [--steps 8] [--warmup 2] [--threads N] [--json out.json]

Both train the same tiny Llama (``agentrl.models.tiny_model_dir``, fp32, no gradient
checkpointing) from the same initial weights on the same prompts (2-digit addition, drawn in the
same order), with the same group size, token budget, temperature 1.0, GRPO advantages (group
std-normalised), token-mean clipped loss, no KL, AdamW at a constant 3e-4, grad clip 1.0, one
optimizer step per batch and one forward/backward over the whole batch. Both generate with HF
transformers (agentrl: its ``HFEngine``; TRL: ``model.generate``) and both score with the
arithmetic env's reward.

agentrl runs through its real ``Trainer.step()`` (the code ``agentrl train`` runs). The two are
interleaved A/B in one process: TRL's ``train()`` loop runs, and a callback runs one agentrl step
after each TRL step (excluded from TRL's clock). After ``--warmup`` steps each, the table reports
the median seconds per step, samples/s and the ratio agentrl/TRL samples/s, plus agentrl's
per-stage medians (``time/<stage>``).

Configurations: ``short`` (32 prompts x 8 samples, 4 new tokens), ``long`` (8 prompts x 8
samples, 128 new tokens), ``short-kl`` (short with a reference model and KL in the loss, beta 0.04);
for the scaling table ``b32``, ``b128``, ``b512`` (samples per step at 4 new tokens) and ``t4``,
``t64``, ``t512`` (new tokens at 2 prompts x 8 samples): ``--configs b32 b128 b512 t4 t64 t512``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


@dataclass(frozen=True)
class Setting:
    """One side-by-side configuration."""

    name: str
    prompts: int
    group: int
    max_new_tokens: int
    beta: float = 0.0


SETTINGS = {
    "short": Setting("short", 32, 8, 4),
    "long": Setting("long", 8, 8, 128),
    "short-kl": Setting("short-kl", 32, 8, 4, beta=0.04),
}
# the scaling table (bench/README.md): samples per step at 4 new tokens, new tokens at 16 samples
SCALING = {f"b{p * 8}": Setting(f"b{p * 8}", p, 8, 4) for p in (4, 16, 64)}
SCALING.update({f"t{t}": Setting(f"t{t}", 2, 8, t) for t in (4, 64, 512)})
SETTINGS.update(SCALING)
LR = 3e-4


def agentrl_trainer(s: Setting, run_dir: str, extra: list[str] | None = None) -> Any:
    """agentrl's own ``Trainer`` on the CPU demo config, changed only where the comparison needs it."""
    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    overrides = [
        "model.warm_start.enabled=false", "model.device=cpu", "algo.drop_zero_std_groups=false",
        f"data.prompts_per_step={s.prompts}", f"rollout.n_samples={s.group}",
        f"rollout.max_new_tokens={s.max_new_tokens}", f"learner.lr={LR}", "learner.grad_clip=1.0",
        f"learner.micro_batch_size={s.prompts * s.group}", "data.eval_tasks=8",
        "log.tensorboard=false", "log.progress=false",
    ]
    if s.beta:
        overrides += ["algo.kl_mode=loss", f"algo.kl_coef={s.beta}", "algo.kl_estimator=k3"]
    cfg = load_config(ROOT / "examples" / "configs" / "cpu_demo.yaml", overrides + (extra or []))
    return Trainer(cfg, run_dir=run_dir)


def trl_trainer(s: Setting, trainer: Any, steps: int, out_dir: str, callback: Any) -> Any:
    """TRL's ``GRPOTrainer`` on the same model, prompts (in agentrl's order) and reward."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.models import load_causal_lm, load_tokenizer

    tasks = copy.deepcopy(trainer.tasks).next(s.prompts * (steps + 1))  # the prompts agentrl will draw
    env = copy.deepcopy(trainer.env)
    by_id = {t.id: t for t in tasks}
    data = Dataset.from_list([{"prompt": env.reset(options={"task": t})[1]["prompt"], "task_id": t.id}
                              for t in tasks])

    def env_reward(prompts: list[str], completions: list[str], task_id: list[str], **_: Any) -> list[float]:
        out = []
        for text, tid in zip(completions, task_id):
            env.reset(options={"task": by_id[tid]})
            out.append(float(env.step(text)[1]))
        return out

    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=s.prompts * s.group, num_generations=s.group, steps_per_generation=1,
        gradient_accumulation_steps=1, max_completion_length=s.max_new_tokens, temperature=1.0, top_p=1.0,
        top_k=0, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, beta=s.beta, num_iterations=1, epsilon=0.2, loss_type="dapo",
        scale_rewards="group", max_steps=steps, shuffle_dataset=False, logging_steps=10**6,
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )
    model = load_causal_lm(trainer.model_path, device="cpu")
    tok = load_tokenizer(trainer.model_path)
    return GRPOTrainer(model=model, reward_funcs=env_reward, args=args, train_dataset=data,
                       processing_class=tok, callbacks=[callback])


def interleaved(s: Setting, steps: int, warmup: int, ablate: bool = False) -> dict[str, Any]:
    """Run TRL's train loop with one agentrl ``Trainer.step()`` after each TRL step (and, with
    ``ablate``, one step of an agentrl without shared prompts in the engine and the learner)."""
    from _ab import ab_callback

    times: dict[str, list[float]] = {"agentrl": [], "trl": []}
    stages: dict[str, list[float]] = {}
    tmp = tempfile.mkdtemp(prefix="bench_train_step_")
    ours = agentrl_trainer(s, str(Path(tmp) / "agentrl"))
    plain = None
    if ablate:
        plain = agentrl_trainer(s, str(Path(tmp) / "plain"), ["learner.shared_prefix=false"])
        plain.engine.share_prompts = False
        times["plain"] = []

    def our_steps() -> None:
        t0 = time.perf_counter()
        m = ours.step()
        times["agentrl"].append(time.perf_counter() - t0)
        if len(times["agentrl"]) > warmup:
            for key, v in m.items():
                if key.startswith("time/"):
                    stages.setdefault(key[5:], []).append(v)
        if plain is not None:
            t0 = time.perf_counter()
            plain.step()
            times["plain"].append(time.perf_counter() - t0)

    theirs = trl_trainer(s, ours, steps + warmup, str(Path(tmp) / "trl"), ab_callback(times["trl"], our_steps))
    theirs.train()
    n = s.prompts * s.group
    med = {k: statistics.median(v[warmup:]) for k, v in times.items()}
    return {"config": s.name, "samples": n, "max_new_tokens": s.max_new_tokens, "steps": len(times["trl"]) - warmup,
            "trl_s": med["trl"], "agentrl_s": med["agentrl"], "trl_sps": n / med["trl"],
            "agentrl_sps": n / med["agentrl"], "ratio": med["trl"] / med["agentrl"],
            "plain_s": med.get("plain"), "stages": {k: statistics.median(v) for k, v in stages.items()},
            "raw": times, "trainer": ours}


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| config | samples/step | TRL s/step | agentrl s/step | TRL samples/s | agentrl samples/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['config']} ({r['samples']} x {r['max_new_tokens']} tok) | {r['samples']} | {r['trl_s']:.3f} | "
              f"{r['agentrl_s']:.3f} | {r['trl_sps']:.0f} | {r['agentrl_sps']:.0f} | {r['ratio']:.2f}x |")
        if r["plain_s"]:
            n = r["samples"]
            print(f"| {r['config']}, agentrl without shared prompts | {n} | {r['trl_s']:.3f} | {r['plain_s']:.3f} | "
                  f"{r['trl_sps']:.0f} | {n / r['plain_s']:.0f} | {r['trl_s'] / r['plain_s']:.2f}x |")
    print()
    keys = [k for k in ("tasks", "generate", "reward", "experience", "reference", "advantages", "update", "sync",
                        "step") if any(k in r["stages"] for r in rows)]
    print("agentrl stage medians (s):")
    print("| stages of | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for r in rows:
        print(f"| {r['config']} | " + " | ".join(f"{r['stages'].get(k, 0.0):.4f}" for k in keys) + " |")


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def print_scaling(rows: list[dict[str, Any]]) -> None:
    """Seconds per step as the batch grows and as the answers grow, with the fitted slope of each."""
    for label, prefix, key, unit in (("samples per step (4 new tokens)", "b", "samples", 100),
                                     ("new tokens (16 samples)", "t", "max_new_tokens", 100)):
        part = [r for r in rows if r["config"].startswith(prefix) and r["config"][1:].isdigit()]
        if len(part) < 2:
            continue
        print(f"\nscaling with {label}:")
        print(f"| {key} | TRL s/step | agentrl s/step | ratio |")
        print("|---:|---:|---:|---:|")
        for r in part:
            print(f"| {r[key]} | {r['trl_s']:.3f} | {r['agentrl_s']:.3f} | {r['ratio']:.2f}x |")
        xs = [float(r[key]) for r in part]
        st, sa = slope(xs, [r["trl_s"] for r in part]), slope(xs, [r["agentrl_s"] for r in part])
        print(f"| slope (s per {unit} {key}) | {unit * st:.3f} | {unit * sa:.3f} | {st / sa:.2f}x |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=["short", "long"], choices=sorted(SETTINGS))
    ap.add_argument("--steps", type=int, default=8, help="measured steps per side (after warm-up)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--ablate", action="store_true", help="a third arm: agentrl without shared prompts")
    ap.add_argument("--profile", help="profile 3 more agentrl steps per config (pyinstrument); text to this file")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    rows = [interleaved(SETTINGS[c], args.steps, args.warmup, args.ablate) for c in args.configs]
    if args.profile:
        Path(args.profile).write_text("\n".join(profile(r["config"], r.pop("trainer")) for r in rows))
    print(f"torch threads: {torch.get_num_threads()}; medians of {args.steps} steps after {args.warmup} warm-up, "
          "A/B interleaved in one process")
    print_table(rows)
    print_scaling(rows)
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in r.items() if k != "trainer"} for r in rows], indent=1))
    return 0


def profile(name: str, trainer: Any, steps: int = 3) -> str:
    """pyinstrument's call tree of ``steps`` agentrl steps (frames under 2% of the time hidden)."""
    from pyinstrument import Profiler

    prof = Profiler(interval=0.001)
    prof.start()
    for _ in range(steps):
        trainer.step()
    prof.stop()
    return f"## {name}: {steps} agentrl steps\n" + prof.output_text(unicode=False, color=False, show_all=False,
                                                                     time="percent_of_total")


if __name__ == "__main__":
    raise SystemExit(main())
