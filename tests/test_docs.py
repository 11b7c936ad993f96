"""Every snippet in the docs runs (issue 29, finding 5): each Python block of README.md, the examples'
READMEs and docs/*.md runs as a user would run it (a block the text names as a file, "in
`guess_env.py`", is written under that name first, so later blocks import it), each YAML block loads
as a run config, and each ``agentrl`` command line parses and its config and overrides load. The
commands that train are run in the tests of what they train (tests/test_newcomer*.py,
tests/environments/test_custom_env.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *ROOT.glob("examples/*/README.md"), *ROOT.glob("docs/*.md")])
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
FILE_NAME = re.compile(r"`(\w+\.(?:py|yaml))`[^`\n]*$")


def blocks(doc: Path, lang: str) -> list[tuple[str | None, str]]:
    """(the file name the text before it gives, the code) of every ``lang`` block of ``doc``."""
    text = doc.read_text(encoding="utf-8")
    out = []
    for m in BLOCK.finditer(text):
        if m.group(1) == lang:
            before = text[:m.start()].rstrip().splitlines()[-1] if text[:m.start()].strip() else ""
            name = FILE_NAME.search(before)
            out.append((name.group(1) if name else None, m.group(2)))
    return out


def user_files(doc: Path, where: Path) -> None:
    """Write the blocks ``doc`` names as files (``sort_env.py``, ``guess.yaml``) into ``where``."""
    for lang in ("python", "yaml"):
        for name, code in blocks(doc, lang):
            if name:
                (where / name).write_text(code)


@pytest.mark.parametrize("doc", [d for d in DOCS if blocks(d, "python")], ids=lambda d: str(d.relative_to(ROOT)))
def test_every_python_block_runs(doc: Path, tmp_path: Path) -> None:
    user_files(doc, tmp_path)
    codes = [code for _, code in blocks(doc, "python")]
    if any(DOC_RUN in code for code in codes):  # docs that read a run: one written by the real writers
        sys.path.insert(0, str(ROOT / "tests" / "viewer"))
        from viewkit import tokenizer, write_run

        write_run(tmp_path / DOC_RUN, tokenizer())
        codes = [code.replace(f'"{DOC_RUN}', f'"{tmp_path / DOC_RUN}') for code in codes]
    if not any(DOC_SERVER in code for code in codes):
        return run_blocks(codes, tmp_path)
    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    from servers import serve_env

    # the README's client blocks talk to `agentrl serve-env ... --port 8100`: a real one, on a free port
    with serve_env(DOC_SERVER_ENV) as (url, proc):
        run_blocks([code.replace(DOC_SERVER, url.removeprefix("http://")) for code in codes], tmp_path)
    assert proc.poll() is not None, "the env server outlived the test"


DOC_SERVER, DOC_SERVER_ENV, DOC_RUN = "127.0.0.1:8100", "agentrl/Arithmetic-v0", "runs/tool_math"


def run_blocks(codes: list[str], where: Path) -> None:
    """Run ``codes`` in order in one fresh interpreter, as a user pasting them would."""
    runner = where / "run_blocks.py"
    paths = []
    for i, code in enumerate(codes):
        paths.append(where / f"block_{i}.py")
        paths[-1].write_text(code)
    runner.write_text("import runpy, sys\nfor p in sys.argv[1:]:\n    print('running', p, flush=True)\n"
                      "    runpy.run_path(p, run_name='__main__')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), str(ROOT)])}
    done = subprocess.run([sys.executable, str(runner), *map(str, paths)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.parametrize("doc", [d for d in DOCS if blocks(d, "yaml")], ids=lambda d: str(d.relative_to(ROOT)))
def test_every_yaml_block_is_a_valid_run_config(doc: Path) -> None:
    from agentrl.config import RunConfig
    from agentrl.config.loading import build

    for _, code in blocks(doc, "yaml"):
        build(RunConfig, yaml.safe_load(code))  # unknown keys or wrong types raise ConfigError


def agentrl_commands(doc: Path) -> list[list[str]]:
    """The ``agentrl ...`` command lines of the bash blocks (comments and ``VAR=value`` prefixes dropped)."""
    out = []
    for _, code in blocks(doc, "bash"):
        for line in code.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split(" #")[0], comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words and words[0] == "agentrl" and len(words) > 1:
                out.append(words[1:])
    return out


@pytest.mark.parametrize("doc", [d for d in DOCS if agentrl_commands(d)], ids=lambda d: str(d.relative_to(ROOT)))
def test_every_agentrl_command_parses_and_its_config_loads(doc: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl.cli import STAGES, parse_args
    from agentrl.config import load_config
    from agentrl.stages import config as stage_config

    user_files(doc, tmp_path)
    for argv in agentrl_commands(doc):
        if argv[0] == "serve-reward":
            from rewards.server import build_parser

            build_parser().parse_args(argv[1:])
            continue
        if argv[0] == "serve-env":
            from agentrl.serving.env_server import build_parser as env_server_parser

            env_server_parser().parse_args(argv[1:])
            continue
        args = parse_args(argv)
        config = getattr(args, "config", None)
        if config is None or not hasattr(args, "overrides"):
            continue
        path = next((p for p in (ROOT / config, tmp_path / config) if p.is_file()), None)
        cls = getattr(stage_config, STAGES[args.command][2]) if args.command in STAGES else None
        monkeypatch.chdir(ROOT)
        kwargs = {"cls": cls} if cls else {}
        load_config(path, args.overrides, **kwargs)  # a placeholder (CONFIG) checks the overrides alone


def test_bench_readme_is_a_current_results_page() -> None:
    """bench/README.md: one section per benchmark, each with its command, its date and a table (the
    history of how the numbers were reached stays in git)."""
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 8 and len(text.splitlines()) < 380  # ~18 lines a benchmark, 20 benchmarks
    for section in sections:
        title = section.splitlines()[0]
        assert re.search(r"`(python bench/|flock |make )[^`]*`", section), f"{title}: no command"
        assert re.search(r"20\d\d-\d\d-\d\d", section), f"{title}: no date"
        assert re.search(r"^\|.*\|\n\|[-:| ]+\|$", section, re.M), f"{title}: no table"
        assert not title.lower().startswith(("issue", "what ", "results after")), f"{title}: a diary entry"
