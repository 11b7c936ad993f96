"""The base classes of ``openrlhf.utils.agent``, so OpenRLHF agent files import without OpenRLHF.

:func:`install` puts this module into ``sys.modules`` as ``openrlhf.utils.agent`` (with empty
``openrlhf`` and ``openrlhf.utils`` parents) when the real package is not installed. Only the
interface an agent file uses is here: agentrl runs the episode loop itself
(:mod:`environments.adapters.openrlhf`), so :meth:`MultiTurnAgentExecutor.execute` is not called.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from abc import ABC, abstractmethod
from typing import Any


class AgentExecutorBase(ABC):
    """An agent executor: ``execute`` runs one episode in OpenRLHF (not used by agentrl)."""

    @abstractmethod
    async def execute(self, prompt: str, label: Any, sampling_params: Any, max_length: int,
                      hf_tokenizer: Any, llm_engine: Any) -> dict[str, Any]:
        raise NotImplementedError


class AgentInstanceBase(ABC):
    """One episode's environment: async ``reset(states)`` and ``step(states)``."""

    @abstractmethod
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return states

    @abstractmethod
    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError


class MultiTurnAgentExecutor(AgentExecutorBase):
    """Holds the agent instance class; agentrl's adapter runs the turns."""

    def __init__(self, agent_instance_cls: type) -> None:
        if not (isinstance(agent_instance_cls, type) and issubclass(agent_instance_cls, AgentInstanceBase)):
            raise TypeError("the agent instance class must subclass AgentInstanceBase")
        self.agent_instance_cls = agent_instance_cls

    async def execute(self, prompt: str, label: Any, sampling_params: Any, max_length: int,
                      hf_tokenizer: Any, llm_engine: Any) -> dict[str, Any]:
        raise NotImplementedError("agentrl runs OpenRLHF agent episodes itself (environments.adapters.openrlhf)")


def install() -> None:
    """Make ``import openrlhf.utils.agent`` find this module when OpenRLHF is not installed."""
    if "openrlhf.utils.agent" in sys.modules or importlib.util.find_spec("openrlhf") is not None:
        return
    root, utils = types.ModuleType("openrlhf"), types.ModuleType("openrlhf.utils")
    root.__path__, utils.__path__ = [], []  # packages, so submodule imports resolve
    root.utils, utils.agent = utils, sys.modules[__name__]
    sys.modules.update({"openrlhf": root, "openrlhf.utils": utils, "openrlhf.utils.agent": sys.modules[__name__]})
