"""The docs site (issue 46, finding 9): README.md is a front door under 250 lines and the manual is a
mkdocs site that builds in strict mode (no broken link or anchor, every page in the nav), offline,
with a configuration reference that lists every field of the run config and a CLI reference that
names every subcommand and option, both generated from the code as the site builds."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import keyword
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def docs_module(name: str) -> typing.Any:
    """A module of docs/ (``_hooks``, ``_reference``), imported as mkdocs imports the hooks."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "docs"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once by ``mkdocs build --strict`` (any warning fails it)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=180, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return out


def page(site: Path, uri: str) -> str:
    return (site / uri.removesuffix(".md") / "index.html").read_text(encoding="utf-8")


def config_keys(cls: type, prefix: str = "") -> list[str]:
    """The dotted YAML key of every leaf field of a config dataclass, from the dataclasses at run time."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        stem = f.name.removesuffix("_")
        key = prefix + (stem if f.name.endswith("_") and keyword.iskeyword(stem) else f.name)
        kind = hints[f.name]
        out += config_keys(kind, key + ".") if dataclasses.is_dataclass(kind) else [key]
    return out


def test_config_reference_lists_every_field_of_the_run_config(site: Path) -> None:
    from agentrl.config import RunConfig

    html = page(site, "reference/config.md")
    keys = config_keys(RunConfig)
    assert {"learner.max_seconds", "rollout.async", "cluster.env_workers.num", "model.warm_start.enabled"} <= set(keys)
    missing = [k for k in keys if f"<code>{k}</code>" not in html]
    assert not missing, f"fields missing from the configuration reference: {missing}"
    # a field's docstring and default come from the source
    row = re.search(r"<code>learner\.max_seconds</code></td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>",
                    html, re.S)
    assert row and "float" in row.group(1) and row.group(3).strip()


def test_stage_reference_lists_the_fields_of_sft_rm_and_dpo(site: Path) -> None:
    from agentrl.config import RunConfig
    from agentrl.stages.config import DPOConfig, RMConfig, SFTConfig

    html = page(site, "reference/stages.md")
    shared = {type(getattr(RunConfig(), f.name)) for f in dataclasses.fields(RunConfig)}
    shared.add(type(RunConfig().learner.lora))  # `lora` of the stages is `learner.lora` of a run
    for cls in (SFTConfig, RMConfig, DPOConfig):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if hints[f.name] in shared:
                continue  # linked to the run config's section
            missing = [k for k in config_keys(hints[f.name], f.name + ".") if f"<code>{k}</code>" not in html]
            assert not missing, f"{cls.__name__}: {missing}"


def test_cli_reference_names_every_subcommand_and_option(site: Path) -> None:
    from agentrl.cli import build_parser

    html = page(site, "reference/cli.md")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {"train", "eval", "doctor", "tasks", "serve-env", "serve-reward"} <= set(sub.choices)
    for name in sub.choices:
        assert f"agentrl {name}</code>" in html, name
    for name, (_, parser) in docs_module("_reference").subcommands().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert f"<code>{option}" in html or f", {option}" in html, f"agentrl {name} {option}"


def test_readme_is_a_front_door() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for part in ("## Two commands", "make demo", "make test", "## Write your own environment",
                 "agentrl tasks init", "agentrl tasks check", "## Where to go next"):
        assert part in text, part
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", text):  # the site drops links to files outside docs/
        assert target.startswith("http") or (ROOT / target).exists(), target


def test_every_docs_page_is_in_the_nav_and_generated_pages_are_not_committed() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(nav: typing.Any) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        items = nav.values() if isinstance(nav, dict) else nav
        return [p for item in items for p in pages(item)]

    in_nav = set(pages(config["nav"]))
    generated = set(docs_module("_hooks").GENERATED) | {"index.md"}
    assert {"reference/config.md", "reference/cli.md"} <= generated
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk <= in_nav, f"docs pages missing from mkdocs.yml's nav: {sorted(on_disk - in_nav)}"
    assert generated <= in_nav and not generated & on_disk
    # offline: no web fonts, none of the plugins that download (social cards, privacy)
    assert config["theme"]["font"] is False
    plugins = {p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]}
    assert not plugins & {"social", "privacy", "material/social", "material/privacy"}
