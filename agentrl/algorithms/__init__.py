"""RL math as small pure tensor functions (torch only): advantage estimators, turn-level credit, losses, KL.

Shapes: B samples, A = T-1 action positions. ``mask`` (B,A) is 1 on tokens the policy generated.
"""

from agentrl.algorithms.advantages import (
    ESTIMATORS,
    compute_advantages,
    discounted_returns,
    dr_grpo_scores,
    episode_scores,
    gae,
    group_norm_scores,
    reinforce_baseline_scores,
    rloo_scores,
    token_level_rewards,
    weight_negative,
)
from agentrl.algorithms.kl import KL_ESTIMATORS, AdaptiveKLController, FixedKLController, kl_penalty
from agentrl.algorithms.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    agg_loss,
    cispo_loss,
    entropy_from_logits,
    masked_mean,
    masked_whiten,
    policy_loss,
    sapo_loss,
    value_loss,
)
from agentrl.algorithms.offpolicy import (
    correction_weights,
    mis_keep,
    mismatch_metrics,
    staleness_metrics,
    tis_weights,
)
from agentrl.algorithms.preference import (
    dpo_loss,
    reward_model_loss,
    sft_loss,
)
from agentrl.algorithms.turn_credit import (
    TURN_ESTIMATORS,
    compute_turn_advantages,
    episode_turn_scores,
    scatter_turns,
    step_group_scores,
    turn_returns,
    turn_scores,
)

__all__ = [
    "AGGREGATIONS", "ESTIMATORS", "KL_ESTIMATORS", "AdaptiveKLController", "FixedKLController",
    "agg_loss", "compute_advantages", "discounted_returns", "dpo_loss", "dr_grpo_scores",
    "entropy_from_logits", "gae", "group_norm_scores", "kl_penalty", "masked_mean", "masked_whiten",
    "policy_loss", "reinforce_baseline_scores", "reward_model_loss", "rloo_scores", "sft_loss",
    "token_level_rewards", "value_loss",
    "POLICY_LOSSES", "cispo_loss", "sapo_loss", "correction_weights", "mis_keep", "mismatch_metrics",
    "staleness_metrics", "tis_weights",
    "TURN_ESTIMATORS", "compute_turn_advantages", "episode_scores", "episode_turn_scores", "scatter_turns",
    "step_group_scores", "turn_returns", "turn_scores", "weight_negative",
]
