"""A multi-turn agentic GRPO step, agentrl vs TRL's ``GRPOTrainer`` environment mode, side by side on CPU.

    OMP_NUM_THREADS=1 .venv/bin/python bench/agentic_trl.py [--prompts 8] [--group 8] [--max-new-tokens 96]
        [--steps 4] [--warmup 1] [--threads 1] [--tool-schemas] [--cold]

What it measures: seconds per training step (rollout of P prompts x G samples of multi-turn shell
episodes, grading, advantages, one optimizer step), samples/s (samples = P x G per step) and the ratio
agentrl/TRL samples/s; per side also the mean reward, the share of policy turns with a parsed tool call,
turns per sample, prompt tokens and generated (model) tokens per sample.

The env is ``agentrl/Terminal-v0`` as ``examples/configs/terminal_tiny.yaml`` configures it (difficulty 1,
``max_turns`` 2, the short system prompt), on both sides the same code: TRL's environment class wraps
agentrl's own env (one deep copy of one ``agentrl.make`` per rollout, as agentrl's executor makes one per
episode, so both share the task directories and the grade cache), its ``bash``/``submit`` tools run
through the env's ``run_call`` and ``get_reward`` grades the final tree with the env's ``finish``. Same
tiny model and initial weights (TRL gets a deep copy of the Trainer's warm-started policy, built before
any step), same tasks in the same order (TRL's dataset is the tasks agentrl's ``TaskSource`` will draw,
``shuffle_dataset=False``), same group size, per-turn token budget ``T``, temperature 1.0, GRPO
advantages (group std), token-mean clipped loss (TRL ``loss_type="dapo"``, eps 0.2), no KL, AdamW at the
config's constant lr (5e-5), grad clip 1.0, one optimizer step and one forward/backward over the batch
(agentrl ``learner.micro_batch_size=P*G``). Both sample with HF ``transformers`` on CPU, fp32. Same prompt
tokens: TRL's tokenizer (a deep copy of agentrl's) gets TRL's own Qwen2.5 template and its response parser
(``add_response_schema``: ``<tool_call>{json}</tool_call>``, the format the policy was warm-started on), with
the template's tools block left out of the system message, so both render exactly the tokens agentrl's
ChatML template renders (``--tool-schemas`` keeps the block: the stock template, see below).

agentrl runs through its real ``Trainer.step()``. The two are interleaved A/B in one process exactly as
``bench/train_step.py``: TRL's ``train()`` loop runs and a ``TrainerCallback.on_step_end`` runs one
agentrl step after each TRL step, outside TRL's clock. The first ``--warmup`` steps of each side are
dropped; the table has the median, the spread (min-max) of the rest.

Options: ``--prompts P`` (8), ``--group G`` (8), ``--max-new-tokens T`` (96: the warm start is cached for
the config's 96 only; another T needs ``agentrl train examples/configs/terminal_tiny.yaml
rollout.max_new_tokens=T`` first, or ``--cold``), ``--steps`` measured steps (4), ``--warmup`` (1),
``--threads`` torch threads (1), ``--tool-schemas`` (TRL's stock Qwen2.5 template: the tools' JSON
schemas in TRL's system prompt), ``--cold`` (no warm start: the untrained tiny model, for testing only).

What differs between the two loops (TRL 1.16, ``trl/trainer/grpo_trainer.py``):

- Prompt. Stock TRL renders the tools' JSON schemas (from the env methods' signatures and docstrings) into the
  system message after agentrl's own short system prompt (``_tokenize_prompts``, l. 1705-1718; the Qwen2.5
  template's tools block): ~630 prompt tokens instead of ~110. The tiny policy, warm-started on the short
  prompt, then writes broken calls (reward 0, every turn at its budget); hence the block is left out by
  default and ``--tool-schemas`` shows the stock behaviour.
- Turns. TRL runs a turn's tools, then always generates again (``_tool_call_loop``: the loop l. 1957, the
  new turn l. 2124), even after ``submit``, and trains on that turn too; with
  ``max_tool_calling_iterations=1`` (agentrl: ``max_turns`` 2) the second turn's calls are parsed but never
  run. agentrl ends an episode at ``submit`` (or at a turn without a call) and runs the second turn's calls
  before grading. TRL grades every rollout after the whole batch has generated (``get_reward``, one env at
  a time: l. 724-725, called from ``_calculate_rewards``); agentrl grades in ``env.step``, on its env
  worker threads (``rollout.env_workers`` 8), while other episodes generate.
- Tools. TRL calls them one sample at a time in the training process (l. 1965-1994); agentrl runs each
  episode's env step on a thread pool, and batches the next turns continuously. A completion with one
  malformed ``<tool_call>`` loses all its calls in TRL (``chat_template_utils.parse_response`` falls back
  to plain text, l. 1370-1373); agentrl runs the valid ones and answers the bad one with an error.
- Budgets. Each turn may generate T tokens on both sides (TRL: ``generation_kwargs={"max_new_tokens": T}``);
  TRL's ``max_completion_length`` (turns plus tool responses) is ``2*T + 256`` (256 tokens of room for the
  tool responses; an episode whose tool response does not fit gets no second turn, l. 2044-2070). agentrl
  counts only action tokens (``T * max_turns``). After a tool call TRL appends the tool response right
  after the sampled EOS; agentrl first closes the assistant turn (``<|im_end|>\\n``).
- Calls after ``submit`` in the same turn: agentrl does not run them; the TRL env class here refuses them
  (so both grade the same tree), as it enforces the env's ``max_calls_per_turn``.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

warnings.filterwarnings("ignore", message="TRL currently supports vLLM")  # TRL's import-time note; vLLM is unused

CONFIG = ROOT / "examples" / "configs" / "terminal_tiny.yaml"
ENV_ID = "agentrl/Terminal-v0"
TOOL_ROOM = 256  # tokens of TRL's completion budget left for the tool responses, beyond the two turns


class TerminalTRLEnv:
    """agentrl's Terminal-v0 as a TRL ``environment_factory`` environment: the same workspace, tools, grader."""

    def __init__(self, kwargs: dict[str, Any], shared: dict[str, Any]) -> None:
        if "proto" not in shared:  # one agentrl.make; each rollout gets a deep copy (as agentrl's executor)
            import agentrl

            shared["proto"] = agentrl.make(ENV_ID, **kwargs)
        self._env = copy.deepcopy(shared["proto"])
        self._calls = 0

    def reset(self, **kwargs: Any) -> None:
        """Start the episode of the row's ``task_id`` (the prompt is the dataset's)."""
        self._env.reset(options={"task": self._env.task_named(kwargs["task_id"])})
        self._calls = 0

    def bash(self, command: str) -> str:
        """Run a bash command in the computer. The shell keeps its state between calls.

        Args:
            command: the bash command to run

        Returns:
            stdout and stderr together, with a note when the exit code is not 0 or the command timed out.
        """
        return self._call("bash", {"command": command})

    def submit(self) -> str:
        """Call this when the task is done: it ends your work, and the computer's final state is graded.

        Returns:
            A confirmation that the work was submitted.
        """
        return self._call("submit", {})

    def get_reward(self) -> float:
        """Grade the final tree as agentrl ends an episode (the workspace is sealed, closed, then graded)."""
        env = self._env
        ended = "submit" if env.session.submitted else "max_turns" if self._calls else "no_tool_call"
        return float(env.finish(ended, terminated=ended != "max_turns")[1])

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        env = self._env
        if env.session.submitted or env.session.time_left() <= 0:
            return "Error: the episode is over (submitted, or out of time); the call was not run"
        self._calls += 1
        if self._calls > env.max_calls_per_turn:
            return f"Error: at most {env.max_calls_per_turn} tool calls run per turn; this one was not run"
        return env.run_call({"name": name, "arguments": arguments})["result"]

    def _close(self) -> None:
        self._env.close()


def overrides(p: int, g: int, t: int, cold: bool) -> list[str]:
    """The config changes the comparison needs (both sides train on every group, no KL, one pass; synchronous
    steps: interleaved with TRL's, an agentrl step must not leave its next episodes running beside them)."""
    out = [f"data.prompts_per_step={p}", f"rollout.n_samples={g}", f"rollout.max_new_tokens={t}", "rollout.async=false",
           "algo.drop_zero_std_groups=false", "algo.kl_mode=none", "algo.kl_coef=0.0",
           f"learner.micro_batch_size={p * g}", "model.device=cpu", "data.eval_tasks=8",
           "log.tensorboard=false", "log.progress=false"]
    return out + (["model.warm_start.enabled=false"] if cold else [])


def warm_start_cached(cfg: Any) -> bool:
    """Whether the config's warm start is in the cache (building the Trainer otherwise runs it: ~10 min)."""
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.training.warm_start import maybe_warm_start

    env = make_env(cfg)
    try:
        path = resolve_model_path(cfg, env)
        model, tok = load_policy(cfg, path)
        got = maybe_warm_start(cfg, model, tok, path, env, lambda: make_env(cfg, cfg.env.dev_kwargs),
                               log=lambda *_: None, cached_only=True)
    finally:
        env.close()
    return got is not None


def agentrl_trainer(p: int, g: int, t: int, run_dir: str, cold: bool) -> Any:
    """agentrl's own ``Trainer`` on the terminal config, with a hook that keeps each step's episodes."""
    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    cfg = load_config(CONFIG, overrides(p, g, t, cold))
    if not cold and not warm_start_cached(cfg):
        raise SystemExit(f"no warm start cached for this config: run `agentrl train {CONFIG.relative_to(ROOT)} "
                         f"rollout.max_new_tokens={t}` once (~10 min), or pass --cold")
    trainer = Trainer(cfg, run_dir=run_dir)
    trainer.kept = []
    rollout = trainer.rollout

    def keep(tasks: list[Any]) -> list[Any]:
        trajs = rollout(tasks)
        trainer.kept.append(trajs)
        return trajs

    trainer.rollout = keep
    return trainer


def trl_dataset(trainer: Any, n: int) -> Any:
    """The ``n`` tasks agentrl's ``TaskSource`` will draw, in order: conversational prompt and ``task_id``."""
    from datasets import Dataset

    from agentrl.training.tasks import TaskSource

    source = TaskSource(trainer.env, trainer.cfg.data.seed)
    source.load_state_dict(trainer.tasks.state_dict())
    env = copy.deepcopy(trainer.env)
    rows = [{"prompt": env.reset(options={"task": task})[1]["prompt"], "task_id": task.id}
            for task in source.next(n)]
    return Dataset.from_list(rows)


def trl_args(p: int, g: int, t: int, steps: int, lr: float, out_dir: str) -> Any:
    """GRPOConfig for the same batch, budgets and optimizer as agentrl's step."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=p * g, num_generations=g, steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=2 * t + TOOL_ROOM, generation_kwargs={"max_new_tokens": t},
        max_tool_calling_iterations=1, temperature=1.0, top_p=1.0, top_k=0, learning_rate=lr,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, beta=0.0,
        num_iterations=1, epsilon=0.2, loss_type="dapo", scale_rewards="group", use_vllm=False,
        max_steps=steps, shuffle_dataset=False, logging_steps=1, save_strategy="no", report_to=[],
        disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )


def trl_trainer(trainer: Any, p: int, g: int, t: int, steps: int, out_dir: str, callback: Any,
                schemas: bool) -> Any:
    """TRL's ``GRPOTrainer`` in environment mode on a copy of agentrl's initial policy, tasks and env."""
    from transformers import PrinterCallback
    from trl import GRPOTrainer
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    class Recording(GRPOTrainer):
        """GRPOTrainer that keeps each batch's (prompt lengths, completions) for the table; nothing else."""

        kept: list[tuple[list[int], list[list[dict[str, Any]]]]] = []

        def _generate(self, prompts: list[Any]) -> Any:
            out = super()._generate(prompts)
            self.kept.append(([len(ids) for ids in out[0]], copy.deepcopy(out[3])))
            return out

    tok = copy.deepcopy(trainer.tokenizer)
    tok.chat_template = qwen2_5_chat_template
    add_response_schema(tok)  # the <tool_call>{json}</tool_call> parser TRL pairs with this template
    if not schemas:  # the same template, less the tools block in the system message: agentrl's prompt tokens
        tok.chat_template = "{%- set tools = none %}" + qwen2_5_chat_template
    factory = partial(TerminalTRLEnv, dict(trainer.cfg.env.kwargs), {})
    args = trl_args(p, g, t, steps, trainer.cfg.learner.lr, out_dir)
    theirs = Recording(model=copy.deepcopy(trainer.model), args=args, train_dataset=trl_dataset(trainer, p * steps),
                       processing_class=tok, callbacks=[callback], environment_factory=factory)
    theirs.remove_callback(PrinterCallback)  # logging_steps=1 keeps the per-step logs; no need to print them
    return theirs


def interleaved(p: int, g: int, t: int, steps: int, warmup: int, cold: bool, schemas: bool) -> dict[str, Any]:
    """TRL's train loop with one agentrl ``Trainer.step()`` after each TRL step (outside TRL's clock)."""
    from _ab import ab_callback

    times: dict[str, list[float]] = {"agentrl": [], "trl": []}
    metrics: list[dict[str, float]] = []
    ours: Any = None

    def our_step() -> None:
        t0 = time.perf_counter()
        metrics.append(ours.step())
        times["agentrl"].append(time.perf_counter() - t0)

    with tempfile.TemporaryDirectory(prefix="bench_agentic_trl_", ignore_cleanup_errors=True) as tmp:
        ours = agentrl_trainer(p, g, t, str(Path(tmp) / "agentrl"), cold)
        theirs = trl_trainer(ours, p, g, t, steps + warmup, str(Path(tmp) / "trl"), ab_callback(times["trl"], our_step),
                             schemas)
        try:
            theirs.train()
        finally:
            for pool in theirs._environment_pool.values():
                for env in pool:
                    env._close()
    return {"times": times, "metrics": metrics, "kept": ours.kept, "trl_kept": theirs.kept,
            "trl_log": [h for h in theirs.state.log_history if "reward" in h], "warm": ours.warm}


def agentrl_row(run: dict[str, Any], warmup: int) -> dict[str, float]:
    """Reward, tool-call turns, turns, prompt and generated tokens of agentrl's measured steps."""
    trajs = [tr for batch in run["kept"][warmup:] for tr in batch]
    turns = sum(int(tr.info.get("turns", 1)) for tr in trajs)
    called = sum(len({c.get("turn") for c in tr.info.get("tool_calls", []) if c.get("name") is not None})
                 for tr in trajs)
    ms = run["metrics"][warmup:]
    return {"reward": statistics.fmean(m["reward/mean"] for m in ms), "tool_turns": called / max(1, turns),
            "turns": turns / max(1, len(trajs)), "prompt": statistics.fmean(len(tr.prompt_ids) for tr in trajs),
            "gen": statistics.fmean(m["response_length/mean"] for m in ms)}


def trl_row(run: dict[str, Any], warmup: int) -> dict[str, float]:
    """The same for TRL's measured steps (turns: its assistant messages, tool responses excluded)."""
    kept = run["trl_kept"][warmup:]
    msgs = [[m for m in c if m.get("role") == "assistant"] for _, comps in kept for c in comps]
    turns = sum(len(m) for m in msgs)
    called = sum(bool(m.get("tool_calls")) for ms in msgs for m in ms)
    logs = run["trl_log"][warmup:]
    return {"reward": statistics.fmean(h["reward"] for h in logs), "tool_turns": called / max(1, turns),
            "turns": turns / max(1, len(msgs)), "prompt": statistics.fmean(n for lens, _ in kept for n in lens),
            "gen": statistics.fmean(h["completions/mean_length"] for h in logs)}


def print_table(run: dict[str, Any], p: int, g: int, warmup: int) -> None:
    n = p * g
    rows = {"agentrl": agentrl_row(run, warmup), "TRL": trl_row(run, warmup)}
    times = {"agentrl": run["times"]["agentrl"][warmup:], "TRL": run["times"]["trl"][warmup:]}
    sps = {k: n / statistics.median(v) for k, v in times.items()}
    print("| framework | s/step (median) | spread (min-max) | samples/s | agentrl/TRL samples/s | reward (mean) | "
          "turns with a tool call | turns/sample | prompt tokens | generated tokens/sample |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        v = times[name]
        ratio = f"{sps['agentrl'] / sps['TRL']:.2f}x" if name == "agentrl" else "1.00x"
        print(f"| {name} | {statistics.median(v):.2f} | {min(v):.2f}-{max(v):.2f} | {sps[name]:.2f} | {ratio} | "
              f"{r['reward']:.3f} | {r['tool_turns']:.0%} | {r['turns']:.2f} | {r['prompt']:.0f} | {r['gen']:.1f} |")
    stages = [k for k in ("generate", "reward", "experience", "advantages", "update", "sync")
              if f"time/{k}" in run["metrics"][-1]]
    ms = run["metrics"][warmup:]
    print("\nagentrl stage medians (s): " + ", ".join(
        f"{k} {statistics.median(m.get(f'time/{k}', 0.0) for m in ms):.3f}" for k in stages))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step (P)")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="tokens per turn (T)")
    ap.add_argument("--steps", type=int, default=4, help="measured steps per side (after warm-up)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--cold", action="store_true", help="no warm start (the untrained model): testing only")
    ap.add_argument("--tool-schemas", action="store_true",
                    help="TRL's stock Qwen2.5 template: the tools' JSON schemas in its system prompt")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    start = time.perf_counter()
    run = interleaved(args.prompts, args.group, args.max_new_tokens, args.steps, args.warmup, args.cold,
                      args.tool_schemas)
    p, g, t = args.prompts, args.group, args.max_new_tokens
    print(f"{ENV_ID} ({CONFIG.name}), {p} prompts x {g} samples, {t} tokens per turn (TRL max_completion_length "
          f"{2 * t + TOOL_ROOM}, tool schemas in its prompt: {'yes' if args.tool_schemas else 'no'}), warm start: "
          f"{'loaded' if run['warm'] else 'off'}; torch threads "
          f"{torch.get_num_threads()}; medians of {args.steps} steps after {args.warmup} warm-up, A/B interleaved "
          f"in one process ({time.perf_counter() - start:.0f} s in all)\n")
    print_table(run, p, g, args.warmup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
