"""Tool-call formats of current open model families, by name (``ToolEnv(tool_parser=NAME)``,
``env.kwargs.tool_parser`` in a config).

- ``hermes`` (default; Qwen2.5, Hermes): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
- ``qwen3_coder`` (Qwen3-Coder's XML style)::

      <tool_call>
      <function=calculator>
      <parameter=expression>
      2+3
      </parameter>
      </function>
      </tool_call>

  a parameter whose schema type is ``string`` is kept as text (less the newline after its opening
  tag and the one before its closing tag), others are read as JSON;
- ``llama3_json`` (Llama 3.1-3.3): the whole reply is ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``, several separated by ``;``;
- ``pythonic`` (Llama 3.2/4, some tool-use fine-tunes): the whole reply is a Python list of calls
  ``[calculator(expression="2+3"), other(a=1)]``, keyword arguments with literal values, read with
  :mod:`ast` (never evaluated).

Each parser returns every call in order, ``{"name", "arguments"}``, or a :class:`ToolCallError`
for a malformed one (its message goes back to the policy as the tool's response, as for Hermes).
A reply with no call in the parser's format is the final answer.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from agentrl.env import EnvError
from environments.tools import TOOLS_PROMPT, ToolCallError, hermes_call, parse_tool_calls

Call = dict[str, Any] | ToolCallError
_FORMAT_LINE = "For each function call, return a json object"
_QWEN_FN = re.compile(r"<function=([^>\n]*)>(.*?)(</function>|$)", re.DOTALL)
_QWEN_PARAM = re.compile(r"<parameter=([^>\n]*)>(.*?)(</parameter>|$)", re.DOTALL)


def _prompt(instructions: str) -> str:
    """The Hermes tools prompt with its call-format paragraph replaced by ``instructions``."""
    head, _, rest = TOOLS_PROMPT.partition(_FORMAT_LINE)
    tail = rest[rest.index("Each result comes back"):]
    return head + instructions + "\n\n" + tail


def _args(value: Any, name: str) -> dict[str, Any] | ToolCallError:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            pass
    if not isinstance(value, dict):
        return ToolCallError(f"the arguments of {name!r} must be a JSON object")
    return value


def parse_hermes(action: str, schemas: dict[str, dict[str, Any]] | None = None) -> list[Call]:
    """Hermes ``<tool_call>`` JSON calls (:func:`environments.tools.parse_tool_calls`)."""
    return parse_tool_calls(action)


def parse_qwen3_coder(action: str, schemas: dict[str, dict[str, Any]] | None = None) -> list[Call]:
    """Qwen3-Coder's ``<tool_call><function=NAME><parameter=P>VALUE</parameter></function></tool_call>``."""
    out: list[Call] = []
    blocks = re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", action, re.DOTALL)
    for body in blocks:
        functions = _QWEN_FN.findall(body)
        if not functions:
            out.append(ToolCallError("a tool call must hold <function=NAME>...</function>"))
            continue
        for name, inner, closed in functions:
            name = name.strip()
            if not closed:
                out.append(ToolCallError(f"<function={name}> is not closed with </function>"))
                continue
            props = ((schemas or {}).get(name) or {}).get("properties", {})
            args: dict[str, Any] = {}
            bad = None
            for pname, raw, pclosed in _QWEN_PARAM.findall(inner):
                pname = pname.strip()
                if not pclosed:
                    bad = ToolCallError(f"<parameter={pname}> of {name!r} is not closed with </parameter>")
                    break
                value = raw[1:] if raw.startswith("\n") else raw  # the one newline after the tag and the one
                value = value[:-1] if value.endswith("\n") else value  # before </parameter>, not the value's own
                if props.get(pname, {}).get("type") != "string":
                    try:
                        value = json.loads(value)
                    except (json.JSONDecodeError, RecursionError):
                        pass
                args[pname] = value
            out.append(bad if bad is not None else {"name": name, "arguments": args})
    if action.count("<tool_call>") > action.count("</tool_call>"):
        out.append(ToolCallError("a <tool_call> tag is not closed with </tool_call>"))
    return out


def parse_llama3_json(action: str, schemas: dict[str, dict[str, Any]] | None = None) -> list[Call]:
    """Llama 3 JSON calls: the reply is ``{"name", "parameters"}`` (after ``<|python_tag|>``), ``;``-separated."""
    text = action.strip()
    tagged = text.startswith("<|python_tag|>")
    text = text.removeprefix("<|python_tag|>").strip()
    if not text.startswith("{") and not tagged:
        return []
    out: list[Call] = []
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(text):
        try:
            call, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            out.append(ToolCallError(f"the tool call is not valid JSON ({e.msg} at position {e.pos})"))
            break
        except RecursionError:
            out.append(ToolCallError("the tool call is nested too deeply"))
            break
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            out.append(ToolCallError('a tool call must be a JSON object {"name": ..., "parameters": {...}}'))
        else:
            args = _args(call.get("parameters", call.get("arguments", {})), call["name"])
            out.append(args if isinstance(args, ToolCallError) else {"name": call["name"], "arguments": args})
        pos = end
        while pos < len(text) and text[pos] in " \n\t;":
            pos += 1
    return out


def parse_pythonic(action: str, schemas: dict[str, dict[str, Any]] | None = None) -> list[Call]:
    """Pythonic calls: the reply is ``[f(a=1), g(b="x")]`` (literal keyword arguments, via :mod:`ast`)."""
    text = action.strip()
    if not (text.startswith("[") and re.match(r"\[\s*[A-Za-z_][\w.]*\s*\(", text)):
        return []
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return [ToolCallError(f"the tool call list is not valid Python ({getattr(e, 'msg', e)})")]
    if not isinstance(tree, ast.List):
        return [ToolCallError("tool calls must be a Python list: [name(arg=value), ...]")]
    out: list[Call] = []
    for node in tree.elts:
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
            out.append(ToolCallError("each item of the list must be a call name(arg=value, ...)"))
            continue
        name = ast.unparse(node.func)
        if node.args:
            out.append(ToolCallError(f"{name!r}: pass arguments by keyword (name(arg=value))"))
            continue
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
        except (ValueError, SyntaxError, RecursionError):
            out.append(ToolCallError(f"the arguments of {name!r} must be literal values"))
            continue
        out.append({"name": name, "arguments": args})
    return out


PARSERS = {"hermes": parse_hermes, "qwen3_coder": parse_qwen3_coder, "llama3_json": parse_llama3_json,
           "pythonic": parse_pythonic}
PROMPTS = {
    "hermes": TOOLS_PROMPT,
    "qwen3_coder": _prompt("For each function call, reply with:\n<tool_call>\n<function=NAME>\n<parameter=ARG>\n"
                           "VALUE\n</parameter>\n</function>\n</tool_call>"),
    "llama3_json": _prompt('To call a function, reply with only a JSON object {"name": <function-name>, '
                           '"parameters": <args-json-object>} (several separated by ;).'),
    "pythonic": _prompt("To call functions, reply with only a Python list of calls: "
                        "[func_name(arg1=value1, arg2=value2), ...]"),
}


def render_call(fmt: str, name: str, arguments: dict[str, Any]) -> str:
    """One call of tool ``name`` written in format ``fmt`` (what the parser of that name reads back):
    the reference policy of tool envs writes its calls with it."""
    if fmt == "hermes":
        return hermes_call(name, arguments)
    if fmt == "qwen3_coder":
        params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                         for k, v in arguments.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if fmt == "llama3_json":
        return json.dumps({"name": name, "parameters": arguments})
    if fmt == "pythonic":
        return f"[{name}(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")]"
    raise EnvError(f"unknown tool_parser {fmt!r}; valid: {', '.join(PARSERS)}")


def render_calls(fmt: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Several calls ``(tool, arguments)`` in one action of format ``fmt`` (reference actions and scripted
    policies); the parser of that format reads them back in order."""
    if fmt == "pythonic":  # one list of calls
        return "[" + ", ".join(render_call(fmt, n, a)[1:-1] for n, a in calls) + "]"
    return ("; " if fmt == "llama3_json" else "\n").join(render_call(fmt, n, a) for n, a in calls)


def get_parser(name: str) -> Any:
    """The parser called ``name`` (one line naming the valid ones otherwise)."""
    if name not in PARSERS:
        from difflib import get_close_matches

        close = get_close_matches(name, PARSERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise EnvError(f"env.kwargs.tool_parser: unknown tool_parser {name!r}{hint}; valid: {', '.join(PARSERS)}")
    return PARSERS[name]
