"""Tool-call formats by name: each parser reads its family's calls, malformed ones come back to the
policy as an error in the tool response, and a tool env picks its parser from the config."""

from __future__ import annotations

import pytest

import agentrl
from environments.tool_parsers import PARSERS, get_parser
from environments.tools import ToolCallError
from tests.adapters.conftest import train

SCHEMAS = {"calculator": {"type": "object", "properties": {"expression": {"type": "string"}}},
           "lookup": {"type": "object", "properties": {"key": {"type": "integer"}, "full": {"type": "boolean"}}}}
GOOD = {
    "hermes": '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=calculator>\n<parameter=expression>\n2+3\n</parameter>\n</function>\n"
                   "</tool_call>",
    "llama3_json": '{"name": "calculator", "parameters": {"expression": "2+3"}}',
    "pythonic": '[calculator(expression="2+3")]',
}
MALFORMED = {
    "hermes": ['<tool_call>{"name": "calculator", "arguments": {</tool_call>', "<tool_call>{}"],
    "qwen3_coder": ["<tool_call>\n<function=calculator>\n<parameter=expression>\n2+3\n</function>\n</tool_call>",
                    "<tool_call>\ncalculator(2+3)\n</tool_call>", "<tool_call>\n<function=calculator>\n"],
    "llama3_json": ['{"name": "calculator", "parameters": {"expression": "2+3"}', '{"parameters": {}}',
                    '<|python_tag|>calculator("2+3")'],
    "pythonic": ['[calculator(expression="2+3"', "[calculator(1 + 2)]", "[calculator(expression=x)]"],
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parser_reads_its_format(name):
    assert get_parser(name)(GOOD[name], SCHEMAS) == [{"name": "calculator", "arguments": {"expression": "2+3"}}]
    assert get_parser(name)("The answer is 5.", SCHEMAS) == []


@pytest.mark.parametrize("name,action", [(n, a) for n, acts in MALFORMED.items() for a in acts])
def test_malformed_calls_are_errors(name, action):
    calls = get_parser(name)(action, SCHEMAS)
    assert calls and any(isinstance(c, ToolCallError) for c in calls), calls


def test_several_calls_and_typed_arguments():
    two = '{"name": "lookup", "parameters": {"key": 3}}; {"name": "calculator", "parameters": {"expression": "1"}}'
    assert [c["name"] for c in get_parser("llama3_json")(two, SCHEMAS)] == ["lookup", "calculator"]
    xml = "<tool_call>\n<function=lookup>\n<parameter=key>\n7\n</parameter>\n<parameter=full>\ntrue\n</parameter>\n" \
          "</function>\n</tool_call>"
    assert get_parser("qwen3_coder")(xml, SCHEMAS) == [{"name": "lookup", "arguments": {"key": 7, "full": True}}]
    py = '[lookup(key=7, full=True), calculator(expression="1*2")]'
    assert get_parser("pythonic")(py, SCHEMAS)[0] == {"name": "lookup", "arguments": {"key": 7, "full": True}}
    assert get_parser("pythonic")("[1, 2, 3]", SCHEMAS) == []  # a list answer is not a call
    with pytest.raises(ValueError, match="unknown tool_parser 'xml'; valid: hermes"):
        get_parser("xml")


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_tool_env_feeds_back_results_and_malformed_calls(name):
    env = agentrl.make("agentrl/CalculatorMath-v0", base="agentrl/Arithmetic-v0", digits=1, tool_parser=name)
    obs, _ = env.reset(seed=0)
    prompt = env.task.prompt[0]["content"]
    assert ("<function=" in prompt) == (name == "qwen3_coder") and ("[func_name(" in prompt) == (name == "pythonic")
    out, reward, done, _, _ = env.step(GOOD[name])
    assert out == "<tool_response>\n5\n</tool_response>" and not done
    out, _, done, _, _ = env.step(MALFORMED[name][0])
    assert out.startswith("<tool_response>\nError: ") and not done
    _, reward, done, _, _ = env.step(env.reference_answer(env.task))
    assert (reward, done) == (1.0, True)


@pytest.mark.slow
def test_tool_parser_from_config_trains_two_steps(tmp_path, tiny):
    env = {"id": "agentrl/CalculatorMath-v0",
           "kwargs": {"base": "agentrl/Arithmetic-v0", "digits": 1, "tool_parser": "pythonic", "max_tool_calls": 1}}
    steps = train(tmp_path, tiny, env, "data.prompts_per_step=2")
    assert all(r["samples_used"] == 8 for r in steps)
