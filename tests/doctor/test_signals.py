"""The tools and reward checks on hand-made episodes: each verdict and figure computed by hand."""

from __future__ import annotations

from agentrl.doctor.reward import check_reward, failure_class, group_spreads
from agentrl.doctor.tools import check_tools, error_class, sniff, turn_kinds
from agentrl.types import Trajectory

HERMES = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


def episode(reward: float = 0.0, group: int = 0, responses: list[str] | None = None,
            calls: list[dict] | None = None, **info) -> Trajectory:
    responses = responses or ["answer"]
    return Trajectory([1], [], reward, "t", group, info={"responses": responses, "turns": len(responses),
                                                          "tool_calls": calls or [], **info})


def call(turn: int, name: str | None = "bash", error: str | None = None) -> dict:
    return {"turn": turn, "name": name, "arguments": {} if name else None, "result": "", "error": error}


def test_sniff_tells_the_field_s_call_formats_apart() -> None:
    assert sniff(HERMES) == ["hermes"]  # not also llama3_json for the JSON line inside the tags
    assert sniff('<tool_call>[{"name": "f", "arguments": {}}]</tool_call>') == ["hermes (a JSON list)"]
    assert sniff('<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>') == ["qwen3_coder"]
    assert sniff('{"name": "bash", "parameters": {"command": "ls"}}') == ["llama3_json"]
    assert sniff('[bash(command="ls")]') == ["pythonic"]
    assert sniff('[TOOL_CALLS] [{"name": "bash"}]') == ["mistral"]
    assert sniff("The answer is 42.") == [] and sniff("") == []


def test_turn_kinds_per_turn() -> None:
    t = episode(responses=["a", "b", "c", "d"], calls=[call(0), call(1, None, "invalid JSON"),
                                                       call(2, "nope", "unknown tool 'nope'")])
    assert turn_kinds(t) == ["parsed", "unparsable", "refused", "none"]
    assert error_class("unknown tool 'nope'; valid: bash") == "unknown tool _"
    assert error_class("invalid JSON at 3: x") == "invalid JSON at _"


def test_a_parser_that_never_matches_the_model_s_format_fails_and_names_it() -> None:
    eps = [episode(responses=[HERMES, HERMES], calls=[call(0, None, "not a JSON object"),
                                                      call(1, None, "not a JSON object")]) for _ in range(4)]
    c = check_tools(eps, [], "llama3_json", True)
    assert c.status == "fail" and "look like hermes calls but the env parses llama3_json" in c.summary, c
    assert "tool_parser" in c.advice and c.details["turn_kinds"] == {"unparsable": 8}
    assert c.details["unparsable_outputs"] == [HERMES] * 3


def test_a_model_that_mostly_writes_another_format_fails_even_when_one_call_parses() -> None:
    eps = [episode(responses=[HERMES]) for _ in range(6)] + [
        episode(responses=['{"name": "bash", "parameters": {}}'], calls=[call(0)])]
    c = check_tools(eps, [], "llama3_json", True)
    assert c.status == "fail" and c.details["formats_seen_unparsed"] == {"hermes": 6}, c
    assert check_tools(eps[:1] + eps[-1:] * 2, [], "llama3_json", True).status == "pass"  # 1 stray vs 2 parsed


def test_calls_that_parse_pass_and_figures_add_up() -> None:
    eps = [episode(1.0, responses=[HERMES, "done"], calls=[call(0)]), episode(0.0, responses=[HERMES], calls=[call(0)])]
    c = check_tools(eps, [], "hermes", True)
    assert c.status == "pass" and c.details["turns"] == 3 and c.details["turn_kinds"] == {"parsed": 2, "none": 1}
    assert c.summary.startswith("2 of 3 turns made a call that ran (67%)")


def test_no_call_at_all_warns_and_reward_without_a_call_warns() -> None:
    silent = [episode(responses=["hello"]) for _ in range(3)]
    assert check_tools(silent, [], "hermes", True).status == "warn"
    assert "no call at all" in check_tools(silent, [], "hermes", True).summary
    eps = [episode(1.0, responses=["42"]), episode(0.0, responses=[HERMES], calls=[call(0)])]
    c = check_tools(eps, [], "hermes", True)
    assert c.status == "warn" and c.details["rewarded_without_a_call"] == 1 and "without a call" in c.summary


def test_reference_calls_that_do_not_parse_fail_and_no_tools_skips() -> None:
    ok = [episode(responses=[HERMES], calls=[call(0)])]
    ref = [episode(responses=[HERMES], calls=[call(0, None, "bad")])]
    assert check_tools(ok, ref, "hermes", True).status == "fail"
    assert check_tools(ok, [], None, False).status == "skip"
    assert check_tools(ok, [episode(failed=True, calls=[call(0, None, "x")])], "hermes", True).status == "pass"


def test_group_spreads_and_failure_classes() -> None:
    eps = [episode(1.0, 0), episode(0.0, 0), episode(1.0, 1), episode(1.0, 1), episode(0.0, 2),
           episode(0.0, 2, failed=True, error="x"), episode(1.0, 3)]
    assert group_spreads(eps) == [0.5, 0.0]  # group 2 has one sample that did not fail; group 3 one sample
    assert failure_class({"error": "StepTimeout: the env step ran past its deadline of 5 s"}) == "timeout"
    assert failure_class({"error": "EnvFailed: the verifier could not run: exit 2"}) == "verifier error"
    assert failure_class({"error": "ZeroDivisionError: division by zero"}) == "env exception"


def test_a_constant_verifier_fails_against_the_reference_answers() -> None:
    eps = [episode(0.5, g // 2) for g in range(8)]
    c = check_reward(eps, [0.5, 0.5], [], 0.2)
    assert c.status == "fail" and "0.5 for every episode" in c.summary and "does not depend" in c.advice
    assert c.details["groups"] == 4 and c.details["groups_without_variance"] == 4
    one = [episode(1.0, g // 2) for g in range(8)]
    assert check_reward(one, [], [], 0.2).status == "fail"  # every answer of an untrained policy rewarded


def test_failures_past_ten_percent_fail_with_the_error_and_fewer_warn() -> None:
    eps = [episode(float(i % 2), i // 2) for i in range(7)] + [
        episode(0.0, 9, failed=True, error="EnvFailed: verifier crashed") for _ in range(3)]
    c = check_reward(eps, [1.0], [0.1, 0.3], 0.2)
    assert c.status == "fail" and "30% of episodes failed" in c.advice and "verifier crashed" in c.advice
    assert c.details["failed_by_class"] == {"verifier error": 3} and c.details["failed"] == 3
    assert c.details["final_step_seconds"] == {"n": 2, "mean": 0.2, "p50": 0.2, "max": 0.3}
    few = [episode(float(i % 2), i // 2) for i in range(20)] + [episode(0.0, 99, failed=True, error="Boom: x")]
    assert check_reward(few, [1.0], [], 0.2).status == "warn"


def test_no_variance_with_a_reference_that_succeeds_warns_and_a_signal_passes() -> None:
    zeros = [episode(0.0, i // 4) for i in range(8)]
    c = check_reward(zeros, [1.0, 1.0], [], 0.2)
    assert c.status == "warn" and "no group varies" in c.summary and c.details["agent_zeros"] == 8
    mixed = [episode(float(i % 2), i // 2) for i in range(8)]
    c = check_reward(mixed, [1.0], [], 0.2)
    assert c.status == "pass" and c.details["reward"]["mean"] == 0.5 and c.details["groups_without_variance"] == 0
    assert check_reward([episode(failed=True, error="x")], [], [], 0.2).status == "fail"
