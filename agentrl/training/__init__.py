"""Training: experience batches, the policy learner, critic, packing, reward-model scorer, supervised loop, warm start, and the RL driver."""
