"""``agentrl tasks``: Harbor task directories listed, checked (oracle 1.0, no-op 0.0), audited against known
reward hacks, written from a workspace env's tasks, or started from a template."""

from __future__ import annotations

import argparse

from agentrl.env import EnvError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``tasks`` subcommand's arguments."""
    k = sub.add_parser("tasks", help="Harbor task directories: list them, check each (oracle 1.0, no-op 0.0), "
                                     "audit them against known reward hacks, or export a workspace env's tasks as them")
    k.add_argument("action", choices=["list", "check", "export", "audit", "init"])
    k.add_argument("dir", metavar="DIR|ENV_ID", help="list/check/audit: a Harbor task directory, or a folder of them; "
                                                      "init: the task directory to write (a working start); "
                                                      "export/audit: the env id (agentrl/Terminal-v0, ...)")
    k.add_argument("extra", nargs="*", metavar="OUT [KEY=VALUE ...]",
                   help="export: the folder to write, then the env's keyword arguments (values as YAML); "
                        "audit ENV_ID: the keyword arguments")
    k.add_argument("--n", type=int, default=10, help="export/audit ENV_ID: how many tasks (default 10)")
    k.add_argument("--seed", type=int, default=0, help="export/audit ENV_ID: the seed that draws them (default 0)")
    k.add_argument("--backend", choices=["local", "docker"], default="local", help="workspace backend")
    k.add_argument("--json", action="store_true", help="check/audit: one JSON line per task")
    k.add_argument("--jobs", "-j", type=int, default=1, help="check: tasks checked at once; audit: a task's "
                                                              "attacks played at once")
    k.add_argument("--verbose", "-v", action="store_true", help="check/audit: the outputs of what fails")
    k.add_argument("--attacks", default=None, metavar="A,B", help="audit: only these attacks (default: all)")
    k.add_argument("--skip", default=None, metavar="A,B", help="audit: every attack but these")
    return k


def run_tasks(args: argparse.Namespace) -> int:
    """``agentrl tasks list | check DIR``: Harbor task directories (agentrl.evaluation.tasks);
    ``agentrl tasks export ENV_ID OUT``: a workspace env's tasks written as such (agentrl.evaluation.task_export);
    ``agentrl tasks audit DIR|ENV_ID``: known reward hacks against each task's verifier (agentrl.evaluation.audit);
    ``agentrl tasks init DIR``: a working start. The user's mistakes raise :class:`EnvError`."""
    from agentrl.evaluation.tasks import check_tasks, list_tasks

    if args.action == "export":
        from agentrl.evaluation.task_export import export_tasks, parse_kwargs

        if not args.extra:
            raise EnvError("usage: agentrl tasks export ENV_ID OUT --n N [--seed S] [KEY=VALUE ...]")
        return export_tasks(args.dir, args.extra[0], args.n, args.seed, parse_kwargs(args.extra[1:]))
    if args.action == "audit":
        from agentrl.evaluation.audit import audit_tasks
        from agentrl.evaluation.task_export import parse_kwargs

        return audit_tasks(args.dir, backend=args.backend, as_json=args.json, jobs=args.jobs, n=args.n,
                           seed=args.seed, kwargs=parse_kwargs(args.extra), verbose=args.verbose,
                           attacks=names_list(args.attacks, "--attacks"), skip=names_list(args.skip, "--skip"))
    if args.extra:
        raise EnvError(f"unexpected arguments after {args.dir}: {' '.join(args.extra)}")
    if args.action == "init":
        from agentrl.evaluation.scaffold import init_task

        return init_task(args.dir)
    if args.action == "list":
        return list_tasks(args.dir, backend=args.backend)
    return check_tasks(args.dir, backend=args.backend, as_json=args.json, jobs=args.jobs, verbose=args.verbose)


def names_list(value: str | None, flag: str) -> list[str] | None:
    """A comma-separated list of names (None when the flag was not given)."""
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise EnvError(f"{flag} needs attack names (agentrl tasks audit DIR --attacks exit_zero,path_shims)")
    return names
