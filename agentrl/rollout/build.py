"""Building the rollout side of a run from its config: the env, the model path (tiny or Hugging
Face), the engine, the sampling parameters and the executor. Constructors only wire; the training
loop lives in ``agentrl.training.trainer``."""

from __future__ import annotations

from typing import Any

from agentrl.config import RunConfig
from agentrl.env import (
    EnvError,
    TextEnv,
    fixed_tasks,
    has_reference_policy,
    make,
    reference_episode,
    register,
)
from agentrl.models import resolve_model_source, tiny_model_dir
from agentrl.rollout.context import ContextPolicy
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.env_pool import EnvPool, clone_env
from agentrl.rollout.executors import SingleTurnExecutor


def make_env(cfg: RunConfig, overrides: dict[str, Any] | None = None) -> TextEnv:
    """The configured env, with ``overrides`` on top of ``env.kwargs``."""
    for env_id, entry_point in cfg.env.register.items():
        register(env_id, entry_point)
    env = make(cfg.env.id, **{**cfg.env.kwargs, **(overrides or {})})
    if cfg.reward.fn:
        with_reward_fn(env, cfg.reward.fn)
    if cfg.env.remote:
        env = remote_env(cfg, env)
    return env


def remote_env(cfg: RunConfig, env: TextEnv) -> TextEnv:
    """``env`` with its episodes run on the ``env.remote`` servers (checked: reachable, serving ``env.id``)."""
    import os

    from agentrl.rollout.remote_env import EnvServerPool, RemoteEnv

    if cfg.reward.fn:
        raise EnvError("reward.fn replaces the env's score in this process; with env.remote the servers score "
                       "(give the reward to their env instead)")
    pool = EnvServerPool(list(cfg.env.remote), token=cfg.env.remote_token or os.environ.get("AGENTRL_ENV_TOKEN"),
                         env_id=cfg.env.id, timeout_s=cfg.env.step_timeout_s or 300.0,
                         retries=cfg.env.remote_retries)
    pool.check(max_turns=int(getattr(env, "max_turns", 1)), kwargs=cfg.env.kwargs)
    return RemoteEnv(env, pool)


def with_reward_fn(env: TextEnv, spec: str) -> TextEnv:
    """Replace ``env``'s score with the reward function ``spec`` (``reward.fn``: a name,
    ``module:function`` or ``FILE.py:FUNCTION`` of our, OpenRLHF's, verl's or TRL's signature)."""
    from rewards.registry import get_reward

    if type(env).step is not TextEnv.step and not hasattr(env, "inner"):
        raise EnvError(f"reward.fn replaces the score of single-turn envs (or a tool env's inner env); "
                         f"{type(env).__name__} scores in its own step")
    try:
        fn = get_reward(spec)
    except KeyError as e:
        raise EnvError(f"reward.fn: {e.args[0]}") from None
    target = getattr(env, "inner", env)
    target.score = fn  # the instance's score, so env.step (and copies of the env) call it
    if target is not env:
        env.score = fn
    return env


def tiny_corpus(env: TextEnv, n: int = 2000, seed: int = 0) -> list[str]:
    """Text the tiny tokenizer is trained on: prompts and reference answers of the env (a multi-turn env
    with a reference policy: also its episodes' actions and feedback, for the first 50 tasks, each under its
    own seed: the same ``seed`` gives the same corpus, so the same tokenizer and cached model)."""
    tasks = fixed_tasks(env, n, seed)
    out = []
    for i, t in enumerate(tasks):
        prompt = t.prompt if isinstance(t.prompt, str) else "\n".join(m["content"] for m in t.prompt)
        out.append(prompt)
        out.append(env.reference_answer(t))
        if getattr(env, "max_turns", 1) > 1 and has_reference_policy(env) and i < 50:
            played = clone_env(env)
            try:
                out += reference_episode(played, t, seed=seed + i)[0]
            except Exception:  # noqa: BLE001 - a broken reference policy is reported by the warm start
                pass
            finally:
                played.close()
    return out


def resolve_model_path(cfg: RunConfig, env: TextEnv) -> str:
    """``tiny`` -> the locally built (cached) tiny model dir; a named model or ``.gguf`` file -> its
    converted (cached) dir; anything else as given."""
    if cfg.model.path != "tiny":
        return resolve_model_source(cfg.model.path)
    t = cfg.model.tiny
    return str(tiny_model_dir(tiny_corpus(env, seed=cfg.data.seed), hidden_size=t.hidden_size,
                              num_layers=t.num_layers, num_heads=t.num_heads,
                              intermediate_size=t.intermediate_size, vocab_size=t.vocab_size,
                              max_position_embeddings=t.max_position_embeddings, seed=cfg.data.seed))


def engine_kind(cfg: RunConfig, model: Any, *, local_async: bool = False) -> str:
    """``hf`` or ``vllm``: ``rollout.engine`` with ``auto`` resolved for the model and batch. With
    ``local_async`` (rollout.async in one process: the engine lives in a forked rollout process or
    beside the learner, which vLLM cannot) ``auto`` takes ``hf`` and an explicit ``vllm`` is an error."""
    from agentrl.rollout.engines.choice import resolve_engine

    kind = resolve_engine(cfg.rollout.engine, cfg.data.prompts_per_step * cfg.rollout.n_samples, model=model)
    if kind == "vllm" and local_async:
        if cfg.rollout.engine == "vllm":
            raise ValueError("rollout.async with rollout.engine=vllm runs over Ray (cluster.mode=ray); here use hf")
        return "hf"
    return kind


def make_engine(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, *, local_async: bool = False) -> Any:
    """The rollout engine. ``hf`` shares the policy's model object (weight sync is free); ``auto`` picks
    the faster for the model and batch (``agentrl.rollout.engines.choice``; see :func:`engine_kind`)."""
    if engine_kind(cfg, model, local_async=local_async) == "hf":
        from agentrl.rollout.engines.hf import HFEngine

        return HFEngine(model, tokenizer, max_batch_size=cfg.rollout.max_batch_size)
    from agentrl.rollout.engines.vllm import VLLMEngine  # lazy: vllm is optional

    return VLLMEngine(model_path, seed=cfg.rl_seed, dtype=cfg.model.dtype)


def sampling_params(cfg: RunConfig, greedy: bool = False) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(max_new_tokens=r.max_new_tokens, temperature=0.0 if greedy else r.temperature,
                          top_p=r.top_p, top_k=r.top_k)


def make_executor(cfg: RunConfig, env: TextEnv, engine: Any, tokenizer: Any) -> Any:
    """Single-turn executor (multi-turn envs get the multi-turn one; black-box agents and raw-text
    feedback envs the executors of ``agentrl.rollout.executors.agent``)."""
    if callable(getattr(env, "agent_program", None)):
        from agentrl.rollout.executors.agent import BlackBoxExecutor

        return BlackBoxExecutor(env, engine, tokenizer, sampling_params(cfg), n_samples=cfg.rollout.n_samples,
                                chat_template=cfg.rollout.chat_template, stepwise=cfg.rollout.samples == "turn")
    if getattr(env, "raw_feedback", False):
        from agentrl.rollout.executors.agent import RawFeedbackExecutor

        return RawFeedbackExecutor(env, engine, tokenizer, sampling_params(cfg), n_samples=cfg.rollout.n_samples,
                                   chat_template=cfg.rollout.chat_template,
                                   max_total_tokens=cfg.rollout.max_total_tokens or None, pool=make_env_pool(cfg),
                                   context=context_policy(cfg, engine, tokenizer))
    if getattr(env, "max_turns", 1) > 1 or getattr(env, "remote_episodes", False):  # an episode per env copy
        from agentrl.rollout.executors.multi_turn import MultiTurnExecutor

        return MultiTurnExecutor(env, engine, tokenizer, sampling_params(cfg), n_samples=cfg.rollout.n_samples,
                                 chat_template=cfg.rollout.chat_template,
                                 max_total_tokens=cfg.rollout.max_total_tokens or None, pool=make_env_pool(cfg),
                                 context=context_policy(cfg, engine, tokenizer))
    return SingleTurnExecutor(env, engine, tokenizer, sampling_params(cfg), n_samples=cfg.rollout.n_samples,
                              chat_template=cfg.rollout.chat_template, pool=make_env_pool(cfg))


def make_env_pool(cfg: RunConfig) -> EnvPool:
    """Concurrent env steps: ``rollout.env_workers`` threads, ``env.step_timeout_s`` per step."""
    return EnvPool(workers=cfg.rollout.env_workers, timeout_s=cfg.env.step_timeout_s)


def model_context(engine: Any, tokenizer: Any) -> int:
    """The longest sequence the policy takes (0 when unknown): the model config's ``max_position_embeddings``
    (an ``hf`` engine's model), vLLM's ``max_model_len``, else the tokenizer's ``model_max_length``."""
    inner = getattr(engine, "engine", engine)  # a VersionedEngine holds the engine
    n = getattr(getattr(getattr(inner, "model", None), "config", None), "max_position_embeddings", None)
    if n is None:
        try:
            n = inner.llm.llm_engine.model_config.max_model_len
        except AttributeError:
            n = getattr(tokenizer, "model_max_length", None)
    return int(n) if isinstance(n, int) and 0 < n < 10_000_000 else 0


def context_policy(cfg: RunConfig, engine: Any, tokenizer: Any) -> ContextPolicy:
    """``rollout.context`` for the multi-turn executors: ``max_tokens`` 0 becomes the model's context."""
    c, turn = cfg.rollout.context, cfg.rollout.max_new_tokens
    limit = c.max_tokens or model_context(engine, tokenizer)
    if c.policy != "none" and not limit:
        raise ValueError(f"rollout.context.policy={c.policy}: the model's context length is unknown here; "
                         f"set rollout.context.max_tokens")
    if limit and c.policy != "none" and limit <= turn:
        raise ValueError(f"rollout.context.max_tokens={limit} leaves no room for a prompt and a turn of "
                         f"rollout.max_new_tokens={turn}")
    return ContextPolicy(c.policy, limit, turn, c.summary_tokens or turn, c.truncate_keep)
