"""The Ray actors: plain classes (``ActorGroup`` makes them remote), each wrapping a library object.

- ``PolicyWorker``: one data-parallel rank (a :class:`Strategy` + :class:`ShardedPolicyLearner`);
  serves sharded log-probs, the update, and its weights for the sync.
- ``EngineWorker``: one rollout engine (``VLLMEngine`` or ``HFEngine``).
- ``ObjectWorker``: any object built by a factory below (reference, critic, reward model); the
  driver calls its methods by name.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

from agentrl.config import RunConfig
from agentrl.training.experience import Experience


def _setup_process(threads: int) -> None:
    from agentrl.models import quiet_library_output

    torch.set_num_threads(threads)
    quiet_library_output()  # an actor's output reaches the driver's terminal: no loading bars there either


def free_address() -> tuple[str, int]:
    """This node's IP and a free TCP port (rendezvous of a process group)."""
    import ray

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return ray.util.get_node_ip_address(), port


class PolicyWorker:
    """Rank ``rank`` of the policy's data-parallel group; ``setup`` joins the process group."""

    def __init__(self, cfg: RunConfig, model_path: str, *, rank: int, world_size: int, threads: int) -> None:
        _setup_process(threads)
        self.cfg, self.model_path, self.rank, self.world_size = cfg, model_path, rank, world_size

    def address(self) -> tuple[str, int]:
        return free_address()

    def setup(self, master_addr: str, master_port: int) -> None:
        """Join the group (all ranks call this concurrently) and build model, strategy, learner."""
        from agentrl.distributed.strategies import make_strategy
        from agentrl.distributed.strategies.learner import ShardedPolicyLearner
        from agentrl.models import load_causal_lm

        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port), RANK=str(self.rank),
                          WORLD_SIZE=str(self.world_size), LOCAL_RANK="0")
        c, cfg = self.cfg.cluster, self.cfg
        strategy = make_strategy(c.strategy, zero_stage=c.zero_stage, offload_optimizer=c.offload_optimizer,
                                 offload_params=c.offload_params, grad_clip=cfg.learner.grad_clip,
                                 dtype=cfg.model.dtype)
        model = load_causal_lm(self.model_path, dtype=cfg.model.dtype, device="cpu",
                               trust_remote_code=cfg.model.trust_remote_code)
        from agentrl.training.lora import apply_lora

        self.peft = model = apply_lora(model, cfg.learner.lora)  # learner.lora.r > 0: only adapters train
        self.strategy = strategy
        self.learner = ShardedPolicyLearner(model, cfg.learner, cfg.algo, strategy,
                                            temperature=cfg.rollout.temperature,
                                            max_new_tokens=cfg.rollout.max_new_tokens)

    def logprobs(self, exp: Experience) -> torch.Tensor:
        return self.learner.logprobs(exp)

    def ref_logprobs(self, exp: Experience) -> torch.Tensor:
        """LoRA: the reference policy's log-probs of this rank's shard: the base weights (adapters off)."""
        from agentrl.training.lora import adapters_disabled

        with adapters_disabled(self.peft):
            return self.learner.logprobs(exp)

    def load_adapter(self, policy_dir: str) -> None:
        """LoRA resume: load a checkpoint's adapter into this rank's adapters."""
        from agentrl.training.lora import load_adapter

        load_adapter(self.peft, policy_dir)

    def train_step(self, exp: Experience, kl_coef: float) -> dict[str, float]:
        return self.learner.train_step(exp, kl_coef=kl_coef)

    def named_weights(self, merged: bool = True) -> list[tuple[str, torch.Tensor]] | None:
        """Full weights on CPU from rank 0 (every rank must be called: ZeRO-3 gathers collectively): what an
        engine loads (LoRA merged), or with ``merged=False`` the trained parameters as they are (adapters too)."""
        named = self.strategy.engine_weights() if merged else self.strategy.named_parameters()
        out = [(n, t.detach().to("cpu", copy=True)) for n, t in named]
        return out if self.rank == 0 else None

    def weight_buckets(self) -> Any:
        """Generator (a Ray streaming call): rank 0 yields the weights in buckets in the engine's dtype;
        the other ranks only iterate (ZeRO-3 gathers collectively) and yield nothing."""
        from agentrl.distributed.weight_sync import to_buckets

        named = self.strategy.engine_weights()
        if self.rank != 0:
            for _ in named:
                pass
            return
        yield from to_buckets(named, getattr(torch, self.cfg.model.dtype), copy=False)

    def connect_weight_sync(self, kind: str, host: str, port: int, world_size: int, timeout_s: float,
                            bucket_bytes: int) -> None:
        """Every rank lists the weights (ZeRO-3 gathers collectively); rank 0 joins the collective weight-sync
        group as its rank 0 (``agentrl.rollout.engines.weight_protocol``) and sends the manifest."""
        from agentrl.rollout.engines.weight_protocol import WeightSender, connect, weight_specs

        specs = weight_specs(self.strategy.engine_weights(), getattr(torch, self.cfg.model.dtype))
        if self.rank == 0:
            device = self.strategy.device if kind == "nccl" else None
            self._sender = WeightSender(connect(kind, host, port, 0, world_size, timeout_s=timeout_s, device=device),
                                        specs, bucket_bytes)

    def send_weights(self) -> dict[str, float] | None:
        """Every rank iterates the (gathered) weights; rank 0 broadcasts them bucket by bucket."""
        named = self.strategy.engine_weights()
        if self.rank == 0:
            return self._sender.send(named)
        for _ in named:
            pass
        return None

    def optimizer_state(self) -> dict[str, Any]:
        return self.strategy.optimizer_state()

    def load_optimizer_state(self, states: list[dict[str, Any]]) -> None:
        self.strategy.load_optimizer_state(states)

    def offload(self) -> None:
        self.strategy.offload()

    def reload(self) -> None:
        self.strategy.reload()


class EngineWorker:
    """One rollout engine; engine ``rank`` samples with seed ``learner.seed`` (or ``data.seed``) ``+ rank``."""

    def __init__(self, cfg: RunConfig, model_path: str, *, rank: int, world_size: int, threads: int) -> None:
        _setup_process(threads)
        from agentrl.rollout.engines.choice import resolve_engine

        batch = cfg.data.prompts_per_step * cfg.rollout.n_samples
        if resolve_engine(cfg.rollout.engine, batch, model_path=model_path) == "vllm":
            from agentrl.rollout.engines.vllm import VLLMEngine

            self.engine: Any = VLLMEngine(model_path, seed=cfg.rl_seed + rank, dtype=cfg.model.dtype,
                                          enable_sleep_mode=cfg.cluster.colocate)
        else:
            from agentrl.models import load_causal_lm, load_tokenizer
            from agentrl.rollout.engines.hf import HFEngine

            model = load_causal_lm(model_path, dtype=cfg.model.dtype, device=cfg.model.device,
                                   trust_remote_code=cfg.model.trust_remote_code)
            self.engine = HFEngine(model, load_tokenizer(model_path, cfg.model.trust_remote_code),
                                   max_batch_size=cfg.rollout.max_batch_size)

    def generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        return self.engine.generate(prompts, params)

    def load_weights(self, named: list[tuple[str, torch.Tensor]]) -> None:
        self.engine.load_weights(named)

    def begin_load(self) -> None:
        """Start a streamed reload (``agentrl.distributed.weight_sync.StreamingReload``)."""
        from agentrl.distributed.weight_sync import StreamingReload

        self._reload = StreamingReload(self.engine)

    def add_bucket(self, bucket: Any) -> None:
        self._reload.add(bucket)

    def end_load(self) -> dict[str, float]:
        """Finish the streamed reload: its bytes, seconds and the engine's own reload seconds."""
        reload, self._reload = self._reload, None
        return reload.end()

    def sleep(self) -> None:
        self.engine.sleep()

    def wake_up(self) -> None:
        self.engine.wake_up()

    def connect_weight_sync(self, kind: str, host: str, port: int, rank_offset: int, world_size: int,
                            timeout_s: float) -> None:
        """Join the collective weight-sync group: a vLLM engine's workers join themselves (rank
        ``rank_offset`` + theirs); another engine receives here, as rank ``rank_offset``."""
        if hasattr(self.engine, "connect_weight_sync"):
            self.engine.connect_weight_sync(kind, host, port, rank_offset, world_size, timeout_s)
            return
        from agentrl.rollout.engines.weight_protocol import WeightReceiver, connect

        device = getattr(self.engine, "device", None) if kind == "nccl" else None
        self._receiver = WeightReceiver(connect(kind, host, port, rank_offset, world_size, timeout_s=timeout_s,
                                                device=device))

    def receive_weights(self) -> None:
        """One collective sync into the engine (bucket by bucket into its reload)."""
        if hasattr(self.engine, "receive_weights"):
            self.engine.receive_weights()
            return
        from agentrl.rollout.engines.weight_protocol import receive_into

        receive_into(self._receiver, self.engine.load_weights)


class ObjectWorker:
    """Holds ``factory(cfg, model_path)`` and runs its methods: ``call(name, *args)``."""

    def __init__(self, factory: Any, cfg: RunConfig, model_path: str, *, rank: int, world_size: int,
                 threads: int) -> None:
        _setup_process(threads)
        self.obj = factory(cfg, model_path)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.obj, method)(*args, **kwargs)


def make_reference(cfg: RunConfig, model_path: str) -> Any:
    """The frozen initial policy (``logprobs(exp) -> (B,A)``)."""
    from agentrl.models import load_causal_lm
    from agentrl.training.learner import FrozenModel

    model = load_causal_lm(model_path, dtype=cfg.model.dtype, device=cfg.model.device,
                           trust_remote_code=cfg.model.trust_remote_code)
    return FrozenModel(model, cfg.learner.micro_batch_size, cfg.rollout.temperature, call_tokens=cfg.learner.call_tokens)


def make_critic(cfg: RunConfig, model_path: str) -> Any:
    from agentrl.training.critic import Critic

    return Critic.from_config(cfg, model_path)


def make_reward_model(cfg: RunConfig, model_path: str) -> Any:
    """``reward.model`` loaded with the policy's tokenizer (``score(trajectories) -> list[float]``)."""
    from agentrl.models import load_tokenizer
    from agentrl.training.reward_model import RewardModel

    tokenizer = load_tokenizer(model_path, cfg.model.trust_remote_code)
    return RewardModel.load(cfg.reward.model, tokenizer=tokenizer, device=cfg.model.device)
