"""``HFEngine``'s static decode loop (``agentrl.rollout.engines.static_decode``) against the transformers
forward per token it replaces: the same greedy tokens and log-probs, for Llama (multi-head and
grouped KV heads) and Qwen2 (q/k/v biases), with left-padded prompts, shared prompts (each one's keys
attended to once for all its rows, until too few rows are left) and rows that stop early (the batch is
compacted as they end)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agentrl.rollout.engines import SamplingParams, static_decode
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.engines.static_decode import SharedPromptCaches, _attend, _compact, supports

VOCAB, EOS = 96, 1


def tiny(kind: str, kv_heads: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    cfg = config_cls(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=128,
                     eos_token_id=EOS, pad_token_id=0, tie_word_embeddings=kind == "llama")
    torch.manual_seed(0)
    model = model_cls(cfg).eval()
    with torch.no_grad():  # sharper logits than the random init, so greedy choices are not near-ties
        model.lm_head.weight.mul_(8.0)
    return model


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    distinct = [torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (3, 7, 5, 1)]
    return [p for p in distinct for _ in range(3)] + [[5, 6, 7, 8]]


def grouped_prompts() -> list[list[int]]:
    """4 distinct prompts (1 to 9 tokens, left-padded to 9), 16 rows: 6, 5, 1 and 4 rows each."""
    g = torch.Generator().manual_seed(2)
    distinct = [torch.randint(2, VOCAB, (n,), generator=g).tolist() for n in (9, 4, 1, 6)]
    return [p for p, k in zip(distinct, (6, 5, 1, 4)) for _ in range(k)]


def both(engine: HFEngine, ps: list[list[int]], params: SamplingParams) -> tuple[list, list]:
    engine.static = False
    ref = engine.generate(ps, params)
    engine.static = True
    return ref, engine.generate(ps, params)


@pytest.mark.parametrize("kind,kv_heads", [("llama", 4), ("llama", 2), ("qwen2", 2)])
def test_greedy_matches_transformers_forward(kind, kv_heads):
    engine = HFEngine(tiny(kind, kv_heads), SimpleNamespace(eos_token_id=EOS, pad_token_id=0))
    assert engine.static and supports(engine.model)
    ps = prompts()
    ref, new = both(engine, ps, SamplingParams(max_new_tokens=24, temperature=0.0))
    assert [c.token_ids for c in new] == [c.token_ids for c in ref]
    assert [c.finish_reason for c in new] == [c.finish_reason for c in ref]
    for a, b in zip(new, ref):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    # stop on tokens the greedy answers contain: rows end at different steps and the batch compacts
    seen = [t for c in ref for t in c.token_ids[2:6]]
    stops = tuple(sorted(set(seen), key=seen.count)[-3:])
    params = SamplingParams(max_new_tokens=24, temperature=0.0, stop_token_ids=stops)
    ref, new = both(engine, ps, params)
    assert engine._decoder.compactions >= 1
    assert any(c.finish_reason == "stop" for c in ref) and any(len(c.token_ids) > 6 for c in ref)
    assert [c.token_ids for c in new] == [c.token_ids for c in ref]
    for a, b in zip(new, ref):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


@pytest.mark.parametrize("kind,kv_heads", [("llama", 4), ("llama", 2), ("qwen2", 2)])
def test_shared_prompts_decode_greedy_like_the_forward(kind, kv_heads):
    """Rows sharing a prompt attend to its keys once (uneven rows per prompt, left-padded prompts): the
    same greedy tokens and log-probs as the transformers forward."""
    engine = HFEngine(tiny(kind, kv_heads), SimpleNamespace(eos_token_id=EOS, pad_token_id=0))
    ref, new = both(engine, grouped_prompts(), SamplingParams(max_new_tokens=20, temperature=0.0))
    assert engine._decoder.shared_steps == 19  # no row ended: shared to the end
    assert [c.token_ids for c in new] == [c.token_ids for c in ref]
    for a, b in zip(new, ref):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


@pytest.mark.parametrize("kind,kv_heads", [("llama", 4), ("llama", 2), ("qwen2", 2)])
def test_shared_prompt_sampling_equals_the_per_row_caches(monkeypatch, kind, kv_heads):
    """Sampled rows of shared prompts under a seed, rows ending at different steps: while enough rows are
    left per prompt its keys are attended to once, then the live rows' caches become per-row ones
    mid-decode. The same tokens and log-probs as per-row caches from the start, each log-prob the
    teacher-forced one."""
    model = tiny(kind, kv_heads)
    engine = HFEngine(model, SimpleNamespace(eos_token_id=EOS, pad_token_id=0))
    ps, temp = grouped_prompts(), 2.0
    free = engine.generate(ps, SamplingParams(max_new_tokens=16, temperature=temp, seed=5))
    # the stop: of the tokens no row samples first or second, the one that first appears at steps 2-5 in the
    # most rows (those rows end there)
    early = {t for c in free for t in c.token_ids[:2]}
    firsts = [t for c in free for j, t in enumerate(c.token_ids)
              if 2 <= j <= 5 and t not in c.token_ids[:j] and t not in early]
    params = SamplingParams(max_new_tokens=16, temperature=temp, seed=5, stop_token_ids=(max(firsts, key=firsts.count),))
    shared = engine.generate(ps, params)
    lengths = sorted({len(c.token_ids) for c in shared})
    assert len(lengths) > 2 and lengths[0] > 1 and lengths[-1] == 16, lengths  # rows end at different steps
    assert 0 < engine._decoder.shared_steps < 15 and engine._decoder.compactions >= 1  # shared, then per row
    monkeypatch.setattr(static_decode, "SHARED_MIN_ROWS", 10**6)
    rows = engine.generate(ps, params)
    assert engine._decoder.shared_steps == 0
    assert [c.token_ids for c in shared] == [c.token_ids for c in rows]
    assert len({tuple(c.token_ids) for c in shared[:6]}) > 1  # a prompt's rows sampled apart
    for p, c, r in zip(ps, shared, rows):
        assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(r.logprobs), atol=1e-5)
        seq = torch.tensor([p + c.token_ids])
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, len(p) - 1:-1].float() / temp
        want = logits.log_softmax(-1).gather(-1, seq[0, len(p):, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-4)


def test_sampling_is_seeded_and_scored_like_the_forward():
    """Sampled tokens repeat under a seed; each log-prob is the teacher-forced one at temperature 0.7."""
    model = tiny("llama", 2)
    engine = HFEngine(model, SimpleNamespace(eos_token_id=EOS, pad_token_id=0))
    ps, params = prompts(), SamplingParams(max_new_tokens=16, temperature=0.7, seed=3, stop_token_ids=(2, 3, 4))
    first, again = engine.generate(ps, params), engine.generate(ps, params)
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    for p, c in zip(ps, first):
        seq = torch.tensor([p + c.token_ids])
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, len(p) - 1:-1].float() / 0.7
        want = logits.log_softmax(-1).gather(-1, seq[0, len(p):, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-4)


def test_unsupported_models_keep_the_transformers_step():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    assert not supports(model)
    engine = HFEngine(model, SimpleNamespace(eos_token_id=EOS, pad_token_id=0))
    assert not engine.static


def test_lora_model_decodes_with_its_adapters_merged():
    """A peft LoRA policy (adapters on every linear layer, the LM head and the embedding of a Qwen2 with
    q/k/v biases) decodes on the static loop:
    the same greedy tokens and log-probs as the peft forward per token, again after an in-place update
    of the adapters, and the base model's tokens with the adapters disabled."""
    import peft

    base = tiny("qwen2", 2)
    plain = [c.token_ids for c in HFEngine(base, SimpleNamespace(eos_token_id=EOS, pad_token_id=0)).generate(
        prompts(), SamplingParams(max_new_tokens=12, temperature=0.0))]
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                              "up_proj", "down_proj", "embed_tokens", "lm_head"])
    model = peft.get_peft_model(base, cfg).eval()
    engine = HFEngine(model, SimpleNamespace(eos_token_id=EOS, pad_token_id=0))
    assert engine.static
    params, g = SamplingParams(max_new_tokens=12, temperature=0.0), torch.Generator().manual_seed(2)
    for _ in range(2):  # a fresh delta, then the cache of fused weights must notice the in-place update
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name or "lora_embedding_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        ref, new = both(engine, prompts(), params)
        assert [c.token_ids for c in new] == [c.token_ids for c in ref]
        for a, b in zip(new, ref):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert [c.token_ids for c in new] != plain  # the adapters changed the answers
    with model.disable_adapter():
        assert [c.token_ids for c in engine.generate(prompts(), params)] == plain


def test_sampler_draws_each_token_at_its_probability_and_never_a_truncated_one():
    """``_sample`` on fixed logits, 200,000 rows: each token's frequency is within 4 standard errors of
    its probability; top-k and top-p leave the cut tokens at exactly zero draws."""
    from agentrl.rollout.engines.hf import _sample

    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]]).repeat(200_000, 1)
    torch.manual_seed(0)
    for params, keep in [(SamplingParams(temperature=0.8), 6), (SamplingParams(temperature=1.0, top_k=3), 3),
                         (SamplingParams(temperature=1.0, top_p=0.7), 2)]:
        tok, lp = _sample(logits, params)
        p = torch.softmax(logits[0] / params.temperature, -1)
        p = torch.where(torch.arange(6) < keep, p, torch.zeros_like(p))
        p = p / p.sum()
        freq = torch.bincount(tok, minlength=6).double() / len(tok)
        se = (p * (1 - p) / len(tok)).sqrt().double()
        assert (freq[keep:] == 0).all()
        assert ((freq - p.double()).abs() <= 4 * se + 1e-12).all(), (params, freq, p)
        want = torch.log_softmax(logits[0] / params.temperature, -1)[tok]
        assert torch.allclose(lp, want)


def test_compaction_moves_only_the_live_rows_behind_the_front_into_the_ended_rows_slots():
    B, H, S, D, filled = 6, 2, 5, 3, 3
    K = torch.arange(B * H * S * D, dtype=torch.float32).view(B, H, S, D)
    V = -K.clone()
    before_K, before_V = K.clone(), V.clone()
    done = torch.tensor([False, True, False, True, False, False])  # 4 live: rows 4 and 5 move to 1 and 3
    order = _compact([(K, V)], done, filled)
    assert order.tolist() == [0, 4, 2, 5]
    for new, old in enumerate(order.tolist()):  # the first 4 rows hold the live rows' filled positions
        assert torch.equal(K[new, :, :filled], before_K[old, :, :filled])
        assert torch.equal(V[new, :, :filled], before_V[old, :, :filled])
    for row in (0, 2, 4, 5):  # rows not written: the live rows in place, and the movers' old slots
        assert torch.equal(K[row], before_K[row])
    for row in (1, 3):  # unfilled positions are not copied (the decode writes them before reading)
        assert torch.equal(K[row, :, filled:], before_K[row, :, filled:])
    none_done = torch.zeros(3, dtype=torch.bool)
    assert _compact([(K[:3], V[:3])], none_done, filled).tolist() == [0, 1, 2]


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_one_query_attention_equals_sdpa_with_its_mask(heads, kv_heads):
    g = torch.Generator().manual_seed(0)
    b, L, hd = 3, 7, 8
    q = torch.randn(b, heads, hd, generator=g)
    K, V = torch.randn(b, kv_heads, L, hd, generator=g), torch.randn(b, kv_heads, L, hd, generator=g)
    am = torch.zeros(b, 1, 1, L)
    am[0, ..., :2] = float("-inf")  # a left-padded row
    ref = torch.nn.functional.scaled_dot_product_attention(q[:, :, None], K, V, attn_mask=am,
                                                           enable_gqa=kv_heads != heads)[:, :, 0]
    assert torch.allclose(_attend(q, K, V, am), ref, atol=1e-6)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_shared_prompt_attention_equals_per_row_attention(heads, kv_heads):
    """``SharedPromptCaches.attend`` against ``_attend`` over each row's own copy of its prompt's keys then
    its new ones, on random tensors: uneven rows per prompt (one prompt of one row), left-padded prompts
    (one all but its last position), rows compacted away, and after ``as_rows`` the same per-row caches."""
    g = torch.Generator().manual_seed(0)
    U, W, S, hd, n_layers = 3, 6, 5, 8, 2
    past = [(torch.randn(U, kv_heads, W, hd, generator=g), torch.randn(U, kv_heads, W, hd, generator=g))
            for _ in range(n_layers)]
    groups = torch.tensor([1, 0, 1, 2, 1, 0])
    umask = torch.ones(U, W, dtype=torch.long)
    umask[0, :2] = 0
    umask[2, :W - 1] = 0
    kv = SharedPromptCaches(past, n_layers, umask[groups], groups, S, heads)
    rows = torch.arange(len(groups))
    K_all = [torch.zeros(len(groups), kv_heads, W + S, hd) for _ in range(n_layers)]
    V_all = [torch.zeros(len(groups), kv_heads, W + S, hd) for _ in range(n_layers)]
    for i in range(n_layers):
        K_all[i][:, :, :W], V_all[i][:, :, :W] = past[i][0][groups], past[i][1][groups]
    am = torch.zeros(len(groups), 1, 1, W + S)
    am[..., :W].masked_fill_(~umask[groups].bool()[:, None, None], float("-inf"))
    for step in range(S):
        if step == 2:  # rows 1 and 3 end (row 3 is prompt 2's only row): the rest move to the front
            done = torch.zeros(len(rows), dtype=torch.bool)
            done[[1, 3]] = True
            rows = rows[kv.compact(done, step)]
            assert sorted(rows.tolist()) == [0, 2, 4, 5]
        if step == 3:
            kv = kv.as_rows(step)
        kv.at(step)
        for i in range(n_layers):
            q = torch.randn(len(rows), heads, hd, generator=g)
            k, v = torch.randn(len(rows), kv_heads, hd, generator=g), torch.randn(len(rows), kv_heads, hd, generator=g)
            K_all[i][rows, :, W + step], V_all[i][rows, :, W + step] = k, v
            L = W + step + 1
            want = _attend(q, K_all[i][rows, :, :L], V_all[i][rows, :, :L], am[rows, ..., :L])
            assert torch.allclose(kv.attend(i, q, k, v), want, atol=1e-5), (step, i)
