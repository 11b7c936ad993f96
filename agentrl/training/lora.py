"""LoRA (peft) for every training path: adapters on the policy, the base as the reference, merged
weights for engines that load a plain state dict, and the export of a merged model.

``learner.lora.r > 0`` (``lora.r`` in the SFT, RM and DPO stage configs) wraps the policy in a peft
model whose low-rank adapters are the only trainable parameters. The adapters are injected into the
policy's own modules, so:

- the reference policy is the same module under ``adapters_disabled`` (no second copy of the base
  weights; ``FrozenModel(model, ..., disable_adapters=True)``);
- the HF engine, which holds the same object, generates with the adapted model;
- engines with their own weights (vLLM) get ``policy_weights``: the base weights with each adapter's
  ``B @ A * alpha / r`` added, under the plain Hugging Face names, computed without touching the
  policy's own tensors (merging and unmerging in place would round the base weights every step);
- ``save_pretrained`` (checkpoints) writes only the adapter; ``export_merged`` writes a plain model.

peft is imported only when LoRA is on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from agentrl.config.sections import LoraConfig
from agentrl.models import adapted_weight, is_peft

is_lora = is_peft  # True when the model is a peft model (it carries adapters)


def apply_lora(model: Any, cfg: LoraConfig, task: str = "CAUSAL_LM") -> Any:
    """Wrap ``model`` with fresh LoRA adapters when ``cfg.r > 0`` (only they train, and for ``task``
    ``SEQ_CLS`` the score head); else return it."""
    if cfg.r <= 0:
        return model
    if cfg.alpha <= 0 or not 0 <= cfg.dropout < 1 or not cfg.target_modules:
        raise ValueError(f"lora: needs alpha > 0, 0 <= dropout < 1 and target_modules; got {cfg}")
    import peft

    targets: Any = "all-linear" if list(cfg.target_modules) == ["all-linear"] else list(cfg.target_modules)
    config = peft.LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
                             task_type=task, bias="none")
    try:
        return peft.get_peft_model(model, config)
    except ValueError as e:  # peft names the target modules it could not find
        raise ValueError(f"lora.target_modules: {e}") from None


def adapters_disabled(model: Any) -> contextlib.AbstractContextManager:
    """A context in which a peft model runs as its base model (a no-op for other models)."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()


def policy_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under Hugging Face names: ``named_parameters`` for a plain model; for a
    peft model the base weights with every active adapter's delta added (adapter tensors left out)."""
    if not is_lora(model):
        yield from model.named_parameters()
        return
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    layers = {f"{name}.base_layer.weight": m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    for name, p in base.named_parameters():
        if ".lora_" in name:
            continue
        tensor = p.detach()
        if name in layers:  # one delta at a time: a streamed sync never holds them all
            with torch.no_grad():
                tensor = adapted_weight(layers[name]).detach()
        yield name.replace(".base_layer.", "."), tensor


def plain_copy(model: Any) -> Any:
    """A copy of the policy for an engine that holds its own weights (``rollout.async``): a plain model
    under the Hugging Face names ``policy_weights`` gives, with the adapters merged into its weights
    (a copy of a peft model would take merged weights under other names, then add its deltas again)."""
    import copy

    if not is_lora(model):
        return copy.deepcopy(model)
    return copy.deepcopy(model).merge_and_unload()


def merged_model(model: Any) -> Any:
    """A plain model with the adapters merged into its weights (in place: call after training), or
    ``model`` itself when it has none."""
    return model.merge_and_unload() if is_lora(model) else model


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held by the optimizer's state tensors (AdamW: two per trainable parameter, after a step)."""
    return sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
               if isinstance(t, torch.Tensor))


def parameter_report(model: Any, optimizer: torch.optim.Optimizer | None = None) -> dict[str, float]:
    """Trainable and total parameters, and the optimizer's memory: measured when it has state, else
    AdamW's two fp32 moments per trainable parameter."""
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    measured = optimizer_state_bytes(optimizer) if isinstance(optimizer, torch.optim.Optimizer) else 0
    return {"params/total": float(total), "params/trainable": float(trainable),
            "params/trainable_fraction": trainable / max(total, 1),
            "memory/optimizer_mb": (measured or 8 * trainable) / 2**20}


def load_adapter(model: Any, policy_dir: str | Path) -> None:
    """Load the adapter weights a checkpoint's ``policy/`` holds into the peft ``model`` (resume)."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(policy_dir) / "adapter_model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{policy_dir} holds no LoRA adapter (adapter_model.safetensors); was the run "
                                f"trained with learner.lora.r > 0?")
    set_peft_model_state_dict(model, load_file(str(path)))


def export_merged(source: str | Path, out: str | Path) -> Path:
    """Write a plain Hugging Face model to ``out`` from a run dir (its latest checkpoint), a checkpoint
    dir or a policy dir: adapters merged into the base, or the full model copied as it is."""
    from transformers import AutoModelForCausalLM

    from agentrl.models import load_tokenizer
    from agentrl.runs import checkpoint as ckpt

    src = Path(source)
    if (src / "checkpoints").is_dir():
        latest = ckpt.latest_checkpoint(src)
        if latest is None:
            raise FileNotFoundError(f"no checkpoint in {src / 'checkpoints'}")
        src = latest
    if (src / "policy").is_dir():
        src = src / "policy"
    if not (src / "config.json").exists() and not (src / "adapter_config.json").exists():
        raise FileNotFoundError(f"{source}: not a run, checkpoint or model directory")
    if (src / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(src), dtype=torch.float32).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    out = Path(out)
    model.save_pretrained(out)
    load_tokenizer(src).save_pretrained(out)
    return out
