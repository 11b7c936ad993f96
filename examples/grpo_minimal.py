"""GRPO in one file: a tiny Llama learns 2-digit addition on CPU.

A reference to read top to bottom (in the spirit of cleanrl's ppo.py). It uses agentrl only for
the environment (``agentrl/Arithmetic-v0``) and to build the tiny model; sampling, advantages, the
loss and the update are written out here. ``tests/test_grpo_minimal.py`` checks that the library
computes the same advantages and loss on a fixed batch.

    python examples/grpo_minimal.py --steps 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import agentrl
from agentrl.models import load_causal_lm, load_tokenizer, tiny_model_dir

ENV_KWARGS = {"digits": 2, "operators": "+", "terms": 2, "template": "{expr}=", "bare_answer": True}


# ---------------------------------------------------------------------------- the GRPO math
def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Group-normalised rewards: (B,) with B = prompts * group_size, groups contiguous -> (B,)."""
    r = rewards.view(-1, group_size)
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + eps)
    return adv.view(-1)


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip: float = 0.2) -> torch.Tensor:
    """PPO-clipped surrogate, token mean: logprobs, old_logprobs, mask (B,A); advantages (B,)."""
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    return -(surrogate * mask).sum() / mask.sum()


def token_logprobs(model, seqs: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """log p(token t+1 | tokens <= t): seqs, attn (B,T) -> (B,T-1)."""
    logits = model(input_ids=seqs, attention_mask=attn).logits[:, :-1].float()
    return logits.gather(-1, seqs[:, 1:, None]).squeeze(-1) - torch.logsumexp(logits, -1)


# ---------------------------------------------------------------------------- sampling
@torch.no_grad()
def sample(model, prompts: list[list[int]], max_new: int, eos: int, pad: int, greedy: bool = False):
    """KV-cached sampling from left-padded prompts. Returns the new tokens per prompt (EOS kept)."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    new = []
    for _ in range(max_new):
        logits = out.logits[:, -1].float()
        tok = logits.argmax(-1) if greedy else torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
        tok = torch.where(done, torch.full_like(tok, pad), tok)
        new.append(tok)
        done |= tok == eos
        if done.all():
            break
        attn = torch.cat([attn, torch.ones(len(prompts), 1, dtype=attn.dtype)], 1)
        pos = pos[:, -1:] + 1
        out = model(input_ids=tok[:, None], attention_mask=attn, position_ids=pos,
                    past_key_values=out.past_key_values, use_cache=True)
    rows = torch.stack(new, 1).tolist()
    return [r[: r.index(eos) + 1] if eos in r else r for r in rows]


def rewards_for(env, tasks, responses: list[str]) -> torch.Tensor:
    out = []
    for task, text in zip(tasks, responses):
        env.reset(options={"task": task})
        out.append(env.step(text)[1])
    return torch.tensor(out)


def pack(prompts: list[list[int]], responses: list[list[int]], pad: int):
    """Right-padded sequences, attention mask (B,T) and the response mask (B,T-1)."""
    rows = [p + r for p, r in zip(prompts, responses)]
    T = max(len(r) for r in rows)
    seqs = torch.tensor([r + [pad] * (T - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    mask = torch.zeros(len(rows), T - 1)
    for b, (p, r) in enumerate(zip(prompts, responses)):
        mask[b, len(p) - 1: len(p) - 1 + len(r)] = 1
    return seqs, attn, mask


@torch.no_grad()
def accuracy(model, tok, env, tasks) -> float:
    prompts = [tok(t.prompt)["input_ids"] for t in tasks]
    outs = sample(model, prompts, 4, tok.eos_token_id, tok.pad_token_id, greedy=True)
    texts = [tok.decode(o, skip_special_tokens=True) for o in outs]
    return rewards_for(env, tasks, texts).mean().item()


# ---------------------------------------------------------------------------- the loop
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    env = agentrl.make("agentrl/Arithmetic-v0", **ENV_KWARGS)
    test_env = agentrl.make("agentrl/Arithmetic-v0", **{**ENV_KWARGS, "split": "test"})
    corpus = [s for t in (env.sample_task(rng) for _ in range(2000)) for s in (t.prompt, t.answer)]
    path = tiny_model_dir(corpus)
    tok, model = load_tokenizer(path), load_causal_lm(path, device="cpu")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    test_tasks = [test_env.sample_task(rng) for _ in range(300)]

    # 1. a short supervised warm start on 500 reference answers (RL needs some successes)
    sft_tasks = [env.sample_task(rng) for _ in range(500)]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.sft_steps):
        batch = [sft_tasks[i] for i in rng.choice(len(sft_tasks), 64, replace=False)]
        prompts = [tok(t.prompt)["input_ids"] for t in batch]
        answers = [tok(t.answer)["input_ids"] + [eos] for t in batch]
        seqs, attn, mask = pack(prompts, answers, pad)
        loss = -(token_logprobs(model, seqs, attn) * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"after warm start: held-out accuracy {accuracy(model, tok, test_env, test_tasks):.3f}")

    # 2. GRPO: sample a group per prompt, normalise rewards within the group, clipped update
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = time.time()
    for step in range(1, args.steps + 1):
        tasks = [env.sample_task(rng) for _ in range(args.prompts)]
        prompts = [tok(t.prompt)["input_ids"] for t in tasks for _ in range(args.group)]
        responses = sample(model, prompts, 4, eos, pad)
        texts = [tok.decode(r, skip_special_tokens=True) for r in responses]
        rewards = rewards_for(env, [t for t in tasks for _ in range(args.group)], texts)
        adv = grpo_advantages(rewards, args.group)
        keep = (rewards.view(-1, args.group).std(dim=1) > 0).repeat_interleave(args.group)
        if keep.any():
            idx = keep.nonzero().squeeze(-1).tolist()
            seqs, attn, mask = pack([prompts[i] for i in idx], [responses[i] for i in idx], pad)
            logprobs = token_logprobs(model, seqs, attn)
            loss = grpo_loss(logprobs, logprobs.detach(), adv[idx], mask)  # on-policy: old = current
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        if step % 50 == 0:
            acc = accuracy(model, tok, test_env, test_tasks)
            print(f"step {step}: reward {rewards.mean():.3f}, held-out accuracy {acc:.3f}, "
                  f"{(time.time() - start) / step:.3f} s/step")


if __name__ == "__main__":
    main()
