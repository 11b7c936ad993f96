"""The ``agentrl`` command: train | eval | plan | sft | rm | dpo | serve-reward | serve-env | envs list |
report | view | tasks | doctor | init.

Mistakes a user makes (config, env import path or kwargs, model path, run directory, a missing
optional package) print one line naming the problem and the fix (``agentrl: config error: ...``,
``agentrl: error: ...``) and exit with status 2; ``--debug`` shows the traceback instead. Options
may come anywhere among the overrides (``agentrl train CFG --run-dir X learner.lr=1e-4``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

STARTED = time.monotonic()
"""When this process began its command, near enough (``run.max_seconds`` counts from it)."""


def _quiet() -> None:
    """The libraries' own output quieted (:func:`agentrl.models.quiet_library_output`); called once a
    command's config has loaded, so that a config error comes before torch is imported (0.9 s, not 11)."""
    from agentrl.models import quiet_library_output

    quiet_library_output()


def _train(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.preflight import check_machine
    from agentrl.runs.run_dir import prepare_run_dir, run_dir_path
    from agentrl.runs.tracking import check_sinks

    cfg = load_config(args.config, args.overrides)
    check_machine(cfg)  # a GPU recipe on a CPU machine stops here, before any model or engine is built
    _quiet()
    from agentrl.models import check_model_source as check_model_path

    check_model_path(cfg.model.path)
    check_sinks(cfg.log)
    run_dir = prepare_run_dir(args.resume or run_dir_path(cfg, args.run_dir), resume=bool(args.resume),
                              overwrite=args.overwrite)
    from agentrl.training.trainer import Trainer

    trainer_cls: type = Trainer
    if cfg.cluster.mode == "ray":
        from agentrl.distributed.trainer import RayTrainer as trainer_cls
    doctor = None
    if not args.no_doctor:
        from agentrl.doctor.first_step import first_step_check

        doctor = lambda tok, role: first_step_check(cfg, run_dir, tok, role)  # noqa: E731 - bound in the trainer
    trainer = trainer_cls(cfg, run_dir=run_dir, resume=bool(args.resume), doctor=doctor, started=STARTED)
    summary = trainer.fit()
    if summary.get("interrupted"):  # checkpointed after SIGTERM: 128 + 15, as a killed process reports
        import signal

        return 128 + signal.Signals[summary["interrupted"]].value
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """``agentrl doctor CONFIG``: play the config's episodes here and check what a run would get wrong."""
    _quiet()
    from agentrl.doctor.command import run

    return run(args)


def _eval(args: argparse.Namespace) -> int:
    from agentrl.config import load_config
    from agentrl.evaluation.command import run_config_of

    overrides = list(args.overrides)
    if args.env:
        overrides.append("eval.envs=[" + ", ".join(args.env) + "]")
    config = args.config
    if config is None and args.model and (saved := run_config_of(args.model)) is not None:
        config = saved  # a run or checkpoint dir: evaluate as the run did (its env, kwargs, sampling)
        print(f"agentrl eval: using the run's config {saved}", file=sys.stderr)
    cfg = load_config(config, overrides)
    from agentrl.preflight import check_machine

    check_machine(cfg)
    _quiet()
    from agentrl.evaluation.command import run_eval
    from agentrl.models import check_model_source as check_model_path

    if args.model:
        check_model_path(args.model, "--model")
    run_eval(cfg, args.out, model_path=args.model)
    return 0


def _plan(args: argparse.Namespace) -> int:
    """``agentrl plan CONFIG``: the memory per component the run needs (``agentrl.training.memory_plan``)."""
    from agentrl.config import load_config
    from agentrl.training.memory_plan import format_plan, plan_run

    cfg = load_config(args.config, args.overrides)
    plan, source = plan_run(cfg, prompt_tokens=args.prompt_tokens, gpu_gib=args.gpu_gib)
    print(format_plan(plan, source))
    if args.measure:
        from agentrl.config import ConfigError
        from agentrl.training.memory_measure import measure_run
        from agentrl.training.memory_plan import compare, format_comparison

        if cfg.cluster.mode != "local" or cfg.rollout.engine == "vllm":
            raise ConfigError("plan --measure runs the single-process trainer with the HF engine: "
                              "set cluster.mode=local rollout.engine=hf")
        measured = measure_run(cfg, plan.facts["prompt_tokens"], plan.facts["response_tokens"])
        print(format_comparison(compare(plan, measured)))
    return 0


def _report(args: argparse.Namespace) -> int:
    from agentrl.evaluation.report import write_report
    from agentrl.runs.run_dir import RunDirError

    if not Path(args.run_dir).is_dir():
        raise RunDirError(f"no such run directory {args.run_dir!r} (give the directory a run wrote, e.g. runs/NAME)")

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
    from agentrl.runs.run_dir import prepare_run_dir, run_dir_path

    cfg = load_config(args.config, args.overrides, cls=getattr(stage_config, cls))
    from agentrl.preflight import check_machine

    check_machine(cfg)
    _quiet()
    from agentrl.models import check_model_source as check_model_path

    check_model_path(cfg.model.path)
    run_dir = prepare_run_dir(run_dir_path(cfg, args.run_dir), overwrite=args.overwrite,
                              command=f"agentrl {args.command} CONFIG")
    summary = getattr(importlib.import_module(module), fn)(cfg, run_dir=run_dir)
    print(json.dumps({k: summary[k] for k in ("steps", "seconds", "before", "after", "model_dir")}, indent=1))
    return 0


def _view(args: argparse.Namespace) -> int:
    """``agentrl view RUN_DIR ...``: the run browser on 127.0.0.1, or ``--export FILE``."""
    from agentrl.viewer.command import main as view_main
    from agentrl.viewer.data import ViewError

    try:
        return view_main(args.run_dirs, host=args.host, port=args.port, token=args.token, export=args.export)
    except ViewError as e:
        print(f"agentrl view: {e}", file=sys.stderr)
        return 2


def _port(text: str) -> int:
    """``--port``: an integer 0-65535 (0: any free port)."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port number 0-65535: {text!r} (0 picks a free one)")
    return int(text)


def _export(args: argparse.Namespace) -> int:
    """``agentrl export SOURCE OUT``: a plain HF model (LoRA adapters merged) from a run or checkpoint."""
    _quiet()
    from agentrl.training.lora import export_merged

    try:
        print(export_merged(args.source, args.out))
    except FileNotFoundError as e:
        print(f"agentrl: export: {e}", file=sys.stderr)
        return 2
    return 0


def _envs(args: argparse.Namespace) -> int:
    import gymnasium

    from agentrl.env import describe_env, list_envs

    for env_id in list_envs(families=True):
        if env_id not in gymnasium.registry:
            print(env_id)
            continue
        about, kwargs = describe_env(env_id)
        print(f"{env_id}  {about}" + (f"\n    kwargs: {kwargs}" if kwargs else ""))
    return 0


def _init(args: argparse.Namespace) -> int:
    """``agentrl init env NAME``: an env folder to start from (agentrl.evaluation.scaffold)."""
    from agentrl.env import EnvError
    from agentrl.evaluation.scaffold import init_env

    try:
        return init_env(args.name)
    except EnvError as e:
        print(f"agentrl init: error: {one_line(e)}", file=sys.stderr)
        return 2


def _tasks(args: argparse.Namespace) -> int:
    """``agentrl tasks list | check | export | audit | init`` (agentrl.evaluation.tasks_command)."""
    from agentrl.env import EnvError
    from agentrl.evaluation.tasks_command import run_tasks

    try:
        return run_tasks(args)
    except EnvError as e:
        if args.debug:
            raise
        print(f"agentrl tasks: error: {one_line(e)}", file=sys.stderr)
        return 2


def _serve_reward(argv: list[str]) -> int:
    from rewards.server import cli_main

    return cli_main(argv)


def _serve_env(argv: list[str]) -> int:
    from agentrl.serving.env_server import cli_main

    return cli_main(argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrl", description="agentic RL gym with verifiable rewards")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a policy with RL from a YAML config")
    t.add_argument("config", help="YAML config file")
    t.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    t.add_argument("--run-dir", default=None, help="where to write the run (default from log.run_dir)")
    t.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue the run in RUN_DIR")
    t.add_argument("--overwrite", action="store_true", help="replace the run already in the run directory")
    t.add_argument("--no-doctor", action="store_true", help="skip the doctor's checks of the first batch "
                                                            "(token exactness, loss mask)")
    t.set_defaults(fn=_train)
    from agentrl.doctor.command import add_parser as doctor_parser

    doctor_parser(sub).set_defaults(fn=_doctor)
    v = sub.add_parser("eval", help="evaluate a model on registered envs: pass@k, maj@k, tables, eval.json")
    v.add_argument("overrides", nargs="*", help="dotted.key=value overrides (eval.n_samples=8 eval.k=[1,8])")
    v.add_argument("--config", default=None, help="YAML config (sampling, eval section); optional")
    v.add_argument("--model", default=None, help="HF dir, hub id, run or checkpoint dir, or 'tiny' (default model.path)")
    v.add_argument("--env", action="append", default=[], metavar="ENV_ID", help="env id (repeatable)")
    v.add_argument("--out", default=None, help="directory for eval.json (default: a new one, in the run directory "
                   "when --model is a run or checkpoint: RUN/evals/STEP-TIME)")
    v.set_defaults(fn=_eval)
    m = sub.add_parser("plan", help="memory per component (weights, optimizer, activations, KV cache) of a config")
    m.add_argument("config", help="YAML config file")
    m.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    m.add_argument("--prompt-tokens", type=int, default=None, help="prompt length to plan for (default: measured)")
    m.add_argument("--gpu-gib", type=float, default=None, help="GPU memory in GiB (default: this GPU's, else 80)")
    m.add_argument("--measure", action="store_true", help="also run the worst case once here and print measured bytes")
    m.set_defaults(fn=_plan)
    r = sub.add_parser("report", help="PNG plots and report.md of a run")
    r.add_argument("run_dir", help="the run directory (metrics.jsonl)")
    r.set_defaults(fn=_report)
    for name, what in (("sft", "supervised fine-tuning"), ("rm", "train a reward model on preference pairs"),
                       ("dpo", "direct preference optimisation")):
        s = sub.add_parser(name, help=f"{what} from a YAML config")
        s.add_argument("config", help="YAML config file")
        s.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
        s.add_argument("--run-dir", default=None, help="where to write the run (default from log.run_dir)")
        s.add_argument("--overwrite", action="store_true", help="replace the run already in the run directory")
        s.set_defaults(fn=_stage)
    x = sub.add_parser("export", help="write a plain Hugging Face model (LoRA adapters merged) from a run")
    x.add_argument("source", help="run dir (its latest checkpoint), checkpoint dir or policy dir")
    x.add_argument("out", help="output directory")
    x.set_defaults(fn=_export)
    w = sub.add_parser("view", help="browse runs in a web page: curves, episodes, tokens, eval, doctor (127.0.0.1)")
    w.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (agentrl train, eval --out or doctor --out)")
    w.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    w.add_argument("--port", type=_port, default=8765, help="TCP port, or 0 for a free one (default 8765)")
    w.add_argument("--token", default=None, help="token the page needs (default: $AGENTRL_VIEW_TOKEN; none if unset)")
    w.add_argument("--export", default=None, metavar="FILE.html",
                   help="write the page as one self-contained HTML file (works offline) instead of serving")
    w.set_defaults(fn=_view)
    i = sub.add_parser("init", help="write a working start: an env folder (its TextEnv, conformance test and a "
                                    "config that trains it); agent tasks: agentrl tasks init NAME")
    i.add_argument("kind", choices=["env"])
    i.add_argument("name", metavar="NAME", help="the folder to write (its last part names the env)")
    i.set_defaults(fn=_init)
    e = sub.add_parser("envs", help="environment registry")
    e.add_argument("action", choices=["list"])
    e.set_defaults(fn=_envs)
    from agentrl.evaluation.tasks_command import add_parser as tasks_parser

    tasks_parser(sub).set_defaults(fn=_tasks)
    sub.add_parser("serve-reward", help="run the HTTP reward server (see --help)", add_help=False)
    sub.add_parser("serve-env", help="serve an env over OpenEnv's protocol (see --help)", add_help=False)
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse with options allowed between the positionals (``CFG --run-dir X key=value``): the
    subcommand's own parser reads its arguments intermixed (argparse cannot do that across subparsers)."""
    parser = build_parser()
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    if argv and argv[0] in sub.choices:
        args = sub.choices[argv[0]].parse_intermixed_args(argv[1:])
        args.command = argv[0]
    else:
        args = parser.parse_args(argv)
    args.debug = debug
    return args


def one_line(e: BaseException) -> str:
    """The first line of an error's message (the class name when it has none)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve-reward":
        return _serve_reward(argv[1:])
    if argv and argv[0] == "serve-env":
        return _serve_env(argv[1:])
    args = parse_args(argv)
    from agentrl.config import ConfigError
    from agentrl.env import EnvError, EnvFailureRateError, end_parked_workspaces
    from agentrl.preflight import RequirementError

    try:
        return args.fn(args)
    except (ConfigError, EnvError) as e:  # the user's config, env or run directory
        if args.debug:
            raise
        print(f"agentrl: config error: {one_line(e)}", file=sys.stderr)
        return 2
    except RequirementError as e:  # this machine lacks a GPU, a package or a supported release
        if args.debug:
            raise
        print(f"agentrl: error: {one_line(e)}", file=sys.stderr)
        return 2
    except EnvFailureRateError as e:  # the env failed too many episodes (tracebacks shown once above)
        if args.debug:
            raise
        print(f"agentrl: error: {one_line(e)}", file=sys.stderr)
        return 1
    except (OSError, ImportError) as e:  # a model path, a missing file or an optional package
        if args.debug:
            raise
        hint = f" (pip install {e.name})" if isinstance(e, ModuleNotFoundError) and e.name else ""
        if "huggingface" in str(e).lower() or "repo id" in str(e).lower():  # a model path that is not there
            hint = " (model.path / --model: give an existing Hugging Face directory, a hub id this machine can reach, or tiny)"
        print(f"agentrl: error: {type(e).__name__}: {one_line(e)}{hint} (--debug shows the traceback)",
              file=sys.stderr)
        return 2
    finally:
        end_parked_workspaces()  # a command ends with its workspaces (a caller in-process may run on)


if __name__ == "__main__":
    sys.exit(main())
