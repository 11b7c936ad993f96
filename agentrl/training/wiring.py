"""The components a :class:`agentrl.training.trainer.Trainer` builds, one method each, so that the Ray
trainer (``agentrl.distributed.trainer.RayTrainer``) overrides only these and the step reads the same."""

from __future__ import annotations

import copy
from typing import Any

from agentrl.rollout.async_rollout import VersionedEngine
from agentrl.rollout.build import make_engine
from agentrl.rollout.worker_process import make_rollouts
from agentrl.training.learner import FrozenModel, PolicyLearner
from agentrl.training.lora import is_lora, plain_copy, policy_weights
from agentrl.training.scoring import remote_reward_client, reward_model_scorer


class TrainerWiring:
    """The ``build_*`` methods of the trainer (they read ``self.cfg``, ``self.model``, ``self.tokenizer``,
    ``self.model_path``, ``self.produce``, ``self.engine``, ``self.env``, ``self.executor``, ``self.version``)."""

    cfg: Any
    model: Any
    tokenizer: Any
    model_path: str
    engine: Any
    env: Any
    executor: Any
    version: int

    def build_reference(self) -> Any:
        """A frozen copy of the initial policy, when the KL is used (``.logprobs(exp) -> (B,A)``)."""
        if self.cfg.algo.kl_mode == "none":
            return None
        kw = dict(temperature=self.cfg.rollout.temperature, call_tokens=self.cfg.learner.call_tokens)
        if is_lora(self.model):  # the base weights themselves, scored with the adapters off
            return FrozenModel(self.model, self.cfg.learner.micro_batch_size, disable_adapters=True, **kw)
        return FrozenModel(copy.deepcopy(self.model), self.cfg.learner.micro_batch_size, **kw)

    def build_critic(self) -> Any:
        """The value model for ``gae`` (``.values(exp)``, ``.train_step(exp)``); None otherwise."""
        if self.cfg.algo.estimator != "gae":
            return None
        from agentrl.training.critic import Critic

        return Critic.from_config(self.cfg, self.model_path)

    def build_engine(self) -> Any:
        """The rollout engine; with rollout.async it holds its own copy of the weights, with their version."""
        if not self.cfg.rollout.async_:
            return make_engine(self.cfg, self.model, self.tokenizer, self.model_path)
        return VersionedEngine(make_engine(self.cfg, plain_copy(self.model), self.tokenizer, self.model_path,
                                           local_async=True))  # RayTrainer builds its engines as actors

    def build_rollouts(self) -> Any:
        """``produce()`` inline, or on a rollout worker (process) at most rollout.max_staleness versions ahead."""
        return make_rollouts(self.cfg.rollout, self.produce, self.engine, self.version,
                             lambda: policy_weights(self.model), getattr(self.executor, "pool", None))

    def build_guide(self) -> Any:
        """``play(tasks) -> trajectories``: the env's reference episodes for ``algo.guide``
        (:mod:`agentrl.training.guidance`) on an executor of their own; None when it is off."""
        if not self.cfg.algo.guide:
            return None
        from agentrl.rollout.build import make_executor, sampling_params
        from agentrl.rollout.executors import SingleTurnExecutor
        from agentrl.training.guidance import reference_player

        cfg, env, tok = self.cfg, self.env, self.tokenizer
        executor = make_executor(cfg, env, self.engine, tok)
        engine = self.engine

        def single(answers: Any) -> Any:
            answers.version = getattr(engine, "version", None)  # as the policy's samples of this step
            return SingleTurnExecutor(env, answers, tok, sampling_params(cfg), chat_template=cfg.rollout.chat_template,
                                      pool=getattr(self.executor, "pool", None))

        return reference_player(env, None if isinstance(executor, SingleTurnExecutor) else executor, tok, single)

    def build_learner(self) -> Any:
        return PolicyLearner(self.model, self.cfg.learner, self.cfg.algo, temperature=self.cfg.rollout.temperature,
                             max_new_tokens=self.cfg.rollout.max_new_tokens)

    def build_remote_reward(self) -> Any:
        """The reward server client when ``reward.remote_url`` is set (``rewards.client.RemoteReward``)."""
        return remote_reward_client(self.cfg.reward)

    def build_reward_model(self) -> Any:
        """Scores samples the env could not verify (``.score(trajectories) -> list[float]``)."""
        return reward_model_scorer(self.cfg, self.tokenizer)
