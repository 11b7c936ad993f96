"""The docs site's generated reference pages, written from the code each time the site builds.

``config_reference`` reads the config dataclasses from source with ``ast`` (the docstring under each
field exists only there, not at run time) and walks the nesting from ``RunConfig``, so every field
appears under its YAML path (``learner.max_seconds``) with its type, default and docstring;
``stages_reference`` does the same for ``agentrl sft | rm | dpo``. ``cli_reference`` walks the
argparse parser of ``agentrl.cli``. Nothing here is committed as Markdown, so it cannot go stale.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = tuple(ROOT / "agentrl" / "config" / f"{m}.py" for m in ("model", "rollout", "learning", "run"))
"""The modules of the config dataclasses (``agentrl.config.sections`` is their index)."""
STAGES = ROOT / "agentrl" / "stages" / "config.py"
LOADING = ROOT / "agentrl" / "config" / "loading.py"
STAGE_COMMANDS = (("sft", "SFTConfig"), ("rm", "RMConfig"), ("dpo", "DPOConfig"))


@dataclass(frozen=True)
class Field:
    key: str
    """The YAML key (a field named after a Python keyword, ``async_``, is ``async`` in YAML)."""
    annotation: str
    """The annotation as written (``str | None``)."""
    default: str
    """The default as YAML (``null``, ``{split: test}``), or ``required``."""
    doc: str
    """The docstring under the field, as Markdown."""
    nested: str | None = None
    """The dataclass this field holds, when it is a section."""
    overrides: tuple[tuple[str, str], ...] = ()
    """Defaults the section's factory changes (``lambda: LogConfig(name="sft")``), as YAML."""


# ---------------------------------------------------------------- reading the dataclasses from source
def read_classes(*paths: Path) -> dict[str, list[Field]]:
    """Every ``@dataclass`` of ``paths``: class name -> its fields in source order."""
    nodes = {}
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes.update({n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and _is_dataclass(n)})
    return {name: _fields(node, set(nodes)) for name, node in nodes.items()}


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list)


def _fields(node: ast.ClassDef, classes: set[str]) -> list[Field]:
    out = []
    for i, stmt in enumerate(node.body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        after = node.body[i + 1] if i + 1 < len(node.body) else None
        doc = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else ""
        name = stmt.target.id
        stem = name.removesuffix("_")
        annotation = ast.unparse(stmt.annotation)
        default, nested, overrides = _default(stmt.value, classes)
        if nested is None and annotation in classes:
            nested = annotation
        out.append(Field(stem if name.endswith("_") and keyword.iskeyword(stem) else name, annotation, default,
                         markdown(doc), nested, overrides))
    return out


def _default(value: ast.expr | None, classes: set[str]) -> tuple[str, str | None, tuple[tuple[str, str], ...]]:
    """(the default as YAML, the nested dataclass, its changed defaults) of a field's right-hand side."""
    if value is None:
        return "required", None, ()
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "field":
        kwargs = {k.arg: k.value for k in value.keywords}
        if "default" in kwargs:
            return _default(kwargs["default"], classes)
        factory = kwargs.get("default_factory")
        if isinstance(factory, ast.Lambda):
            factory = factory.body
            if isinstance(factory, ast.Call) and ast.unparse(factory.func) in classes:
                changed = tuple((k.arg, _yaml_of(k.value)) for k in factory.keywords if k.arg)
                return "", ast.unparse(factory.func), changed
            return _yaml_of(factory), None, ()
        name = ast.unparse(factory) if factory is not None else ""
        if name in classes:
            return "", name, ()
        return {"dict": "{}", "list": "[]", "tuple": "[]", "set": "[]"}.get(name, f"{name}()"), None, ()
    return _yaml_of(value), None, ()


def _yaml_of(value: ast.expr) -> str:
    """A default as its YAML spelling; numbers keep their source form (``1e-3``)."""
    try:
        literal = ast.literal_eval(value)
    except ValueError:
        return ast.unparse(value)
    if isinstance(literal, bool) or literal is None:
        return {True: "true", False: "false", None: "null"}[literal]
    if isinstance(literal, int | float):
        return ast.unparse(value)
    text = yaml.safe_dump(literal, default_flow_style=True, width=10_000, sort_keys=False)
    return text.removesuffix("\n...\n").strip() if literal != "" else '""'


def read_choices(path: Path = LOADING) -> dict[str, tuple[Any, ...]]:
    """``CHOICES`` of ``agentrl.config.loading``: the valid values of the fields that take a name."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CHOICES" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


# ---------------------------------------------------------------- Markdown
def markdown(doc: str) -> str:
    """A docstring as one line of Markdown for a table cell: RST literals become code spans, and what
    Markdown or a table would read as syntax outside code spans is escaped."""
    text = " ".join(inspect.cleandoc(doc).split())
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    text = re.sub(r":(?:class|func|meth|mod|attr):`~?([^`]+)`", r"`\1`", text)
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else _escape(p) for p in parts)


def _escape(text: str) -> str:
    text = text.replace("\\", "\\\\")
    for char in "|*_[]":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _anchor(path: str) -> str:
    return path.replace(".", "-").replace("_", "-")


def _table(rows: list[tuple[str, ...]], head: tuple[str, ...]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("\n", " ") for cell in row) + " |" for row in rows]
    return lines + [""]


# ---------------------------------------------------------------- the configuration pages
def _section(classes: dict[str, list[Field]], choices: dict[str, tuple[Any, ...]], cls: str, path: str,
             doc: str, overrides: dict[str, str], depth: int) -> list[str]:
    """A heading for the section at ``path``, a table of its fields, then its nested sections."""
    lines = [f"{'#' * min(depth + 1, 6)} `{path}` {{#{_anchor(path)}}}", "", f"{doc} ({_code(cls)})" if doc else
             _code(cls), ""]
    rows, nested = [], []
    for f in classes[cls]:
        key = f"{path}.{f.key}"
        if f.nested:
            nested.append((f, key))
            rows.append((_code(key), "section", f"[{_code(key)}](#{_anchor(key)})", f.doc))
            continue
        doc = f.doc
        if key in choices:
            doc += " Choices: " + ", ".join(_code(str(c)) for c in choices[key]) + "."
        rows.append((_code(key), _code(f.annotation), _code(overrides.get(f.key, f.default)), doc))
    lines += _table(rows, ("key", "type", "default", "meaning"))
    for f, key in nested:
        lines += _section(classes, choices, f.nested, key, f.doc, dict(f.overrides), depth + 1)
    return lines


@functools.cache
def _classes() -> dict[str, list[Field]]:
    return read_classes(*SECTIONS, STAGES)


def config_reference() -> str:
    """The page of ``RunConfig``: every section and field of an ``agentrl train`` config."""
    classes, choices = _classes(), read_choices()
    lines = ["# Configuration reference", "",
             "Every key of a run config (`agentrl train CONFIG`, `agentrl eval`, `agentrl doctor`, `agentrl plan`),",
             "generated from the docstrings of `agentrl/config/` (model, rollout, learning, run) when this site was built. A YAML",
             "file sets any of them by section; the command line overrides them with dotted keys",
             "(`agentrl train cfg.yaml learner.lr=1e-4 'env.kwargs={digits: 3}'`). Unknown keys, wrong types",
             "and unknown choices stop the run when the config loads. The stages before RL",
             "(`agentrl sft | rm | dpo`) are in the [stage configuration reference](stages.md).", ""]
    lines += _table([(f"[{_code(f.key)}](#{_anchor(f.key)})", f.doc) for f in classes["RunConfig"]],
                    ("section", "what"))
    for f in classes["RunConfig"]:
        lines += _section(classes, choices, f.nested, f.key, f.doc, dict(f.overrides), 1)
    return "\n".join(lines)


def stages_reference() -> str:
    """The page of ``SFTConfig``, ``RMConfig`` and ``DPOConfig``: sections shared with ``RunConfig``
    link there; the stages' own sections are listed field by field."""
    classes, choices = _classes(), read_choices()
    run = {f.nested: f.key for f in classes["RunConfig"]}
    run["LoraConfig"] = "learner.lora"
    lines = ["# Stage configuration reference", "",
             "The configs of `agentrl sft | rm | dpo CONFIG [dotted.key=value ...]`, generated from",
             "`agentrl/stages/config.py` when this site was built. The sections they share with a run config",
             "link to the [configuration reference](config.md).", ""]
    own: dict[str, tuple[str, str]] = {}
    for command, cls in STAGE_COMMANDS:
        lines += [f"## `agentrl {command}` {{#agentrl-{command}}}", "", _code(cls), ""]
        rows = []
        for f in classes[cls]:
            if f.nested in run:
                where = f"[{_code(run[f.nested])}](config.md#{_anchor(run[f.nested])})"
                if f.overrides:
                    where += ", defaults " + ", ".join(_code(f"{k}: {v}") for k, v in f.overrides)
            else:
                own.setdefault(f.nested, (f.key, f.doc))
                where = f"[{_code(f.key)}](#{_anchor(f.key)})"
            rows.append((_code(f.key), f.doc, where))
        lines += _table(rows, ("section", "what", "fields"))
    for cls, (key, doc) in own.items():
        lines += _section(classes, choices, cls, key, doc, {}, 1)
    return "\n".join(lines)


# ---------------------------------------------------------------- the CLI page
def subcommands() -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """``agentrl``'s subcommands: name -> (help, parser); serve-reward and serve-env have their own."""
    from agentrl.cli import build_parser
    from agentrl.serving.env_server import build_parser as env_server_parser
    from rewards.server import build_parser as reward_server_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: (a.help or "").removesuffix(" (see --help)") for a in sub._choices_actions}
    own = {"serve-reward": reward_server_parser(), "serve-env": env_server_parser()}
    return {name: (helps.get(name, ""), own.get(name, parser)) for name, parser in sub.choices.items()}


def _argument(action: argparse.Action, parser: argparse.ArgumentParser) -> tuple[str, str, str]:
    """(name, help, default) of one argument, as table cells."""
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += " " + (action.metavar or action.dest.upper())
    else:
        name = action.metavar or action.dest
    text = (action.help or "") % {**vars(action), "prog": parser.prog} if action.help else ""
    if action.choices:
        text += (" " if text else "") + "(choices: " + ", ".join(map(str, action.choices)) + ")"
    default = action.default
    shown = "" if default in (None, False, [], argparse.SUPPRESS) or not action.option_strings else _code(str(default))
    return _code(name), _escape(text), shown


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = parser.formatter_class
    parser.formatter_class = functools.partial(formatter, width=100)  # the same page on every terminal
    try:
        return parser.format_usage().strip()
    finally:
        parser.formatter_class = formatter


def cli_reference() -> str:
    """Every subcommand of ``agentrl`` with its help, usage and arguments."""
    from agentrl.cli import build_parser

    commands = subcommands()
    lines = ["# CLI reference", "",
             "Every subcommand of `agentrl` and its arguments, generated from its argparse parsers when this",
             "site was built (`agentrl COMMAND --help` prints the same). Options may come anywhere among the",
             "overrides (`agentrl train cfg.yaml --run-dir runs/a learner.lr=1e-4`); `agentrl --debug ...` shows",
             "the traceback of an error instead of its one line.", "", "```text", _usage(build_parser()), "```", ""]
    lines += _table([(f"[`agentrl {name}`](#{name})", _escape(text)) for name, (text, _) in commands.items()],
                    ("command", "what"))
    for name, (text, parser) in commands.items():
        lines += [f"## `agentrl {name}` {{#{name}}}", "", _escape(text[:1].upper() + text[1:]) + ".", ""]
        if parser.description and parser.description.rstrip(".") != text.rstrip("."):
            lines += [_escape(parser.description), ""]
        lines += ["```text", _usage(parser), "```", ""]
        rows = [_argument(a, parser) for a in parser._actions if not isinstance(a, argparse._HelpAction)]
        lines += _table(rows, ("argument", "meaning", "default")) if rows else []
    return "\n".join(lines)
