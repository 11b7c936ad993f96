"""Loading a config: YAML plus dotted overrides, validated against the dataclasses up front.

Unknown keys, wrong types and unknown choices raise :class:`ConfigError` with one line naming the
problem (and the valid keys or values).
"""

from __future__ import annotations

import dataclasses
import keyword
import sys
import types
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from agentrl.config.sections import EnvConfig, RunConfig


class ConfigError(ValueError):
    """A configuration problem, stated in one line."""



CHOICES = {
    "algo.estimator": ("gae", "reinforce", "reinforce_baseline", "rloo", "group_norm", "dr_grpo"),
    "algo.kl_mode": ("none", "reward", "loss"),
    "algo.kl_estimator": ("k1", "k2", "k3"),
    "algo.ratio_type": ("token", "sequence"),
    "algo.policy_loss": ("ppo", "cispo", "sapo"),
    "algo.loss_agg": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
    "rollout.engine": ("hf", "vllm", "auto"),
    "rollout.samples": ("episode", "turn"),
    "rollout.context.policy": ("none", "truncate", "compact"),
    "cluster.mode": ("local", "ray"),
    "cluster.strategy": ("deepspeed", "ddp"),
    "cluster.zero_stage": (0, 1, 2, 3),
    "cluster.weight_sync": ("auto", "object_store", "nccl", "gloo"),
    "model.dtype": ("float32", "bfloat16", "float16"),
    "model.device": ("auto", "cpu", "cuda"),
}


ALIASES = {
    "algo.estimator": {"grpo": "group_norm", "reinforce++": "reinforce", "reinforce_pp": "reinforce", "ppo": "gae",
                       "dr-grpo": "dr_grpo"},
}
"""Names users know, mapped to the canonical name at load time (saved configs stay canonical)."""


def _check_type(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_check_type(v, typing.get_args(tp)[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "3e-4" as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def _type_name(tp: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(tp)) or str(tp)


def build(cls: type, data: dict[str, Any] | None, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a nested dict, validating keys and types."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    data = {_field_name(k): v for k, v in data.items()}  # rollout.async is the field ``async_``
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise ConfigError(f"unknown key '{where}'; valid keys{' in ' + prefix if prefix else ''}: "
                          f"{', '.join(_key_name(f) for f in fields)}")
    kwargs = {}
    for name, value in data.items():
        where = f"{prefix}.{_key_name(name)}" if prefix else _key_name(name)
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, value, where)
            continue
        value = _check_type(value, tp, where)
        if isinstance(value, str) and where in ALIASES:
            value = ALIASES[where].get(value.lower(), value)
        if where in CHOICES and value not in CHOICES[where]:
            also = f" (or {', '.join(ALIASES[where])})" if where in ALIASES else ""
            raise ConfigError(f"{where}: unknown value {value!r}; valid: {', '.join(map(str, CHOICES[where]))}{also}")
        kwargs[name] = value
    return cls(**kwargs)


class Replace(dict):
    """A mapping given whole on the command line (``'env.kwargs={dataset: x.jsonl}'``): it replaces the
    config's mapping instead of merging into it (dotted sub-keys, ``env.kwargs.digits=3``, merge)."""


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["algo.estimator=rloo", "learner.lr=1e-4"]`` -> nested dict (values read as YAML; a mapping
    value is a :class:`Replace`)."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form dotted.key=value")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with another override")
        node[parts[-1]] = Replace(value) if isinstance(value, dict) else value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        merge = isinstance(v, dict) and not isinstance(v, Replace) and isinstance(out.get(k), dict)
        out[k] = _merge(out[k], v) if merge else v
    return out


ENV_KWARGS = ("kwargs", "eval_kwargs", "dev_kwargs")


def drop_old_env_kwargs(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """An ``env.id`` changed on the command line leaves the config's env kwargs behind (they were for the
    other env), with a warning naming them; kwargs given on the command line too are kept."""
    env, new = data.get("env"), overrides.get("env")
    if not isinstance(env, dict) or not isinstance(new, dict) or "id" not in new or new["id"] == env.get("id"):
        return data
    defaults = EnvConfig()
    dropped = {k: env[k] for k in ENV_KWARGS if k in env and k not in new and env[k] != getattr(defaults, k)}
    if not dropped:
        return data
    print(f"warning: env.id changed from {env.get('id')} (the config) to {new['id']} (the command line): the config's "
          + ", ".join(f"env.{k}={v}" for k, v in dropped.items()) + f" were for {env.get('id')} and are dropped; give "
          "them for the new env on the command line (e.g. 'env.kwargs={...}')", file=sys.stderr, flush=True)
    return {**data, "env": {k: v for k, v in env.items() if k not in dropped}}


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, turning parse errors into one-line ``ConfigError``s."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config {str(path)!r}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"malformed YAML in {path}{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                cls: type = RunConfig) -> Any:
    """Load and validate a config: YAML file (optional) + dotted overrides."""
    data = read_yaml(path) if path else {}
    extra = parse_overrides(overrides or [])
    data = _merge(drop_old_env_kwargs(data, extra), extra)
    cfg = implied(resolve_auto(build(cls, data)))
    check_credit_and_context(cfg)
    check_budget(cfg)
    check_curriculum(cfg)
    return cfg


def check_curriculum(cfg: Any) -> None:
    """``data.curriculum``: ranges, and groups of at least 2 samples (its signal is whether they differ)."""
    c = getattr(getattr(cfg, "data", None), "curriculum", None)
    if c is None or not c.key:
        return
    bad = ("candidates", c.candidates, "a count >= 1") if c.candidates < 1 else \
        ("temperature", c.temperature, "a number > 0") if not c.temperature > 0 else \
        ("decay", c.decay, "a fraction in (0, 1]") if not 0 < c.decay <= 1 else \
        ("prior_strength", c.prior_strength, "a number > 0") if not c.prior_strength > 0 else None
    if bad:
        raise ConfigError(f"data.curriculum.{bad[0]}: expected {bad[2]}, got {bad[1]!r}")
    if cfg.rollout.n_samples < 2:
        raise ConfigError(f"data.curriculum picks tasks whose groups' rewards differ: it needs rollout.n_samples >= 2, "
                          f"got {cfg.rollout.n_samples}")


def check_budget(cfg: Any) -> None:
    """``run.max_seconds`` >= 0 and ``run.warm_start_share`` in (0, 1], said in one line."""
    run = getattr(cfg, "run", None)
    if run is None:
        return
    if not run.max_seconds >= 0:
        raise ConfigError(f"run.max_seconds: expected seconds >= 0 (0: no budget), got {run.max_seconds!r}")
    if not 0 < run.warm_start_share <= 1:
        raise ConfigError(f"run.warm_start_share: expected a fraction in (0, 1], got {run.warm_start_share!r}")


def implied(cfg: Any) -> Any:
    """Settings another one implies: ``rollout.context.policy`` truncate|compact rebuilds the context, so an
    episode becomes several samples (``rollout.samples: turn``, its only valid value)."""
    rollout = getattr(cfg, "rollout", None)
    if rollout is None or rollout.context.policy == "none" or rollout.samples == "turn":
        return cfg
    return replace(cfg, rollout=replace(rollout, samples="turn"))


def check_credit_and_context(cfg: Any) -> None:
    """Turn-level credit and context policies: ranges and the combinations that cannot work, in one line."""
    algo, rollout = getattr(cfg, "algo", None), getattr(cfg, "rollout", None)
    if algo is None or rollout is None:
        return
    turn_credit = algo.turn_gamma is not None or algo.step_adv_weight != 0
    if algo.turn_gamma is not None and not 0 < algo.turn_gamma <= 1:
        raise ConfigError(f"algo.turn_gamma: expected a discount in (0, 1] (or null: off), got {algo.turn_gamma!r}")
    if algo.step_adv_weight < 0:
        raise ConfigError(f"algo.step_adv_weight: expected a weight >= 0 (0: off), got {algo.step_adv_weight!r}")
    if not 0 <= algo.neg_adv_weight <= 1:
        raise ConfigError(f"algo.neg_adv_weight: expected a weight in [0, 1] (1: the plain policy gradient; 0: only "
                          f"better-than-baseline samples reinforced), got {algo.neg_adv_weight!r}")
    if algo.branch_window is not None and (isinstance(algo.branch_window, bool) or algo.branch_window < 0):
        raise ConfigError(f"algo.branch_window: expected a token count >= 0 (0: from the branch point to the end; "
                          f"null: off), got {algo.branch_window!r}")
    if algo.branch_window is not None and algo.estimator == "gae":
        raise ConfigError("algo.branch_window compares the samples of a group; the gae estimator has no groups")
    if algo.branch_window is not None and rollout.samples == "turn":
        raise ConfigError("algo.branch_window compares whole episodes' actions; with rollout.samples=turn (or a "
                          "context policy) an episode is several samples, each from its own context")
    if not isinstance(algo.guide, bool):
        raise ConfigError(f"algo.guide: expected true or false, got {algo.guide!r}")
    if algo.guide and rollout.n_samples < 2:
        raise ConfigError(f"algo.guide puts a reference episode into a group of samples; rollout.n_samples is "
                          f"{rollout.n_samples}, so it would replace the policy's only sample (use >= 2)")
    if turn_credit and algo.estimator == "gae":
        raise ConfigError("algo.turn_gamma / algo.step_adv_weight: turn-level credit works with the outcome "
                          "estimators (group_norm, rloo, dr_grpo, reinforce, reinforce_baseline), not gae")
    if algo.turn_gamma is not None and algo.gamma != 1.0:
        raise ConfigError(f"algo.turn_gamma discounts per turn; leave algo.gamma (per token) at 1, got {algo.gamma!r}")
    ctx = rollout.context
    if ctx.max_tokens < 0 or ctx.summary_tokens < 0:
        raise ConfigError("rollout.context.max_tokens and summary_tokens: expected a token count >= 0 (0: default)")
    if not 0 < ctx.truncate_keep <= 1:
        raise ConfigError(f"rollout.context.truncate_keep: expected a fraction in (0, 1], got {ctx.truncate_keep!r}")
    if rollout.samples == "turn" and algo.estimator == "gae":
        why = f" (implied by rollout.context.policy={ctx.policy})" if ctx.policy != "none" else ""
        raise ConfigError(f"rollout.samples=turn{why} with algo.estimator=gae: the critic scores one sequence per "
                          f"episode; use an outcome estimator (group_norm, rloo, ...)")


ASYNC_TIS_CAP = 2.0
"""``algo.tis_cap`` of ``-1`` (auto) with ``rollout.async``: the CPU demo at staleness 1 lifted held-out
accuracy by +0.32 without a correction and +0.65 with this cap (docs/async.md)."""


def resolve_auto(cfg: Any) -> Any:
    """Settings whose default depends on others, made explicit (the saved config shows the value):
    ``algo.tis_cap = -1`` becomes 2.0 with ``rollout.async`` and 0 (off) otherwise. (``learner.call_tokens
    = -1`` depends on the model and device, so the learner resolves it; only its range is checked here.)"""
    for key in ("samples_every", "samples_per_step", "eval_samples"):
        if getattr(getattr(cfg, "log", None), key, 0) < 0:
            raise ConfigError(f"log.{key}: expected a count >= 0 (0 = off), got {getattr(cfg.log, key)!r}")
    rate = getattr(getattr(cfg, "env", None), "max_failure_rate", 0.0)
    if not 0 <= rate <= 1:
        raise ConfigError(f"env.max_failure_rate: expected a share of episodes in [0, 1] (1 = never stop), got {rate!r}")
    call_tokens = getattr(getattr(cfg, "learner", None), "call_tokens", -1)
    if call_tokens < -1:
        raise ConfigError(f"learner.call_tokens: expected a token count > 0, 0 (no cap) or -1 (auto), got {call_tokens!r}")
    cluster = getattr(cfg, "cluster", None)
    for key in ("sync_timeout_s", "sync_bucket_mb"):
        if cluster is not None and getattr(cluster, key) <= 0:
            raise ConfigError(f"cluster.{key}: expected a number > 0, got {getattr(cluster, key)!r}")
    algo = getattr(cfg, "algo", None)
    if algo is None or getattr(algo, "tis_cap", 0.0) >= 0:
        return cfg
    if algo.tis_cap != -1:
        raise ConfigError(f"algo.tis_cap: expected a cap > 0, 0 (off) or -1 (auto), got {algo.tis_cap!r}")
    cap = ASYNC_TIS_CAP if cfg.rollout.async_ else 0.0
    return dataclasses.replace(cfg, algo=dataclasses.replace(algo, tis_cap=cap))


def _field_name(key: Any) -> Any:
    """A config key that is a Python keyword (``async``) names the field ``async_``."""
    return f"{key}_" if isinstance(key, str) and keyword.iskeyword(key) else key


def _key_name(field_name: str) -> str:
    """The config key of a field (``async_`` -> ``async``)."""
    stem = field_name[:-1]
    return stem if field_name.endswith("_") and keyword.iskeyword(stem) else field_name


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config as plain nested dicts (for saving beside the run), keyed as in YAML."""
    def keys(d: Any) -> Any:
        return {_key_name(k): keys(v) for k, v in d.items()} if isinstance(d, dict) else d

    return {_key_name(f.name): (keys(dataclasses.asdict(v)) if dataclasses.is_dataclass(v) else v)
            for f in dataclasses.fields(cfg) for v in [getattr(cfg, f.name)]}


def save_config(cfg: Any, path: str | Path) -> None:
    """Write the resolved config as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False), encoding="utf-8")


def check_model_path(path: str, key: str = "model.path") -> None:
    """A ``model.path`` that names a local path (absolute, relative with ``./``, a ``.gguf`` file, several
    ``/`` parts, or under an existing directory) must exist: say so in one line, before any hub lookup.
    ``tiny``, aliases and ``org/name`` hub ids pass through."""
    p = Path(path).expanduser()
    if path == "tiny" or p.exists():
        return
    local = (path.startswith(("/", ".", "~")) or path.endswith(".gguf") or path.count("/") >= 2 or "\\" in path
             or (len(p.parts) > 1 and Path(p.parts[0]).is_dir()))
    if local:
        raise ConfigError(f"{key}: no such directory {path!r} (give a Hugging Face model directory, a .gguf file, "
                          f"a hub id such as org/name, or tiny)")
