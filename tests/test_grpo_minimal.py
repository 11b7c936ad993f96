"""The single-file reference and the library compute the same GRPO advantages and loss."""

import importlib.util
from pathlib import Path

import torch

from agentrl.algorithms import compute_advantages, policy_loss


def _load_example():
    path = Path(__file__).resolve().parents[1] / "examples" / "grpo_minimal.py"
    spec = importlib.util.spec_from_file_location("grpo_minimal", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_library_matches_grpo_minimal_on_a_fixed_batch():
    ref = _load_example()
    gen = torch.Generator().manual_seed(0)
    B, A, G = 16, 7, 4
    rewards = torch.randint(0, 2, (B,), generator=gen).float()
    mask = (torch.rand(B, A, generator=gen) > 0.3).float()
    mask[:, 0] = 1
    lp = (torch.randn(B, A, generator=gen) * 0.1).requires_grad_(True)
    old = lp.detach() + torch.randn(B, A, generator=gen) * 0.05

    adv_ref = ref.grpo_advantages(rewards, G, eps=1e-4)
    loss_ref = ref.grpo_loss(lp, old, adv_ref, mask)
    (g_ref,) = torch.autograd.grad(loss_ref, lp)

    adv_lib, _ = compute_advantages("group_norm", rewards, torch.arange(B) // G, mask, eps=1e-4)
    assert torch.allclose(adv_lib, adv_ref[:, None] * mask, atol=1e-5)
    loss_lib, _ = policy_loss(lp, old, adv_lib, mask, clip_low=0.2, clip_high=0.2, agg="token-mean")
    (g_lib,) = torch.autograd.grad(loss_lib, lp)
    assert torch.allclose(loss_lib, loss_ref, atol=1e-6)
    assert torch.allclose(g_lib, g_ref, atol=1e-7)
