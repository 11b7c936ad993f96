"""Stages before RL: SFT, reward model and DPO commands, their data, configs and shared runner."""
