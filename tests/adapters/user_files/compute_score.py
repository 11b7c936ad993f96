# A verl custom reward function (custom_reward_function.path / .name), as verl's docs write it.
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    correct = solution_str.strip() == str(ground_truth)
    return {"score": 1.0 if correct else 0.2, "length": float(len(solution_str))}
