"""``agentrl sft CONFIG``: supervised fine-tuning on records (a file, a hub dataset, or made from an
env); the loop, batching and packing are :mod:`agentrl.training.supervised`, shared with the warm
start of RL runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config import RunConfig
from agentrl.env import fixed_tasks
from agentrl.evaluation.metrics import evaluate
from agentrl.models import load_policy
from agentrl.rollout.build import make_env
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors import SingleTurnExecutor
from agentrl.stages.config import SFTConfig
from agentrl.stages.data import encode_sft, stage_records
from agentrl.stages.runner import model_path_of, run_dir_of, run_stage, save_hf, seed_all, stage_envs
from agentrl.training.lora import apply_lora, merged_model
from agentrl.training.supervised import eval_loss, sft_micro_loss


# ------------------------------------------------------------------ agentrl sft CONFIG
def greedy_accuracy(cfg: SFTConfig, model: Any, tokenizer: Any, env: Any, n: int) -> float:
    """Greedy success on ``n`` fixed held-out tasks of ``env``."""
    params = SamplingParams(max_new_tokens=cfg.sft.max_new_tokens, temperature=0.0)
    ex = SingleTurnExecutor(env, HFEngine(model, tokenizer), tokenizer, params,
                            chat_template=cfg.data.chat_template)
    return evaluate(ex, fixed_tasks(env, n, cfg.data.seed + 1000), params)["accuracy"]


def run_sft(cfg: SFTConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Fine-tune ``model.path`` on the configured records; the model goes to ``RUN/final``.

    Returns a summary: eval loss (and greedy accuracy) before and after, steps, seconds, paths.
    """
    seed_all(cfg.data.seed)
    out = run_dir_of(cfg, run_dir)
    env, dev_env = stage_envs(cfg)
    path = model_path_of(cfg, env)
    model, tok = load_policy(RunConfig(model=cfg.model), path)
    model = apply_lora(model, cfg.lora)
    train_recs, eval_recs = stage_records(cfg, "sft", env, dev_env)
    train = [t for t in (encode_sft(r, tok, cfg.data) for r in train_recs) if t is not None]
    held = [t for t in (encode_sft(r, tok, cfg.data) for r in eval_recs) if t is not None]
    test_env = make_env(RunConfig(env=cfg.env), cfg.env.eval_kwargs) if cfg.sft.greedy_eval_tasks else None

    def held_out() -> dict[str, float]:
        m = {"eval/loss": eval_loss(model, held, tok.pad_token_id, cfg.optim.micro_batch_size)} if held else {}
        if test_env is not None:
            m["eval/greedy_accuracy"] = greedy_accuracy(cfg, model, tok, test_env, cfg.sft.greedy_eval_tasks)
        return m

    before, result, after = run_stage("sft", cfg, out, model, tok, train,
                                      sft_micro_loss(model, tok.pad_token_id, cfg.sft.packing, cfg.sft.pack_length), held_out)
    final = save_hf(merged_model(model), tok, out / "final") if cfg.checkpoint.save_final else None
    return {"steps": result.steps, "seconds": result.seconds, "train_examples": len(train),
            "eval_examples": len(held), "before": before, "after": after,
            "final_loss": result.last.get("loss"), "model_dir": str(final) if final else None,
            "run_dir": str(out)}
