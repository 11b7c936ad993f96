# A TRL reward function (GRPOTrainer(reward_funcs=[...])), as TRL's docs write them.
def exact_match_reward(prompts, completions, answer, **kwargs):
    return [1.0 if c.strip() == str(a) else 0.3 for c, a in zip(completions, answer)]
