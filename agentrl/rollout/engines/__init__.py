"""Inference engines behind one protocol: ``hf`` (transformers, embedded default) and ``vllm``."""

from agentrl.rollout.engines.base import Completion, InferenceEngine, SamplingParams

__all__ = ["Completion", "InferenceEngine", "SamplingParams"]
