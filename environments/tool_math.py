"""Math with tools: ``agentrl/CalculatorMath-v0`` and ``agentrl/PythonToolMath-v0``.

Both wrap a math env (``base``, default ``agentrl/GSM8K-v0``; every other keyword argument goes to
it, e.g. ``split="test"`` or ``dataset=...``) in a :class:`~environments.tools.ToolEnv`
(``max_tool_calls``, ``max_turns`` and ``tools_prompt`` are its settings):

- ``calculator``: evaluates an arithmetic expression exactly (numbers, ``+ - * / // % **``,
  parentheses; parsed with :mod:`ast`, never ``eval``; exponents and sizes bounded);
- ``python``: runs code in a stateful :class:`sandbox.PythonSession` (variables persist between
  calls of one episode; the session is started on the first call and torn down at the next
  ``reset`` and at ``close``).

The reference policy (``reference_action``) calls the tool once with the task's last calculation, when
the task carries one that gives the answer (an Arithmetic task's ``expr``; GSM8K's last ``<<a*b=c>>``
annotation of its solution), then gives the inner env's reference answer: the warm start teaches a
model the call format with it.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
from fractions import Fraction
from typing import Any

import agentrl
from environments.tools import TOOLS_PROMPT, Tool, ToolCallError, ToolEnv

_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
MAX_DIGITS = 1000


def calculate(expression: str) -> Fraction:
    """Exact value of an arithmetic expression (see the module docstring); ToolCallError if invalid."""
    if len(expression) > 1000:
        raise ToolCallError("expression too long")
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*").replace("÷", "/").strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise ToolCallError(f"cannot parse {expression!r}: {getattr(e, 'msg', e)}") from None
    try:
        return _eval(tree.body)
    except RecursionError:
        raise ToolCallError("expression nested too deeply") from None


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exp = _eval(node.left), _eval(node.right)
        if exp.denominator != 1 or abs(exp) > 64 or (base == 0 and exp < 0):
            raise ToolCallError("exponents must be whole numbers in -64..64 (and 0 has no negative powers)")
        result = base ** int(exp)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise ToolCallError("division by zero")
        result = Fraction(_BINOPS[type(node.op)](left, right))
    else:
        raise ToolCallError(f"only numbers, + - * / // % ** and parentheses are allowed, not {type(node).__name__}")
    if len(str(result.numerator)) + len(str(result.denominator)) > MAX_DIGITS:
        raise ToolCallError("the result is too large")
    return result


def format_number(value: Fraction) -> str:
    """An integer exactly; anything else as a decimal with up to 12 significant digits."""
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.12g}"


def task_calculation(task: Any) -> str | None:
    """An expression that computes ``task``'s answer: ``metadata["expr"]`` (Arithmetic), else the last
    ``<<expression=result>>`` annotation of a GSM8K solution (``metadata["solution"]``); None when there is
    none or it does not give the answer."""
    meta = task.metadata or {}
    candidates = [meta["expr"]] if meta.get("expr") else re.findall(r"<<([^=<>]+)=[^<>]*>>", str(meta.get("solution", "")))
    if not candidates:
        return None
    try:
        value = calculate(candidates[-1])
    except ToolCallError:
        return None
    return candidates[-1] if format_number(value) == str(task.answer).replace(",", "") else None


class Calculator(Tool):
    """Exact arithmetic on one expression."""

    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. '(48 + 24) / 3'."
    parameters = {"type": "object", "properties": {"expression": {"type": "string",
                                                                  "description": "the expression to evaluate"}},
                  "required": ["expression"]}

    def __call__(self, expression: str) -> str:
        return format_number(calculate(expression))


class PythonTool(Tool):
    """Python code in a persistent sandboxed session (one per episode)."""

    name = "python"
    description = ("Run Python code in a persistent session (variables survive between calls); the value of a "
                   "final expression and anything printed is returned.")
    parameters = {"type": "object", "properties": {"code": {"type": "string", "description": "Python code"}},
                  "required": ["code"]}

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 512, max_output_chars: int = 2000,
                 preload: tuple[str, ...] = ("math", "fractions", "itertools", "collections")) -> None:
        self.timeout_s, self.memory_mb, self.max_output_chars = timeout_s, memory_mb, max_output_chars
        self.preload = tuple(preload)
        self.session: Any = None

    def __call__(self, code: str) -> str:
        import sandbox

        if self.session is None:
            limits = sandbox.Limits(timeout_s=self.timeout_s, memory_mb=self.memory_mb)
            self.session = sandbox.PythonSession(limits, preload=self.preload)
        result = self.session.execute(code)
        out = (result.stdout + result.stderr).strip()
        if result.status == "timeout":
            out += f"\nError: the code ran longer than {self.timeout_s:g} s (the session was restarted)"
        elif result.status in ("memory", "killed"):
            out += f"\nError: the code was stopped ({result.status}; the session was restarted)"
        if len(out) > self.max_output_chars:
            out = out[: self.max_output_chars // 2] + "\n...[output truncated]...\n" + out[-self.max_output_chars // 2:]
        return out or "(no output)"

    def reset(self) -> None:
        self.close()

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def __deepcopy__(self, memo: dict[int, Any]) -> PythonTool:
        """A copy without the live session (each episode's env starts its own)."""
        clone = copy.copy(self)
        clone.session = None
        return clone


class CalculatorMathEnv(ToolEnv):
    """GSM8K (or another math env) with a calculator tool."""

    def __init__(self, base: str = "agentrl/GSM8K-v0", max_tool_calls: int = 4, max_turns: int | None = None,
                 tools_prompt: str | None = None, render_mode: str | None = None, tool_parser: str = "hermes",
                 **base_kwargs: Any) -> None:
        from environments.tool_parsers import PROMPTS, get_parser, render_call

        parse = get_parser(tool_parser)
        super().__init__(agentrl.make(base, **base_kwargs), [Calculator()], max_tool_calls=max_tool_calls,
                         max_turns=max_turns, tools_prompt=tools_prompt or PROMPTS[tool_parser],
                         render_mode=render_mode, parse=None if tool_parser == "hermes" else parse)
        self.render_call = functools.partial(render_call, tool_parser)

    def reference_call(self, task: Any) -> tuple[str, dict[str, Any]] | None:
        expression = task_calculation(task)
        return None if expression is None else ("calculator", {"expression": expression})


class PythonToolMathEnv(ToolEnv):
    """GSM8K (or another math env) with a stateful Python tool."""

    def __init__(self, base: str = "agentrl/GSM8K-v0", max_tool_calls: int = 4, max_turns: int | None = None,
                 timeout_s: float = 5.0, tools_prompt: str = TOOLS_PROMPT, render_mode: str | None = None,
                 **base_kwargs: Any) -> None:
        super().__init__(agentrl.make(base, **base_kwargs), [PythonTool(timeout_s=timeout_s)],
                         max_tool_calls=max_tool_calls, max_turns=max_turns, tools_prompt=tools_prompt,
                         render_mode=render_mode)

    def reference_call(self, task: Any) -> tuple[str, dict[str, Any]] | None:
        expression = task_calculation(task)
        return None if expression is None else ("python", {"code": f"print({expression})"})
