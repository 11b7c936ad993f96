# An OpenRLHF reward file with plain lists (OpenRLHF turns them into tensors itself).
def reward_func(queries, prompts, labels, **kwargs):
    rewards = [1.0 if q[len(p):].strip() == str(label) else 0.1 for q, p, label in zip(queries, prompts, labels)]
    return {"rewards": rewards, "scores": rewards, "extra_logs": {"exact": rewards}}
