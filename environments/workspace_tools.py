"""Tools for an agent that works in a computer: ``bash``, ``read_file``, ``write_file``, ``str_replace``,
``submit`` — ordinary :class:`~environments.tools.Tool`\\ s, so they work in every tool-call format
(``environments.tool_parsers``: hermes, qwen3_coder, llama3_json, pythonic).

They act on one episode's :class:`sandbox.workspace.Workspace`, held by a :class:`WorkspaceSession`
that opens it on first use (or takes a started one from a warm
:class:`sandbox.workspace.pool.WorkspacePool`), counts the time the agent's commands take against the
task's agent timeout, and keeps the record of the episode (each call as a command line and the text
it returned).

- ``bash``: one command in the workspace's shell (its working directory, exported variables and
  background jobs persist between calls). Output is stdout and stderr together, cut in the middle
  past ``max_output_chars`` with a visible mark (the workspace's ``[... N bytes of output cut ...]``
  when its ``max_output_bytes`` cut first, else ``[... N characters cut ...]``); a command that runs
  past its timeout is killed and returns its output so far with a note, and the episode goes on.
- ``read_file``: a text file with numbered lines (``cat -n`` style), optionally a line range; a
  directory lists its entries.
- ``write_file``: create or replace a file (parents are made).
- ``str_replace``: the edit tool of SWE-agent and Claude-style agents: ``old_str`` must occur exactly
  once in the file (an error says how often it occurs, and where, otherwise); the reply shows the
  edited lines.
- ``submit``: the agent is done; the env ends the episode and grades the computer's final state.

A bad call (no such file, ``old_str`` not unique, an empty command, a binary file) comes back as the
tool's error text, never as a failed episode; only an infrastructure failure (the workspace could
not start or stopped answering: :class:`sandbox.workspace.WorkspaceError`) fails the episode.
Relative paths are from the task's working directory (``WORKDIR`` of its Dockerfile).
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from environments.tools import Tool, ToolCallError
from sandbox.workspace import Workspace, WorkspaceSpec, open_workspace
from sandbox.workspace.pool import Closer, WorkspacePool
from sandbox.workspace.recycle import Recycler

MAX_FILE_BYTES = 1 << 20  # read_file shows and str_replace edits at most this much of a file
CUT_MARK = "\n[... {n} characters cut ...]\n"


def cut_text(text: str, limit: int) -> str:
    """``text`` with at most ``limit`` characters: its head and tail around a visible mark."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[len(text) - (limit - limit // 2):]
    return head + CUT_MARK.format(n=len(text) - len(head) - len(tail)) + tail


def numbered(lines: list[str], first: int) -> str:
    """Lines as ``cat -n`` shows them, the first numbered ``first``."""
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(lines, first))


class WorkspaceSession:
    """One episode's workspace (opened on first use) and the record of what the agent did in it.

    ``start(spec)`` begins an episode (closing the last one's workspace); ``workspace`` opens it;
    ``record(command, output)`` appends to ``commands``/``outputs``; ``time_left()`` is the agent's
    time (``agent_timeout_s``) minus what its commands took so far. A deep copy (one per episode of a
    batch) shares nothing live: it has no workspace and an empty record.
    """

    def __init__(self, backend: str = "local", pool: WorkspacePool | None = None, graders: Any = None,
                 closer: Closer | None = None, recycle: bool = True) -> None:
        self.backend, self.pool, self.graders = backend, pool, graders  # graders: a GraderPool (or None)
        # sealed workspaces end in the background; with ``recycle`` (the local backend) their runtimes are
        # reset and start the next episodes (``sandbox.workspace.recycle``)
        self.closer = closer or (Recycler(backend) if recycle and backend == "local" else Closer())
        self.owns_pool = True  # a copy uses the pools; the session that made them closes them
        self.spec: WorkspaceSpec | None = None
        self.agent_timeout_s: float | None = None
        self._ws: Workspace | None = None
        self.commands: list[str] = []
        self.outputs: list[str] = []
        self.submitted = False
        self.time_used = 0.0

    def start(self, spec: WorkspaceSpec, agent_timeout_s: float | None = None) -> None:
        """Begin an episode in a workspace built from ``spec`` (opened when first needed)."""
        self.close()
        self.spec, self.agent_timeout_s = spec, agent_timeout_s
        self.commands, self.outputs = [], []
        self.submitted, self.time_used = False, 0.0

    @property
    def started(self) -> bool:
        """Whether the episode's workspace is open."""
        return self._ws is not None

    @property
    def workspace(self) -> Workspace:
        """The episode's workspace, opened (built from the spec) on first use."""
        if self._ws is None:
            if self.spec is None:
                raise RuntimeError("WorkspaceSession.start(spec) was not called")
            if self.pool:
                self._ws = self.pool.acquire(self.spec)
            elif isinstance(self.closer, Recycler):
                self._ws = self.closer.open(self.spec)
            else:
                self._ws = open_workspace(self.spec, self.backend)
        return self._ws

    def time_left(self) -> float:
        """Seconds the agent's commands may still take (infinite without an agent timeout)."""
        return float("inf") if self.agent_timeout_s is None else self.agent_timeout_s - self.time_used

    def record(self, command: str, output: str) -> None:
        self.commands.append(command)
        self.outputs.append(output)

    def detach(self) -> Workspace | None:
        """Hand the open workspace over to the caller (who closes it); the session holds none after."""
        ws, self._ws = self._ws, None
        return ws

    def close(self) -> None:
        """Close the episode's workspace (the pool, if any, stays: see :meth:`shutdown`)."""
        ws = self.detach()
        if ws is not None:
            ws.close()

    def release(self, ws: Workspace) -> None:
        """Close ``ws``, whose processes have ended (sealed), in the background; :meth:`shutdown` waits."""
        self.closer.submit(ws)

    def shutdown(self) -> None:
        """Close the workspace, and the warm pool, the grader pool and the background closes if this session
        made them (waiting for those under way)."""
        self.close()
        for pool in (self.pool, self.graders, self.closer) if self.owns_pool else ():
            if pool is not None:
                pool.close()

    def __deepcopy__(self, memo: dict[int, Any]) -> WorkspaceSession:
        clone = WorkspaceSession(self.backend, self.pool, self.graders, self.closer)
        clone.owns_pool = False
        clone.spec, clone.agent_timeout_s = self.spec, self.agent_timeout_s
        memo[id(self)] = clone
        return clone


class WorkspaceTool(Tool):
    """A tool acting on a :class:`WorkspaceSession`'s workspace."""

    def __init__(self, session: WorkspaceSession) -> None:
        self.session = session

    def abspath(self, path: str) -> str:
        """``path`` as the workspace resolves it (relative paths are from the task's working directory)."""
        if not isinstance(path, str) or not path.strip():
            raise ToolCallError("the path is empty")
        spec = self.session.spec
        return posixpath.normpath(posixpath.join(spec.workdir if spec else "/", path))

    def read_text(self, path: str, limit: int = MAX_FILE_BYTES) -> tuple[str, bool]:
        """(the file's text, whether it was longer than ``limit`` bytes); a one-line ToolCallError if it
        cannot be read as text."""
        try:
            data = self.session.workspace.read_file(path, max_bytes=limit + 1)
        except OSError as e:
            if "Is a directory" in str(e):
                raise ToolCallError(f"{path} is a directory") from None
            raise ToolCallError(f"cannot read {path}: {e}") from None
        try:
            return data[:limit].decode("utf-8"), len(data) > limit
        except UnicodeDecodeError:
            if len(data) > limit:  # a multi-byte character cut at the limit
                try:
                    return data[:limit].decode("utf-8", "ignore"), True
                except UnicodeDecodeError:
                    pass
            raise ToolCallError(f"{path} is a binary file, not text; look at it with bash (e.g. xxd {path} | head)") \
                from None

    def write_text(self, path: str, text: str) -> None:
        try:
            self.session.workspace.write_file(path, text)
        except OSError as e:
            raise ToolCallError(f"cannot write {path}: {e}") from None


class BashTool(WorkspaceTool):
    """A shell command in the workspace (see the module docstring)."""

    name = "bash"
    description = ("Run a bash command in the computer. The shell keeps its state between calls (working directory, "
                   "exported variables, background jobs). Returns stdout and stderr together, with a note when the "
                   "exit code is not 0 or the command ran past its timeout (it is then killed). Long outputs are cut "
                   "in the middle. No network.")

    def __init__(self, session: WorkspaceSession, timeout_s: float = 60.0, max_timeout_s: float = 600.0,
                 max_output_chars: int = 10000) -> None:
        super().__init__(session)
        self.timeout_s, self.max_timeout_s, self.max_output_chars = timeout_s, max_timeout_s, max_output_chars
        self.parameters = {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the bash command to run"},
                "timeout": {"type": "number", "description": f"seconds before the command is killed (default "
                                                              f"{timeout_s:g}, at most {max_timeout_s:g})"}},
            "required": ["command"]}

    def __call__(self, command: str, timeout: float | None = None) -> str:
        if not command.strip():
            raise ToolCallError("the command is empty")
        if timeout is not None and timeout <= 0:
            raise ToolCallError("timeout must be a positive number of seconds")
        wanted = min(float(timeout or self.timeout_s), self.max_timeout_s)
        left = self.session.time_left()
        if left <= 0:
            raise ToolCallError("the time for this task is up; the command was not run")
        result = self.session.workspace.exec(command, timeout_s=min(wanted, left))
        self.session.time_used += result.duration_s
        notes = result.text()[len(result.output):]  # the timeout / exit code lines, never cut
        text = cut_text(result.output, self.max_output_chars) + notes
        if result.timed_out and left < wanted:
            text += "\n[the time for this task is up]"
        return text if text.strip() else "(no output)"


class ReadFileTool(WorkspaceTool):
    """A text file with numbered lines, or a directory's entries."""

    name = "read_file"
    description = ("Show a text file with numbered lines (all of it, or lines start_line..end_line, both included, "
                   "counted from 1). A directory shows its entries.")
    parameters = {"type": "object", "properties": {
        "path": {"type": "string", "description": "the file (absolute, or relative to the working directory)"},
        "start_line": {"type": "integer", "description": "first line to show (default 1)"},
        "end_line": {"type": "integer", "description": "last line to show (default: the end; -1 also means the end)"}},
        "required": ["path"]}

    def __init__(self, session: WorkspaceSession, max_lines: int = 400, max_output_chars: int = 10000) -> None:
        super().__init__(session)
        self.max_lines, self.max_output_chars = max_lines, max_output_chars

    def __call__(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        path = self.abspath(path)
        try:
            text, cut = self.read_text(path)
        except ToolCallError as e:
            if str(e).endswith("is a directory"):
                return self.listing(path)
            raise
        lines = text.splitlines()
        first = 1 if start_line is None else start_line
        if not lines:
            return f"({path} is empty)"
        if first > len(lines):
            raise ToolCallError(f"start_line {first} is past the end of {path} ({len(lines)} lines)")
        last = len(lines) if end_line in (None, -1) else end_line
        if first < 1 or last < first:
            raise ToolCallError(f"bad line range {first}..{last}: lines count from 1 and end_line must be >= start_line")
        wanted = min(last, len(lines))
        last = min(wanted, first + self.max_lines - 1)
        out = cut_text(numbered(lines[first - 1:last], first), self.max_output_chars)
        if last < wanted or (cut and last == len(lines)):  # cut short of what was asked
            total = f"{len(lines)}{'+' if cut else ''}"
            out += f"\n[lines {first}-{last} of {total} shown; read on with start_line={last + 1}]"
        return out

    def listing(self, path: str) -> str:
        try:
            entries = self.session.workspace.list(path)
        except OSError as e:
            raise ToolCallError(f"cannot list {path}: {e}") from None
        rows = [f"{e.name}{'/' if e.kind == 'dir' else ''}" + (f"  ({e.size} bytes)" if e.kind == "file" else "")
                for e in entries]
        return cut_text(f"{path} is a directory with {len(rows)} entries:\n" + "\n".join(rows), self.max_output_chars)


class WriteFileTool(WorkspaceTool):
    """Create or replace a file."""

    name = "write_file"
    description = "Create a file, or replace its contents (missing parent directories are made)."
    parameters = {"type": "object", "properties": {
        "path": {"type": "string", "description": "the file (absolute, or relative to the working directory)"},
        "content": {"type": "string", "description": "the whole new contents"}},
        "required": ["path", "content"]}

    def __call__(self, path: str, content: str) -> str:
        path = self.abspath(path)
        self.write_text(path, content)
        return f"Wrote {len(content.encode())} bytes ({len(content.splitlines())} lines) to {path}."


class StrReplaceTool(WorkspaceTool):
    """Replace the one occurrence of ``old_str`` in a file by ``new_str``."""

    name = "str_replace"
    description = ("Edit a text file: replace old_str, which must occur exactly once in the file (whitespace and "
                   "indentation included; add surrounding lines to make it unique), by new_str (omit it to delete "
                   "old_str). Shows the edited lines.")
    parameters = {"type": "object", "properties": {
        "path": {"type": "string", "description": "the file (absolute, or relative to the working directory)"},
        "old_str": {"type": "string", "description": "the exact text to replace"},
        "new_str": {"type": "string", "description": "the text to put in its place (default: empty)"}},
        "required": ["path", "old_str"]}

    def __init__(self, session: WorkspaceSession, context_lines: int = 3) -> None:
        super().__init__(session)
        self.context_lines = context_lines

    def __call__(self, path: str, old_str: str, new_str: str = "") -> str:
        path = self.abspath(path)
        if not old_str:
            raise ToolCallError("old_str is empty; give the exact text to replace (write_file replaces a whole file)")
        if old_str == new_str:
            raise ToolCallError("old_str and new_str are the same; no change made")
        text, cut = self.read_text(path)
        if cut:
            raise ToolCallError(f"{path} is larger than {MAX_FILE_BYTES} bytes; edit it with bash (e.g. sed)")
        at = text.find(old_str)
        if at < 0:
            hint = (" (it does occur with other leading/trailing whitespace)" if old_str.strip()
                    and old_str.strip() in text else "")
            raise ToolCallError(f"old_str was not found in {path}{hint}; no change made. It must match exactly, "
                                f"whitespace and indentation included (read_file shows the file)")
        starts = [at]
        while (nxt := text.find(old_str, starts[-1] + 1)) >= 0 and len(starts) < 1000:
            starts.append(nxt)
        if len(starts) > 1:
            where = ", ".join(str(text.count("\n", 0, s) + 1) for s in starts[:10])
            raise ToolCallError(f"old_str occurs {len(starts)} times in {path} (at lines {where}"
                                f"{', ...' if len(starts) > 10 else ''}); no change made: include more surrounding "
                                f"lines to make it unique")
        new_text = text[:at] + new_str + text[at + len(old_str):]
        self.write_text(path, new_text)
        first = text.count("\n", 0, at) + 1
        last = first + new_str.count("\n")
        lines = new_text.splitlines()
        lo, hi = max(1, first - self.context_lines), min(len(lines), last + self.context_lines)
        shown = numbered(lines[lo - 1:hi], lo) if lines else "(the file is now empty)"
        return f"Edited {path} (one occurrence replaced). Lines {lo}-{hi} now read:\n{shown}"


class SubmitTool(WorkspaceTool):
    """The agent is done: the env grades the computer's final state."""

    name = "submit"
    description = "Call this when the task is done: it ends your work, and the computer's final state is graded."
    parameters = {"type": "object", "properties": {}, "required": []}

    def __call__(self) -> str:
        self.session.submitted = True
        return "Submitted; the computer's final state will be graded."


def workspace_tools(session: WorkspaceSession, command_timeout_s: float = 60.0, max_output_chars: int = 10000
                    ) -> list[Tool]:
    """The five tools on ``session``: bash, read_file, write_file, str_replace, submit."""
    return [BashTool(session, timeout_s=command_timeout_s, max_output_chars=max_output_chars),
            ReadFileTool(session, max_output_chars=max_output_chars), WriteFileTool(session),
            StrReplaceTool(session), SubmitTool(session)]


def call_line(name: str, arguments: dict[str, Any]) -> str:
    """A call as one entry of ``info["commands"]``: a bash command as itself, other tools as NAME {args}."""
    if name == "bash" and isinstance(arguments.get("command"), str) and set(arguments) <= {"command", "timeout"}:
        return arguments["command"]
    return f"{name} {json.dumps(arguments, ensure_ascii=False)}" if arguments else name
