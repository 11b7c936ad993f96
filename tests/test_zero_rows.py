"""The update skips samples whose loss is exactly zero (``trained_rows``): every action token's advantage 0
(the below-baseline samples under ``algo.neg_adv_weight: 0``, groups whose rewards all agree) and no term
without the advantage (entropy bonus, KL loss). The normalisers stay the mini-batch's, so the gradient is
the plain update's, for every policy loss and aggregation; a spy shows the skipped rows are never run."""

from __future__ import annotations

import copy

import pytest
import torch

import agentrl.training.learner as learner_mod
from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.models import load_causal_lm, load_tokenizer
from agentrl.training.experience import Experience
from agentrl.training.learner import PolicyLearner, trained_rows
from agentrl.types import Segment, Trajectory


def hand_exp(adv: list[list[float]], mask: list[list[int]]) -> Experience:
    a, m = torch.tensor(adv), torch.tensor(mask)
    B, A = a.shape
    exp = Experience(sequences=torch.zeros(B, A + 2, dtype=torch.long), attention_mask=torch.ones(B, A + 2),
                     action_mask=m, rewards=torch.zeros(B), group_ids=torch.zeros(B, dtype=torch.long))
    exp.advantages = a
    return exp


def test_trained_rows_by_hand() -> None:
    mask = [[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]]
    # row 0: advantage only under the mask's 0 (padding): skipped; row 1 live; row 2 zero; row 3 no action
    exp = hand_exp([[0.0, 0.0, 2.0], [0.0, -0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], mask)
    algo = AlgoConfig()
    assert trained_rows(exp, algo, 0.0).tolist() == [1]
    # every row live, or none: None (all are run, as before; a zero step keeps the optimizer's own behaviour)
    assert trained_rows(hand_exp([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]],
                                 [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]]), algo, 0.0).tolist() == [0, 1, 2]
    assert trained_rows(hand_exp([[1.0], [2.0]], [[1], [1]]), algo, 0.0) is None
    assert trained_rows(hand_exp([[0.0], [0.0]], [[1], [1]]), algo, 0.0) is None
    # a NaN advantage is not zero: that row runs (and the loss shows the NaN)
    assert trained_rows(hand_exp([[float("nan")], [0.0]], [[1], [1]]), algo, 0.0).tolist() == [0]
    # terms without the advantage: the entropy bonus, a KL loss with a coefficient and reference log-probs
    assert trained_rows(exp, AlgoConfig(entropy_coef=0.01), 0.0) is None
    exp.ref_logprobs = torch.zeros(4, 3)
    assert trained_rows(exp, AlgoConfig(kl_mode="loss"), 0.1) is None
    assert trained_rows(exp, AlgoConfig(kl_mode="loss"), 0.0).tolist() == [1]  # coefficient 0: no KL term
    assert trained_rows(exp, AlgoConfig(kl_mode="reward"), 0.1).tolist() == [1]  # KL is in the advantages


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    path, _ = tiny_arith
    return load_causal_lm(path, device="cpu"), load_tokenizer(path)


def batch(tok, pattern: str, seed: int) -> Experience:
    """Three groups of 5 samples, responses 1-30 tokens, random advantages; ``pattern`` zeroes some rows:
    ``below`` the below-mean samples (neg_adv_weight 0), ``group`` a whole group (rewards that agree),
    ``one`` all but one row."""
    g = torch.Generator().manual_seed(seed)
    trajs = []
    for gid, prompt in enumerate(["12+34=", "7+8=", "90+9="]):
        p = tok(prompt)["input_ids"]
        for k in torch.randint(1, 31, (5,), generator=g).tolist():
            resp = torch.randint(3, len(tok), (k,), generator=g).tolist()
            trajs.append(Trajectory(prompt_ids=p, segments=[Segment(resp, True, (-torch.rand(k, generator=g)).tolist())],
                                    reward=0.0, group_id=gid, task_id=str(gid)))
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)
    per_row = torch.randn(len(trajs), generator=g)
    if pattern == "below":
        per_row = per_row.clamp(min=0)
    elif pattern == "group":
        per_row[5:10] = 0
    elif pattern == "one":
        per_row[torch.arange(len(trajs)) != 7] = 0
    exp.advantages = per_row[:, None] * exp.action_mask
    if pattern != "one":  # off the current policy: ratios and clipping take part (one row could be all clipped)
        exp.old_logprobs = exp.action_mask * -0.5
    return exp


def sgd_step(model, exp: Experience, algo: AlgoConfig, learner_cfg: LearnerConfig) -> tuple[torch.Tensor, dict]:
    m = copy.deepcopy(model)
    learner = PolicyLearner(m, learner_cfg, algo, max_new_tokens=30)
    learner.optimizer = torch.optim.SGD(m.parameters(), lr=1.0)  # parameters move by exactly -grad
    learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
    before = [p.detach().clone() for p in m.parameters()]
    metrics = learner.train_step(exp)
    return torch.cat([(b - p.detach()).flatten() for b, p in zip(before, m.parameters())]), metrics


CASES = [("ppo", "token-mean", "below"), ("ppo", "seq-mean-token-mean", "group"),
         ("ppo", "seq-mean-token-sum-norm", "one"), ("cispo", "token-mean", "below"),
         ("sapo", "seq-mean-token-sum", "group"), ("ppo", "token-mean", "group")]


@pytest.mark.parametrize("loss, agg, pattern", CASES)
@pytest.mark.parametrize("micro", [256, 4])
def test_skipping_zero_rows_gives_the_plain_gradient(tiny, monkeypatch, loss, agg, pattern, micro) -> None:
    model, tok = tiny
    exp = batch(tok, pattern, seed=len(pattern) + micro)
    algo = AlgoConfig(policy_loss=loss, loss_agg=agg, dual_clip=3.0 if loss == "ppo" else None)
    cfg = LearnerConfig(grad_clip=0.0, micro_batch_size=micro, call_tokens=0)
    live = trained_rows(exp, algo, 0.0)
    assert live is not None and 0 < len(live) < len(exp)
    run_rows: list[int] = []
    real = learner_mod.sequence_logprobs

    def spy(model, sequences, *a, **kw):
        run_rows.append(sequences.shape[0])
        return real(model, sequences, *a, **kw)

    monkeypatch.setattr(learner_mod, "sequence_logprobs", spy)
    skipped, m_skip = sgd_step(model, exp, algo, cfg)
    assert sum(run_rows) == len(live)  # only the live rows went through the model
    run_rows.clear()
    monkeypatch.setattr(learner_mod, "trained_rows", lambda *a: None)
    plain, m_plain = sgd_step(model, exp, algo, cfg)
    assert sum(run_rows) == len(exp)
    assert plain.abs().max() > 0
    torch.testing.assert_close(skipped, plain, atol=1e-6, rtol=1e-5)
    assert m_skip["policy_loss"] == pytest.approx(m_plain["policy_loss"], abs=1e-6)


def test_an_entropy_bonus_runs_every_row_and_no_live_row_runs_them_all(tiny, monkeypatch) -> None:
    model, tok = tiny
    runs: list[int] = []
    real = learner_mod.sequence_logprobs
    monkeypatch.setattr(learner_mod, "sequence_logprobs",
                        lambda m, s, *a, **kw: (runs.append(s.shape[0]), real(m, s, *a, **kw))[1])
    exp = batch(tok, "below", seed=5)
    sgd_step(model, exp, AlgoConfig(entropy_coef=0.01), LearnerConfig(grad_clip=0.0, call_tokens=0))
    assert sum(runs) == len(exp)
    runs.clear()
    exp.advantages = torch.zeros_like(exp.advantages)
    delta, metrics = sgd_step(model, exp, AlgoConfig(), LearnerConfig(grad_clip=0.0, call_tokens=0))
    assert sum(runs) == len(exp) and delta.abs().max() == 0 and metrics["entropy"] > 0
