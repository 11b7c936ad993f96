"""mkdocs hooks (``hooks:`` in mkdocs.yml): the pages made from the code and the README as the site builds.

``index.md`` is README.md with its links made relative to docs/; ``reference/config.md``,
``reference/stages.md`` and ``reference/cli.md`` come from ``_reference`` (the config dataclasses'
source and the CLI's parsers). None of them is a file in the repository, so none can go stale. The API
page's docstrings are reST-flavoured: their roles (``:class:`Task` ``) are shown as plain code.
"""

from __future__ import annotations

import re
from pathlib import Path

from _reference import cli_reference, config_reference, stages_reference
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"reference/config.md": config_reference, "reference/stages.md": stages_reference,
             "reference/cli.md": cli_reference}
LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+)(#[^)\s]*)?\)")
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):(?=<code>)")


def front_page(readme: str) -> str:
    """README.md as the site's first page: ``docs/X.md`` links point at the page, links to other files of
    the repository (which are not on the site) become their text."""
    def relink(m: re.Match[str]) -> str:
        text, target, anchor = m.group(1), m.group(2), m.group(3) or ""
        if target.startswith(("http://", "https://")):
            return m.group(0)
        if target.startswith("docs/"):
            return f"[{text}]({target.removeprefix('docs/')}{anchor})"
        return text

    return LINK.sub(relink, readme)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site's files."""
    pages = {"index.md": front_page((ROOT / "README.md").read_text(encoding="utf-8"))}
    pages.update({uri: make() for uri, make in GENERATED.items()})
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


def on_page_content(html: str, **kwargs: object) -> str:
    """Drop the reST roles docstrings put before a code span (``:meth:`score` `` -> ``score``)."""
    return ROLE.sub("", html)
