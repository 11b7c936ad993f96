"""``agentrl doctor CONFIG [overrides] [--episodes N] [--model tiny|PATH] [--json] [--out DIR]``."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``doctor`` subcommand's arguments."""
    d = sub.add_parser("doctor", help="play a config's episodes on this machine and check what a run would "
                                      "silently get wrong (tokens, tools, mask, log-probs, reward, grader, cost)")
    d.add_argument("config", help="the run's YAML config")
    d.add_argument("overrides", nargs="*", help="dotted.key=value overrides, as for agentrl train")
    d.add_argument("--episodes", type=int, default=32, help="model episodes to play (whole groups; default 32)")
    d.add_argument("--model", default=None, metavar="tiny|PATH",
                   help="play with this model instead of model.path (e.g. a small one for a 70B recipe)")
    d.add_argument("--audit-tasks", type=int, default=2, help="workspace tasks the grader check attacks (0: none)")
    d.add_argument("--warm-start", action="store_true",
                   help="run the config's warm start when it is not cached (a cached one is always loaded)")
    d.add_argument("--json", action="store_true", help="one JSON document on stdout (progress on stderr)")
    d.add_argument("--out", default=None, metavar="DIR", help="write DIR/doctor.json (agentrl view DIR shows it)")
    return d


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 when nothing fails, 1 on any fail (2 on bad input, raised as ConfigError/EnvError)."""
    from agentrl.config import ConfigError, load_config
    from agentrl.doctor import run_doctor
    from agentrl.doctor.report import print_table

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    if args.audit_tasks < 0:
        raise ConfigError(f"--audit-tasks must be >= 0, got {args.audit_tasks}")
    cfg = load_config(args.config, args.overrides)
    from agentrl.models import check_model_source

    check_model_source(args.model or cfg.model.path, "--model" if args.model else "model.path")

    def log(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    report = run_doctor(cfg, episodes=args.episodes, model=args.model, audit_tasks=args.audit_tasks,
                        warm_start=args.warm_start, config_path=args.config, log=log)
    if args.out:
        path = report.write(args.out)
        log(f"wrote {path}")
    if args.json:
        print(report.to_json())
    else:
        print_table(report)
    return 1 if report.failed else 0
