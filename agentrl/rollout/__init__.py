"""Rollout: inference engines (hf, vllm), executors that turn envs into token-exact trajectories, dynamic sampling, and building them from a config."""
