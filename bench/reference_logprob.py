"""Benchmark: how far a policy is from the env's reference answers on held-out tasks, family by family.

    python bench/reference_logprob.py [--config FILE] [--tasks 100] [--policy DIR ...] [--show N] [overrides ...]

Held-out success moves in whole tasks (s.e. 0.05 on 100); this reads what the policy knows between them. For
each policy (the config's cached warm start, then each ``--policy``: a run's ``checkpoints/step_N/policy``) and
each of the config's held-out tasks (``data.eval_tasks`` of the eval split, the ones ``agentrl train`` evaluates),
the reference answer is scored teacher-forced: does the policy's argmax agree with every one of its tokens, and
what is its log-probability (nats; the same tokens the warm start trained on, :func:`answer_pair`). Per family
and in all. Then, for the first policy, where the argmax first parts from the reference on each task that
parts: the reference token's probability there and the policy's top 3, and per family how many distinct
top-1 tokens its parting tasks have: one for a family whose tasks each ask for another value means the policy
writes the family's usual value whatever the instruction says (it does not copy it). Needs the config's warm
start in the cache (``agentrl train`` makes it; ``model.warm_start.enabled=false`` reads the model as built).
One process, no workspaces: 20 s on 2 cores for 100 tasks and two policies.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)  # not bench/: its sandbox.py would shadow the package


def score(model: Any, prompt: list[int], answer: list[int]) -> tuple[Any, Any]:
    """(log-probs of ``answer``'s tokens ``[len(answer)]``, log-softmax at each answer position
    ``[len(answer), vocab]``) under ``model``, teacher-forced after ``prompt``."""
    import torch

    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, len(prompt) - 1:-1].float(), dim=-1)
    return logp[torch.arange(len(answer)), torch.tensor(answer)], logp


def family(task: Any) -> str:
    """The task's ``metadata["family"]`` (Terminal-v0 and other generated envs), else ``all``."""
    return str(task.metadata.get("family") or "all")


def read(model: Any, pairs: list[tuple[Any, list[int], list[int]]], tokenizer: Any, part: bool) -> dict:
    """Per family: [tasks, argmax agrees, summed log-prob]; with ``part``, the parting rows too."""
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])
    parts: list[tuple[str, str, float, list[tuple[str, float]]]] = []
    for task, prompt, answer in pairs:
        tok_lp, logp = score(model, prompt, answer)
        row = per[family(task)]
        argmax = logp.argmax(-1).tolist()
        off = [i for i, (a, r) in enumerate(zip(argmax, answer)) if a != r]
        row[0] += 1
        row[1] += not off
        row[2] += float(tok_lp.sum())
        if part and off:
            i = off[0]
            top = logp[i].exp().topk(3)
            parts.append((family(task), tokenizer.decode([answer[i]]), float(tok_lp[i].exp()),
                          [(tokenizer.decode([int(j)]), float(v)) for v, j in zip(top.values, top.indices)]))
    return {"per": dict(per), "parts": parts}


def load_policy(cfg: Any, base: str, tokenizer: Any, env: Any, path: str | None) -> tuple[Any, str]:
    """(model, name): ``path``'s weights; with None the config's cached warm start on the model ``base`` (the
    model as built when the config's warm start is off). ``env``: the config's training env."""
    from transformers import AutoModelForCausalLM

    from agentrl.rollout.build import make_env
    from agentrl.training.warm_start import maybe_warm_start

    model = AutoModelForCausalLM.from_pretrained(path or base)
    if path is not None:
        return model.eval(), Path(path).parent.name
    if not cfg.model.warm_start.enabled:
        return model.eval(), "initial"
    if maybe_warm_start(cfg, model, tokenizer, base, env, lambda: make_env(cfg, dict(cfg.env.dev_kwargs)),
                        log=lambda *_: None, cached_only=True) is None:
        raise SystemExit(f"no cached warm start for {cfg.env.id} under this config: run `agentrl train` once first "
                         f"(or model.warm_start.enabled=false: the model as built)")
    return model.eval(), "warm start"


def table(names: list[str], reads: list[dict]) -> str:
    """One row per family (and ``all``): tasks, then argmax-agrees / mean log-prob for each policy."""
    fams = sorted(reads[0]["per"])
    head = "| family | tasks | " + " | ".join(f"{n}: agrees / log-prob" for n in names) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(names)]
    for fam in [*fams, "all"]:
        cells = []
        for r in reads:
            rows = list(r["per"].values()) if fam == "all" else [r["per"][fam]]
            n, ok, lp = (sum(x[k] for x in rows) for k in range(3))
            cells.append(f"{ok:.0f} / {lp / n:.2f}")
        n_tasks = sum(x[0] for x in reads[0]["per"].values()) if fam == "all" else reads[0]["per"][fam][0]
        lines.append(f"| {fam} | {n_tasks:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def partings(parts: list, show: int) -> str:
    """Per family with parting tasks: how many part, how many distinct top-1 tokens they have; then ``show`` rows."""
    by = collections.defaultdict(list)
    for p in parts:
        by[p[0]].append(p)
    out = ["| family | parting tasks | distinct top-1 there | mean p(reference token) |", "|---|---:|---:|---:|"]
    for fam, ps in sorted(by.items()):
        out.append(f"| {fam} | {len(ps)} | {len({p[3][0][0] for p in ps})} | {sum(p[2] for p in ps) / len(ps):.3f} |")
    for fam, ref, p, top in parts[:show]:
        out.append(f"{fam}: reference {ref!r} p={p:.3f}; top 3 " + ", ".join(f"{t!r} {v:.3f}" for t, v in top))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "examples/configs/terminal_tiny.yaml"))
    ap.add_argument("--tasks", type=int, default=0, help="held-out tasks (0: the config's data.eval_tasks)")
    ap.add_argument("--policy", action="append", default=[], help="a policy directory (a checkpoint's policy/)")
    ap.add_argument("--show", type=int, default=0, help="parting rows to print")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from agentrl.config import load_config
    from agentrl.env import fixed_tasks
    from agentrl.models import load_tokenizer
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.training.warm_start import answer_pair

    cfg = load_config(args.config, args.overrides)
    env, eval_env = make_env(cfg), make_env(cfg, dict(cfg.env.eval_kwargs))
    base = resolve_model_path(cfg, env)
    tokenizer = load_tokenizer(base)
    tasks = fixed_tasks(eval_env, args.tasks or cfg.data.eval_tasks, cfg.data.seed + 1000)
    try:
        pairs = [(t, *answer_pair(cfg, eval_env, tokenizer, t)) for t in tasks]
    except (NotImplementedError, AttributeError, TypeError, ValueError) as e:
        raise SystemExit(f"{cfg.env.id} gives no reference answers to score: {e}") from None
    names, reads = [], []
    for i, path in enumerate([None, *args.policy]):
        model, name = load_policy(cfg, base, tokenizer, env, path)
        names.append(name)
        reads.append(read(model, pairs, tokenizer, part=i == 0))
    print(table(names, reads))
    print()
    print(partings(reads[0]["parts"], args.show))


if __name__ == "__main__":
    main()
