"""The ``agentrl`` command: train | eval | sft | rm | dpo | serve-reward | envs list.

Configuration problems print one line (``agentrl: config error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys


def _train(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    cfg = load_config(args.config, args.overrides)
    trainer_cls: type = Trainer
    if cfg.cluster.mode == "ray":
        from agentrl.distributed.trainer import RayTrainer as trainer_cls
    trainer = trainer_cls(cfg, run_dir=args.resume or args.run_dir, resume=bool(args.resume))
    summary = trainer.fit()
    if summary.get("interrupted"):  # checkpointed after SIGTERM: 128 + 15, as a killed process reports
        import signal

        return 128 + signal.Signals[summary["interrupted"]].value
    return 0


def _eval(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.evaluation.command import run_eval

    overrides = list(args.overrides)
    if args.env:
        overrides.append("eval.envs=[" + ", ".join(args.env) + "]")
    cfg = load_config(args.config, overrides)
    run_eval(cfg, args.out, model_path=args.model)
    return 0


def _report(args: argparse.Namespace) -> int:
    from agentrl.evaluation.report import write_report

    print(write_report(args.run_dir))
    return 0


STAGES = {"sft": ("agentrl.stages.sft", "run_sft", "SFTConfig"), "rm": ("agentrl.stages.rm", "run_rm", "RMConfig"),
          "dpo": ("agentrl.stages.dpo", "run_dpo", "DPOConfig")}


def _stage(args: argparse.Namespace) -> int:
    """``agentrl sft | rm | dpo CONFIG [overrides]``: the stages before RL (single process)."""
    import importlib
    import json

    from agentrl.config import load_config
    from agentrl.stages import config as stage_config

    module, fn, cls = STAGES[args.command]
    cfg = load_config(args.config, args.overrides, cls=getattr(stage_config, cls))
    summary = getattr(importlib.import_module(module), fn)(cfg, run_dir=args.run_dir)
    print(json.dumps({k: summary[k] for k in ("steps", "seconds", "before", "after", "model_dir")}, indent=1))
    return 0


def _envs(args: argparse.Namespace) -> int:
    from agentrl.env import list_envs

    for env_id in list_envs():
        print(env_id)
    return 0


def _serve_reward(argv: list[str]) -> int:
    from rewards.server import cli_main

    return cli_main(argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrl", description="agentic RL gym with verifiable rewards")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a policy with RL from a YAML config")
    t.add_argument("config", help="YAML config file")
    t.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    t.add_argument("--run-dir", default=None, help="where to write the run (default from log.run_dir)")
    t.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue the run in RUN_DIR")
    t.set_defaults(fn=_train)
    v = sub.add_parser("eval", help="evaluate a model on registered envs: pass@k, maj@k, tables, eval.json")
    v.add_argument("overrides", nargs="*", help="dotted.key=value overrides (eval.n_samples=8 eval.k=[1,8])")
    v.add_argument("--config", default=None, help="YAML config (sampling, eval section); optional")
    v.add_argument("--model", default=None, help="HF dir, hub id, run or checkpoint dir, or 'tiny' (default model.path)")
    v.add_argument("--env", action="append", default=[], metavar="ENV_ID", help="env id (repeatable)")
    v.add_argument("--out", default="eval_out", help="directory for eval.json")
    v.set_defaults(fn=_eval)
    r = sub.add_parser("report", help="PNG plots and report.md of a run")
    r.add_argument("run_dir", help="the run directory (metrics.jsonl)")
    r.set_defaults(fn=_report)
    for name, what in (("sft", "supervised fine-tuning"), ("rm", "train a reward model on preference pairs"),
                       ("dpo", "direct preference optimisation")):
        s = sub.add_parser(name, help=f"{what} from a YAML config")
        s.add_argument("config", help="YAML config file")
        s.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
        s.add_argument("--run-dir", default=None, help="where to write the run (default from log.run_dir)")
        s.set_defaults(fn=_stage)
    e = sub.add_parser("envs", help="environment registry")
    e.add_argument("action", choices=["list"])
    e.set_defaults(fn=_envs)
    sub.add_parser("serve-reward", help="run the HTTP reward server (see --help)", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve-reward":
        return _serve_reward(argv[1:])
    args = build_parser().parse_args(argv)
    from agentrl.config import ConfigError

    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"agentrl: config error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        if "unknown environment" in str(e):
            print(f"agentrl: config error: {e.args[0]}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
