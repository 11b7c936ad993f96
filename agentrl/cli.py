"""The ``agentrl`` command: train | eval | serve-reward | envs list.

Configuration problems print one line (``agentrl: config error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys


def _train(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.trainer import Trainer

    cfg = load_config(args.config, args.overrides)
    trainer = Trainer(cfg, run_dir=args.resume or args.run_dir, resume=bool(args.resume))
    trainer.fit()
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
