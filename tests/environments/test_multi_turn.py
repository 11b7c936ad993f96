"""MultiTurnExecutor: token-exact segments and masks, budgets, failures, batching; tool envs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agentrl
from agentrl.models import train_tokenizer
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.experience import Experience
from environments.tool_math import Calculator, PythonTool, calculate
from environments.tools import ToolCallError, ToolEnv, parse_tool_calls

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "16 - 3 - 4"}}</tool_call>'
ANSWER = "She makes 9 * 2 = \\boxed{18} dollars."


@pytest.fixture(scope="module")
def tok() -> Any:
    corpus = [CALL, ANSWER, "<tool_response>\n9\n</tool_response>", "Janet's ducks lay 16 eggs per day."] * 5
    return train_tokenizer(corpus, 320)


class ScriptedEngine:
    """Answers the k-th generate call with ``script(k, context_ids)`` for every prompt (+ EOS)."""

    def __init__(self, tok: Any, script: Callable[[int, list[int]], str], finish: str = "stop") -> None:
        self.tok, self.script, self.finish = tok, script, finish
        self.calls: list[list[list[int]]] = []
        self.params: list[SamplingParams] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        k = len(self.calls)
        self.calls.append([list(p) for p in prompts])
        self.params.append(params)
        out = []
        for p in prompts:
            ids = self.tok(self.script(k, p), add_special_tokens=False)["input_ids"]
            ids = ids + [self.tok.eos_token_id] if self.finish == "stop" else ids
            ids = ids[:params.max_new_tokens]
            out.append(Completion(ids, [-0.25] * len(ids), self.finish))
        return out


def calc_env(**kw: Any) -> ToolEnv:
    return agentrl.make("agentrl/CalculatorMath-v0", split="test", limit=4, **kw)


def spans(exp: Experience, b: int, tok: Any) -> tuple[list[str], list[str]]:
    """Decoded runs of generated (action_mask 1) and not generated tokens of sample ``b``."""
    seq = exp.sequences[b][exp.attention_mask[b].bool()].tolist()
    mask = [0] + exp.action_mask[b, :len(seq) - 1].int().tolist()  # token t is generated iff mask[t-1]
    runs: dict[int, list[list[int]]] = {0: [], 1: []}
    prev = None
    for t, m in zip(seq, mask):
        if m != prev:
            runs[m].append([])
            prev = m
        runs[m][-1].append(t)
    return ([tok.decode(r) for r in runs[1]], [tok.decode(r) for r in runs[0]])


@pytest.mark.parametrize("chat", [True, False])
def test_action_mask_is_one_exactly_on_generated_tokens(tok: Any, chat: bool) -> None:
    env = calc_env()
    engine = ScriptedEngine(tok, lambda k, _: CALL if k == 0 else ANSWER)
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64), chat_template=chat)
    task = env.tasks[0]  # Janet's ducks: 18
    [traj] = ex.run([task])
    assert traj.reward == 1.0 and traj.turn_rewards == [0.0, 1.0] and traj.terminated and not traj.truncated
    assert [s.is_action for s in traj.segments] == [True, False, True]
    assert traj.info["turns"] == 2 and traj.info["responses"] == [CALL, ANSWER]
    # token-in/token-out: the second turn continued from exactly prompt + action + feedback
    assert engine.calls[1][0] == traj.prompt_ids + traj.segments[0].token_ids + traj.segments[1].token_ids
    exp = Experience.from_trajectories([traj], tok.pad_token_id)
    assert exp.num_action_tokens == traj.num_action_tokens
    generated, other = spans(exp, 0, tok)
    eos = tok.eos_token
    assert generated == [CALL + eos, ANSWER + eos]
    assert other[0] == tok.decode(traj.prompt_ids)
    assert "<tool_response>\n9\n</tool_response>" in other[1]
    if chat:
        assert other[1] == "<|im_end|>\n<|im_start|>user\n<tool_response>\n9\n</tool_response><|im_end|>\n" \
                           "<|im_start|>assistant\n"
    else:
        assert other[1] == "\n<tool_response>\n9\n</tool_response>\n"
    # engine log-probs sit on the action positions, zeros elsewhere
    assert (exp.engine_logprobs[0][exp.action_mask[0].bool()] == -0.25).all()
    assert (exp.engine_logprobs[0][~exp.action_mask[0].bool()] == 0).all()


def test_many_episodes_batched_per_turn(tok: Any) -> None:
    env = calc_env()
    engine = ScriptedEngine(tok, lambda k, p: CALL if k == 0 and len(p) % 2 == 0 else ANSWER)
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64), n_samples=3)
    trajs = ex.run(env.tasks[:2], group_offset=10)
    assert [t.group_id for t in trajs] == [10, 10, 10, 11, 11, 11]
    assert len(engine.calls[0]) == 6  # every episode's first turn in one call
    assert len(engine.calls) <= 2 and all(t.terminated for t in trajs)


def test_a_turn_cut_at_max_new_tokens_goes_on(tok: Any) -> None:
    env = calc_env()
    engine = ScriptedEngine(tok, lambda k, _: CALL, finish="length")
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=8))
    [traj] = ex.run([env.tasks[0]])
    turns = [s for s in traj.segments if s.is_action]
    assert traj.truncated and not traj.terminated and traj.info["turns"] == len(turns) == env.max_turns
    assert all(len(s.token_ids) == 8 for s in turns) and traj.info["finish_reason"] == "length"
    assert traj.info["end_reason"] == "env_truncated" and traj.reward == 0.0  # the env's tool-call cap ended it


def test_total_budget_truncates(tok: Any) -> None:
    env = calc_env()
    engine = ScriptedEngine(tok, lambda k, _: CALL)
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=200), max_total_tokens=150)
    [traj] = ex.run([env.tasks[0]])
    assert traj.truncated and not traj.terminated and traj.info["end_reason"] == "episode_budget"
    assert len(traj.response_ids) <= 150
    assert all(len(p) - len(traj.prompt_ids) < 150 for p in (c[0] for c in engine.calls))


def test_turn_cap_truncates(tok: Any) -> None:
    env = calc_env(max_tool_calls=2)
    engine = ScriptedEngine(tok, lambda k, _: CALL)
    [traj] = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64)).run([env.tasks[0]])
    assert env.max_turns == 3 and traj.info["turns"] == 3 and traj.truncated and traj.reward == 0.0


class Flaky(ToolEnv):
    """Raises on the second step of every episode whose task id ends in 1."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.turn == 1 and self.task is not None and self.task.id.endswith("1"):
            raise RuntimeError("env blew up")
        return super().step(action)


def test_env_exception_fails_only_that_episode(tok: Any) -> None:
    env = Flaky(agentrl.make("agentrl/GSM8K-v0", split="test", limit=4), [Calculator()])
    engine = ScriptedEngine(tok, lambda k, _: CALL if k == 0 else ANSWER)
    trajs = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64)).run(env.tasks[:2])
    ok, bad = trajs
    assert not ok.info.get("failed") and ok.reward == 1.0
    assert bad.info["failed"] is True and bad.reward == 0.0 and "env blew up" in bad.info["error"]


def test_parse_tool_calls() -> None:
    calls = parse_tool_calls('x <tool_call>{"name": "a", "arguments": {"b": 1}}</tool_call>'
                             '<tool_call>{"name": "c", "arguments": "{\\"d\\": 2}"}</tool_call>'
                             "<tool_call>{oops}</tool_call><tool_call>[1]</tool_call><tool_call>")
    assert calls[0] == {"name": "a", "arguments": {"b": 1}}
    assert calls[1] == {"name": "c", "arguments": {"d": 2}}
    assert [type(c) for c in calls[2:]] == [ToolCallError] * 3
    assert "not closed" in str(calls[-1])
    assert parse_tool_calls("no calls here") == []


def test_invalid_calls_get_clear_messages_and_a_cap() -> None:
    env = calc_env(max_tool_calls=3, max_turns=10)
    env.reset(seed=0)
    obs, r, term, trunc, _ = env.step('<tool_call>{"name": "search", "arguments": {}}</tool_call>')
    assert "unknown tool 'search'; available: calculator" in obs and r == 0.0 and not term
    obs = env.step('<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>')[0]
    assert "missing required argument(s): expression" in obs
    obs = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": 5}}</tool_call>')[0]
    assert "must be of type string" in obs
    obs = env.step(CALL)[0]
    assert "limit of 3 tool calls" in obs


def test_calculator_is_exact_and_safe() -> None:
    tool = Calculator()
    assert tool(expression="(48 + 24) / 3") == "24"
    assert tool(expression="1/3") == "0.333333333333"
    assert tool(expression="2^10 - 0.5") == "1023.5"
    for bad in ["__import__('os').system('true')", "2**10000", "10**64**64", "abs(-1)", "x + 1", "1/0",
                "(" * 300 + "1" + ")" * 300]:
        with pytest.raises(ToolCallError):
            calculate(bad)


def test_python_tool_session_is_stateful_and_torn_down() -> None:
    env = agentrl.make("agentrl/PythonToolMath-v0", split="test", limit=2)
    env.reset(seed=0)
    call = '<tool_call>{"name": "python", "arguments": {"code": %s}}</tool_call>'
    obs = env.step(call % '"x = 6 * 7"')[0]
    assert obs == "<tool_response>\n(no output)\n</tool_response>"
    obs = env.step(call % '"print(x + 1)\\nx * 2"')[0]
    assert "43" in obs and "84" in obs
    tool = env.tools["python"]
    assert isinstance(tool, PythonTool) and tool.session is not None
    env.reset(seed=1)  # a new episode gets a fresh interpreter
    assert tool.session is None
    obs = env.step(call % '"x"')[0]
    assert "NameError" in obs
    env.close()
    assert tool.session is None


def test_chat_template_that_is_not_prefix_stable_falls_back_to_plain_feedback(tok: Any) -> None:
    import copy

    odd = copy.deepcopy(tok)
    odd.chat_template = "{{ messages[-1]['content'] }}{% if add_generation_prompt %}>>{% endif %}"
    env = calc_env()
    ex = MultiTurnExecutor(env, ScriptedEngine(odd, lambda k, _: CALL), odd, SamplingParams(), chat_template=True)
    assert ex.chat is None
    assert odd.decode(ex.feedback_ids("<tool_response>\n9\n</tool_response>", [1])) == \
        "\n<tool_response>\n9\n</tool_response>\n"


def test_feedback_completes_the_turn_end_the_policy_generated(tok: Any) -> None:
    """Qwen-style: the policy's EOS is <|im_end|>, so the feedback starts with the rest ("\\n")."""
    import copy

    qwen = copy.deepcopy(tok)
    qwen.eos_token = "<|im_end|>"
    env = calc_env()
    engine = ScriptedEngine(qwen, lambda k, _: CALL if k == 0 else ANSWER)
    [traj] = MultiTurnExecutor(env, engine, qwen, SamplingParams(max_new_tokens=64), chat_template=True).run(
        [env.tasks[0]])
    text = qwen.decode(traj.response_ids)
    assert text.startswith(CALL + "<|im_end|>\n<|im_start|>user\n<tool_response>")
    assert "<|im_end|><|im_end|>" not in text and traj.reward == 1.0


def test_tool_calls_and_their_results_stay_on_the_trajectory(tok: Any) -> None:
    env = calc_env(max_tool_calls=2, max_turns=4)
    bad = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    engine = ScriptedEngine(tok, lambda k, _: [CALL, bad + CALL, ANSWER][k])
    [traj] = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=96)).run([env.tasks[0]])
    assert traj.info["tool_calls"] == [
        {"turn": 0, "name": "calculator", "arguments": {"expression": "16 - 3 - 4"}, "result": "9", "error": None},
        {"turn": 1, "name": "search", "arguments": {}, "result": "Error: unknown tool 'search'; available: calculator",
         "error": "unknown tool 'search'; available: calculator"},
        {"turn": 1, "name": "calculator", "arguments": {"expression": "16 - 3 - 4"},
         "result": "Error: the limit of 2 tool calls is reached; give your final answer now.",
         "error": "the limit of 2 tool calls is reached; give your final answer now."}]
    assert traj.turn_rewards == [0.0, 0.0, 1.0] and traj.info["end_reason"] == "terminated"
    env.reset(seed=0)
    _, _, _, _, info = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>'
                                '<tool_call>not json</tool_call>')
    assert [c["error"] for c in info["calls"]] == ["division by zero", info["calls"][1]["error"]]
    assert info["calls"][1]["name"] is None and "not valid JSON" in info["calls"][1]["result"]


class StaggeredEnv(agentrl.env.TextEnv):
    """Two turns; episode k's env answers its first turn after 0.06 * k seconds (stragglers), the
    second at once; reward 1 for any second turn."""

    max_turns = 2

    def sample_task(self, rng: Any) -> Any:
        from agentrl.types import Task

        return Task(id="t0", prompt="Janet's ducks lay 16 eggs per day.", answer="18")

    def score(self, action: str, task: Any) -> Any:
        from agentrl.types import RewardResult

        return RewardResult(1.0, {}, {})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.turn = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> Any:
        import time

        self.turn += 1
        if self.turn == 1:
            time.sleep(0.06 * self.delay)
            return "9", 0.0, False, False, {}
        return "", 1.0, True, False, {}


def test_stragglers_are_gathered_for_the_engine(tok: Any) -> None:
    """Eight episodes whose envs answer their first turn 60 ms apart: the engine is not called once per
    straggler (the second turns go in batches once the waiting ones are as many as those stepping), and
    every episode still ends after its second turn."""

    from agentrl.rollout.env_pool import EnvPool

    class Numbered(StaggeredEnv):
        made = 0

        def __deepcopy__(self, memo: dict[int, Any]) -> Numbered:  # each episode's copy: the next delay
            copy = Numbered()
            copy.delay, Numbered.made = Numbered.made, Numbered.made + 1
            return copy

    env = Numbered()
    engine = ScriptedEngine(tok, lambda k, p: CALL)
    ex = MultiTurnExecutor(env, engine, tok, SamplingParams(max_new_tokens=64), n_samples=8, pool=EnvPool(8))
    trajs = ex.run([env.sample_task(None)])
    assert [len(c) for c in engine.calls][0] == 8 and sum(len(c) for c in engine.calls) == 16
    # was 9 (one call per straggler); gathered, the calls at most halve the stepping ones: 8, 4, 2, 1, 1
    assert len(engine.calls) <= 5, [len(c) for c in engine.calls]
    assert all(t.terminated and t.reward == 1.0 and len(t.info["responses"]) == 2 for t in trajs)


def test_a_run_says_how_far_it_is_while_it_runs(tok: Any) -> None:
    """Issue 46, finding 3 (evaluations printed nothing for ~12 minutes): a heartbeat reads the run's
    progress from its own thread, the episodes ended out of all, never going back; a short block says nothing."""
    from agentrl.rollout.env_pool import EnvPool
    from agentrl.runs.tracking import heartbeat

    class Numbered(StaggeredEnv):
        made = 0

        def __deepcopy__(self, memo: dict[int, Any]) -> Numbered:
            copy = Numbered()
            copy.delay, Numbered.made = Numbered.made, Numbered.made + 1
            return copy

    env = Numbered()
    ex = MultiTurnExecutor(env, ScriptedEngine(tok, lambda k, p: CALL), tok, SamplingParams(max_new_tokens=64),
                           n_samples=8, pool=EnvPool(8))
    assert ex.progress() == (0, 0)
    lines: list[str] = []
    with heartbeat("evaluating 1 held-out task", ex.progress, lines.append, every=0.02):
        ex.run([env.sample_task(None)])  # the last env answers after 0.42 s
    assert ex.progress() == (8, 8) and lines, lines
    assert all(ln.startswith("evaluating 1 held-out task: ") and ln.endswith(" s") for ln in lines)
    counted = [ln for ln in lines if "/8 episodes, " in ln]  # before its episodes have started: seconds only
    counts = [int(ln.split(": ")[1].split("/")[0]) for ln in counted]
    assert counted and counts == sorted(counts) and counts[-1] <= 8, lines
    quiet: list[str] = []
    with heartbeat("quick", ex.progress, quiet.append, every=5.0):
        pass
    assert quiet == []
