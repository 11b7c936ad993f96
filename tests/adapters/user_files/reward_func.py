# An OpenRLHF reward file (--remote_rm_url reward_func.py), as OpenRLHF's examples write it.
import torch


def reward_func(queries, prompts, labels, **kwargs):
    # queries is prompts + responses
    rewards = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt):]
        rewards.append(1.0 if response.strip() == str(label) else 0.1)  # 0.1 for trying
    reward = torch.tensor(rewards)
    return {"rewards": reward, "scores": reward, "extra_logs": {"exact": reward}}
