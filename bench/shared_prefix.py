"""Benchmark: the learner's forward/backward over a GRPO batch whose prompts differ but begin with one system
prompt, that prompt run once for all of them vs once per distinct prompt, interleaved in one process.

    python bench/shared_prefix.py [--system 85 400] [--prompts 16] [--group 8] [--rounds 6] [--threads 1]

The batch is shaped like terminal_tiny's (16 prompts x 8 samples, 22-40 tokens of each prompt its own, 60-85
response tokens) on the tiny model's Llama; ``--system`` sets the shared system prompt's length (85: the config's;
a default Terminal-v0 prompt listing the tools' JSON schemas is several hundred). Both sides share each
distinct prompt within its group (``sequence_logprobs(prompt_lens=...)``); "once per prompt" turns the
cross-prompt sharing off (``SHARED_PREFIX_MIN`` above any length). CPU seconds (``time.process_time``), the
median of the rounds after the first.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def batch(system: int, prompts: int, group: int, seed: int = 0):
    """(sequences, attention_mask, action_mask, prompt_lens) of a right-padded GRPO batch."""
    from agentrl.training.experience import Experience
    from agentrl.training.packing import prompt_lengths
    from agentrl.types import Segment, Trajectory

    rng = random.Random(seed)
    head = [rng.randrange(2, 1024) for _ in range(system)]
    trajs = []
    for g in range(prompts):
        own = [rng.randrange(2, 1024) for _ in range(rng.randint(22, 40))]
        for _ in range(group):
            resp = [rng.randrange(2, 1024) for _ in range(rng.randint(60, 85))]
            trajs.append(Trajectory(prompt_ids=head + own, segments=[Segment(resp, True)], reward=0.0, task_id="",
                                    group_id=g))
    e = Experience.from_trajectories(trajs, 1)
    return e.sequences, e.attention_mask, e.action_mask, prompt_lengths(e.action_mask, e.attention_mask)


def measure(system: int, prompts: int, group: int, rounds: int) -> dict[str, tuple[float, float]]:
    """{"once per prompt" | "once": (fwd+bwd CPU s, forward CPU s)}, medians over rounds 2..n."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import agentrl.training.packing as packing
    from agentrl.training.learner import sequence_logprobs

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                                         tie_word_embeddings=True, pad_token_id=1, eos_token_id=0))
    seq, mask, amask, plens = batch(system, prompts, group)
    minimum = packing.SHARED_PREFIX_MIN

    def run(once: bool) -> tuple[float, float]:
        packing.SHARED_PREFIX_MIN = minimum if once else 10**9
        t = time.process_time()
        lp, _ = sequence_logprobs(model, seq, mask, prompt_lens=plens)
        (-(lp * amask).sum()).backward()
        model.zero_grad()
        train = time.process_time() - t
        t = time.process_time()
        with torch.no_grad():
            sequence_logprobs(model, seq, mask, prompt_lens=plens)
        return train, time.process_time() - t

    out: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    try:
        for r in range(rounds):
            for once in ((False, True) if r % 2 == 0 else (True, False)):
                out[once].append(run(once))
    finally:
        packing.SHARED_PREFIX_MIN = minimum
    return {("once" if k else "once per prompt"): (statistics.median(x[0] for x in v[1:]),
                                                   statistics.median(x[1] for x in v[1:])) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", type=int, nargs="+", default=[85, 400])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print("| system prompt tokens | fwd+bwd CPU s: per prompt / once | ratio | forward CPU s: per prompt / once | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for system in args.system:
        r = measure(system, args.prompts, args.group, max(2, args.rounds))
        (a, fa), (b, fb) = r["once per prompt"], r["once"]
        print(f"| {system} | {a:.3f} / {b:.3f} | {b / a:.2f}x | {fa:.3f} / {fb:.3f} | {fb / fa:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
