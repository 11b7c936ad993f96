"""The workspace tools on a real local workspace: bash state and cuts, read_file ranges, write_file,
str_replace's exactly-once rule, submit, the session's record, and every call format round trip."""

from __future__ import annotations

import copy

import pytest
from wscheck import leftovers

from environments.tool_parsers import PARSERS, render_calls
from environments.tools import ToolCallError
from environments.workspace_tools import (
    CUT_MARK,
    BashTool,
    ReadFileTool,
    StrReplaceTool,
    SubmitTool,
    WorkspaceSession,
    WriteFileTool,
    call_line,
    cut_text,
    workspace_tools,
)
from sandbox.workspace import WorkspaceSpec
from sandbox.workspace.dockerfile import parse_dockerfile

DOCKERFILE = """FROM ubuntu:24.04
WORKDIR /app
RUN printf 'alpha\\nbeta\\ngamma\\nbeta\\n' > words.txt && printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod +x run.sh
RUN mkdir -p sub && head -c 300 /dev/urandom > blob.bin
"""


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    """After the module's tests (and the workspaces they opened) nothing of a workspace is left."""
    yield
    assert not leftovers()


@pytest.fixture(scope="module")
def session(no_workspace_left):
    df = parse_dockerfile(DOCKERFILE)
    s = WorkspaceSession("local")
    s.start(WorkspaceSpec(steps=df.steps, workdir=df.workdir, env=df.env, name="tools"), agent_timeout_s=120)
    yield s
    s.close()


def test_bash_keeps_shell_state_and_notes_exit_codes(session) -> None:
    bash = BashTool(session)
    assert bash("pwd") == "/app\n"
    bash("cd sub && export GREETING=hello")
    assert bash("pwd; echo $GREETING") == "/app/sub\nhello\n"
    assert bash("cd /app && false").endswith("[exit code 1]")
    assert bash("true") == "(no output)"
    with pytest.raises(ToolCallError, match="empty"):
        bash("   ")


def test_bash_cuts_long_output_with_a_visible_mark(session) -> None:
    out = BashTool(session, max_output_chars=400)("seq 1 5000")
    assert len(out) < 500 and out.startswith("1\n2\n") and out.rstrip().endswith("5000")
    assert "characters cut ...]" in out or "bytes of output cut" in out


def test_bash_timeout_kills_the_command_and_the_episode_goes_on(session) -> None:
    bash = BashTool(session)
    out = bash("echo started; sleep 30", timeout=1)
    assert out.startswith("started") and "timeout and was killed" in out
    assert bash("echo still here") == "still here\n"


def test_agent_time_runs_out() -> None:
    s = WorkspaceSession("local")
    s.start(WorkspaceSpec(workdir="/app", name="short"), agent_timeout_s=1.0)
    try:
        bash = BashTool(s)
        out = bash("sleep 20")
        assert "[the time for this task is up]" in out and s.time_left() <= 0.05
        with pytest.raises(ToolCallError, match="time for this task is up"):
            bash("echo again")
    finally:
        s.close()


def test_read_file_numbers_lines_and_reads_ranges(session) -> None:
    read = ReadFileTool(session, max_lines=2)
    assert read("words.txt", start_line=2, end_line=3) == "     2\tbeta\n     3\tgamma"
    first = read("/app/words.txt")
    assert first.startswith("     1\talpha\n     2\tbeta") and "[lines 1-2 of 4 shown; read on with start_line=3]" in first
    assert read("words.txt", start_line=4, end_line=-1) == "     4\tbeta"
    listing = read(".")
    assert "words.txt  (" in listing and "sub/" in listing and "is a directory" in listing
    for args, message in [({"path": "nope.txt"}, "cannot read /app/nope.txt"),
                          ({"path": "blob.bin"}, "binary file"),
                          ({"path": "words.txt", "start_line": 9}, "past the end"),
                          ({"path": "words.txt", "start_line": 3, "end_line": 2}, "bad line range"),
                          ({"path": ""}, "empty")]:
        with pytest.raises(ToolCallError, match=message):
            read(**args)


def test_write_file_makes_parents(session) -> None:
    out = WriteFileTool(session)("new/dir/notes.md", "one\ntwo\n")
    assert out == "Wrote 8 bytes (2 lines) to /app/new/dir/notes.md."
    assert session.workspace.read_file("/app/new/dir/notes.md") == b"one\ntwo\n"
    with pytest.raises(ToolCallError, match="cannot write /usr/x"):
        WriteFileTool(session)("/usr/x", "no")


def test_str_replace_needs_exactly_one_occurrence(session) -> None:
    edit = StrReplaceTool(session)
    with pytest.raises(ToolCallError, match=r"old_str occurs 2 times in /app/words.txt \(at lines 2, 4\)"):
        edit("words.txt", "beta", "BETA")
    with pytest.raises(ToolCallError, match="was not found"):
        edit("words.txt", "delta", "x")
    with pytest.raises(ToolCallError, match="other leading/trailing whitespace"):
        edit("words.txt", "  gamma  ", "x")
    with pytest.raises(ToolCallError, match="empty"):
        edit("words.txt", "", "x")
    with pytest.raises(ToolCallError, match="the same"):
        edit("words.txt", "alpha", "alpha")
    assert session.workspace.read_file("words.txt") == b"alpha\nbeta\ngamma\nbeta\n"  # no failed call changed it
    out = edit("words.txt", "gamma\nbeta", "gamma\nBETA\nextra")
    assert out.startswith("Edited /app/words.txt") and "     4\tBETA\n     5\textra" in out
    assert session.workspace.read_file("words.txt") == b"alpha\nbeta\ngamma\nBETA\nextra\n"
    edit("words.txt", "extra\n")  # no new_str: deleted
    assert session.workspace.read_file("words.txt") == b"alpha\nbeta\ngamma\nBETA\n"


def test_str_replace_keeps_the_file_mode(session) -> None:
    StrReplaceTool(session)("run.sh", "echo hi", "echo edited")
    assert BashTool(session)("./run.sh") == "edited\n"


def test_overlapping_occurrences_count_as_several(session) -> None:
    WriteFileTool(session)("aaa.txt", "aaa\n")
    with pytest.raises(ToolCallError, match="occurs 2 times"):
        StrReplaceTool(session)("aaa.txt", "aa", "b")


def test_submit_marks_the_session() -> None:
    s = WorkspaceSession("local")
    s.start(WorkspaceSpec(name="x"))
    assert not s.submitted and "graded" in SubmitTool(s)() and s.submitted
    assert not s.started  # submit alone never opens a workspace


def test_a_deep_copy_shares_nothing_live(session) -> None:
    session.record("ls", "out")
    clone = copy.deepcopy(session)
    assert clone.spec is session.spec and not clone.started and clone.commands == [] and session.commands


def test_cut_text_and_call_lines() -> None:
    assert cut_text("abc", 10) == "abc"
    cut = cut_text("x" * 50 + "y" * 50, 20)
    assert cut == "x" * 10 + CUT_MARK.format(n=80) + "y" * 10
    assert call_line("bash", {"command": "ls -la"}) == "ls -la"
    assert call_line("read_file", {"path": "a"}) == 'read_file {"path": "a"}'
    assert call_line("submit", {}) == "submit"


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_tool_calls_round_trip_in_every_format(fmt: str) -> None:
    """What render_calls writes, the format's parser reads back exactly (text with quotes, newlines,
    a trailing newline, backslashes and non-ASCII characters included)."""
    tools = {t.name: t for t in workspace_tools(WorkspaceSession())}
    schemas = {n: t.parameters for n, t in tools.items()}
    calls = [("write_file", {"path": "/app/a b.py", "content": 'print("hé")\n\tx = \'\\n\'\n'}),
             ("bash", {"command": "cat '/app/a b.py' | grep -c x", "timeout": 5}),
             ("str_replace", {"path": "a.py", "old_str": "x = 1", "new_str": "x = 2\n"}), ("submit", {})]
    parsed = PARSERS[fmt](render_calls(fmt, calls), schemas)
    assert [(c["name"], c["arguments"]) for c in parsed] == calls
