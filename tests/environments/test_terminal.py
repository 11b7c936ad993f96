"""``agentrl/Terminal-v0``: every family passes the conformance suite in real workspaces (the oracle 1.0, a
no-op, a random and a random shell agent 0.0, the same seed the same task), difficulty means more,
splits are disjoint, and the checker grades the tree, not the transcript."""

from __future__ import annotations

import json
import re
import subprocess
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from wscheck import leftovers

import agentrl
from agentrl.env import EnvError
from environments.terminal import checks
from environments.terminal.catalog import load_all
from environments.terminal.env import TerminalEnv, generate, split_of
from environments.terminal.families import Draw
from environments.tool_parsers import render_calls
from sandbox.workspace import open_workspace

FAMILIES = list(load_all())
# commands a random shell user might type: none of them does a task's work
RANDOM_COMMANDS = ["ls -la", "cat *.txt", "echo 0 > answer.txt", "touch answer.txt sorted.txt users.txt",
                   "rm -rf ./*", "find . -type f | head", "mkdir -p out && cp -r . out 2>/dev/null; true", "pwd",
                   "echo '{}' > config.json", "chmod -R 000 . 2>/dev/null; true", "wc -l *"]


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    yield
    assert not leftovers()


@pytest.fixture(scope="module")
def env():
    e = agentrl.make("agentrl/Terminal-v0", difficulty=[1, 2, 3, 4, 5], split="all")
    yield e
    e.close()


def test_at_least_twelve_families_and_registered() -> None:
    assert len(FAMILIES) >= 12
    assert "agentrl/Terminal-v0" in agentrl.list_envs()


@pytest.mark.parametrize("family", FAMILIES)
def test_family_conformance(env: TerminalEnv, family: str) -> None:
    """Oracle 1.0; no-op, random text and a random shell agent 0.0 — graded by the final tree in a workspace."""
    level = 1 + FAMILIES.index(family) % 5  # every level is covered across the families
    task = env.task_named(f"terminal-{family}-d{level}-{FAMILIES.index(family) + 7:x}")
    env.reset(options={"task": task})
    _, reward, terminated, truncated, info = env.step(env.reference_answer(task))
    assert reward == 1.0 and terminated and not truncated, info["trajectory_info"]
    assert info["ended_by"] == "submit" and "failed" not in info
    rng = np.random.default_rng(FAMILIES.index(family))
    random_calls = [("bash", {"command": RANDOM_COMMANDS[int(i)]}) for i in rng.integers(len(RANDOM_COMMANDS), size=3)]
    for action in ["", env.action_space.sample()[:500], render_calls("hermes", [*random_calls, ("submit", {})])]:
        env.reset(options={"task": task})
        _, reward, *_ = env.step(action)
        assert reward == 0.0, (family, action)


REPAIR = {"fix_python_script", "fix_shell_script"}  # only their command checks can tell an untouched tree


@pytest.mark.parametrize("family", FAMILIES)
def test_an_untouched_tree_scores_what_its_grade_gives(env: TerminalEnv, family: str) -> None:
    """The reward an untouched final tree gets without a grade (a check that reads files fails on the task's
    own files) is the grade it gets: the built tree, sealed, graded in a workspace all the same; the
    episode that submits at once takes the shortcut (its record says so) and scores the same."""
    for level in (1, 3, 5):
        task = env.task_named(f"terminal-{family}-d{level}-{FAMILIES.index(family) + 40 * level:x}")
        known = env.initial_tree_reward(task)
        assert (known is None) == (family in REPAIR), (family, level, known)
        ws = open_workspace(env.workspace_spec(task), env.backend)
        try:
            tree = ws.seal()
        finally:
            ws.close()
        assert tree.unchanged is True
        graded = env.grade(task, tree)
        assert graded.error is None and graded.reward == 0.0, (family, level, graded.output)
        env.reset(options={"task": task})
        _, reward, terminated, _, info = env.step(render_calls("hermes", [("submit", {})]))
        assert terminated and reward == 0.0 and "failed" not in info
        output = info["trajectory_info"]["verifier"]["output"]
        assert output.startswith("not graded") == (known is not None), output


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_task_and_checks_hold_only_for_the_oracle(family: str) -> None:
    """Generation is a function of the seed; on the initial files (no-op) some check fails (host-side check)."""
    for level in range(1, 6):
        a = load_all()[family](Draw(np.random.default_rng(level)), level)
        b = generate(family, level, level)
        assert a == b
        spec = {"workdir": "/nonexistent", "checks": list(a.checks)}
        assert checks.run_checks(spec), "a task no-op could pass"
        assert a.solution and all(isinstance(c, str) and c for c in a.solution)


def test_seeded_resets_and_ids(env: TerminalEnv) -> None:
    other = agentrl.make("agentrl/Terminal-v0", difficulty=[1, 2, 3, 4, 5], split="all")
    ids = [env.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert ids == [other.reset(seed=s)[1]["task_id"] for s in range(8)]
    assert len(set(ids)) == 8
    task = other.task_named(ids[3])  # an id regenerates its task
    assert task.id == ids[3] and task.prompt == env.reset(seed=3)[1]["task"].prompt
    other.close()


def test_difficulty_adds_files_and_steps() -> None:
    def size(level: int) -> float:
        gens = [generate(f, level, s) for f in FAMILIES for s in range(4)]
        return float(np.mean([len(g.files) + len(g.checks) for g in gens]))

    sizes = [size(level) for level in range(1, 6)]
    assert sizes[0] < sizes[2] < sizes[4], sizes


def test_a_config_task_names_the_key_as_the_file_spells_it() -> None:
    """The instruction keeps the key's case (str.capitalize() once turned "set LOG_LEVEL to warn" into
    "Set log_level to warn", a key the file does not have)."""
    for level in (1, 2, 3, 4):
        for seed in range(8):
            g = generate("set_config_key", level, seed)
            keys = {c.split("'s/^")[1].split("=")[0] for c in g.solution if c.startswith("sed")}
            keys |= {c.split("'")[1].split("=")[0] for c in g.solution if c.startswith("echo")}
            assert keys and all(k in g.instruction for k in keys), (g.instruction, g.solution)


@pytest.mark.parametrize("family", ["fix_json_config", "fix_python_script"])
def test_a_repair_reference_writes_nothing_the_instruction_does_not_show(family: str, tmp_path) -> None:
    """The reference (what the warm start imitates and ``algo.guide`` demonstrates) must be a policy's: every word
    it shares with the task's files is in the instruction or in the family's template (the files of a quarter of
    the level's tasks). fix_json_config 3-5 once wrote the whole file from the generator's settings and
    fix_python_script 3-5 fixed exactly the bugs the instruction does not name. Each reference, run by bash on
    the task's files, makes every check hold (the host-side checker; the workspace runs are above)."""
    def words(text: str) -> set[str]:
        return set(re.findall(r"[A-Za-z0-9_]+", text))

    for level in range(1, 6):
        gens = [generate(family, level, seed) for seed in range(24)]
        in_files = [words(" ".join(g.files) + " " + " ".join(g.files.values())) for g in gens]
        template = {w for w in set().union(*in_files) if sum(w in f for f in in_files) >= len(gens) / 4}
        for seed, (g, seen) in enumerate(zip(gens, in_files)):
            hidden = (words(" ".join(g.solution)) & seen) - words(g.instruction) - template
            assert not hidden, (level, g.instruction, g.solution, hidden)
            if seed % 4 == 0:
                assert reference_problems(g, g.files, tmp_path / f"{level}-{seed}") == [], (level, g.solution)


def test_a_csv_sum_reference_reads_the_columns_from_the_header(tmp_path) -> None:
    """From level 4 the columns' order is the file's alone: the reference, run by bash on the task's files with
    their columns put in another order (the same rows), still writes the total the check wants. Before, it
    read columns by the position the generator chose, a value only the header shows."""
    def reorder(text: str, order: list[int]) -> str:
        return "".join(",".join(line.split(",")[i] for i in order) + "\n" for line in text.splitlines())

    for level in (4, 5):
        for seed in range(6):
            g = generate("csv_sum", level, seed)
            for order in ([2, 0, 1], [1, 2, 0]):
                files = {rel: reorder(text, order) for rel, text in g.files.items()}
                assert reference_problems(g, files, tmp_path / f"{level}-{seed}-{order[0]}") == [], g.solution


def reference_problems(g, files: dict[str, str], work) -> list[str]:
    """What the host-side checker finds wrong after ``g``'s reference commands ran by bash on ``files`` in ``work``."""
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    for command in g.solution:
        subprocess.run(["bash", "-c", command], cwd=work, check=True, timeout=30)
    return checks.run_checks({"workdir": str(work), "checks": list(g.checks)})


def test_splits_are_disjoint() -> None:
    """A task (its instruction and its tree) is in one split only; at difficulty 1 an instruction recurs
    across splits with another tree (another answer), as an arithmetic template does with other numbers."""
    seen = {}
    for split in ("train", "dev", "test"):
        e = agentrl.make("agentrl/Terminal-v0", difficulty=[1, 2], split=split)
        rng = np.random.default_rng(0)
        tasks = [e.sample_task(rng) for _ in range(60)]
        assert all(t.metadata["split"] == split for t in tasks)
        assert all(split_of(e.generated(t)) == split for t in tasks)
        seen[split] = {(t.prompt[1]["content"], json.dumps(e.generated(t).files, sort_keys=True, default=str))
                       for t in tasks}
        e.close()
    assert not (seen["train"] & seen["test"]) and not (seen["train"] & seen["dev"])


def test_bad_kwargs_are_one_line_errors() -> None:
    with pytest.raises(EnvError, match="difficulty must be 1-5"):
        TerminalEnv(difficulty=6)
    with pytest.raises(EnvError, match="unknown family 'nope'; families: count_files"):
        TerminalEnv(families=["nope"])
    with pytest.raises(EnvError, match="unknown split"):
        TerminalEnv(split="validation")


def test_the_exported_task_is_the_episode(env: TerminalEnv, tmp_path) -> None:
    """The Harbor directory holds the instruction, the files, the checker (only in tests/) and the oracle."""
    task = env.task_named("terminal-count_files-d2-1f")
    out = env.export_task(task, tmp_path / "t")
    spec = json.loads((out / "tests" / "spec.json").read_text())
    assert (out / "instruction.md").read_text().strip() == task.prompt[1]["content"]
    assert (out / "tests" / "check.py").read_text() == open(checks.__file__).read()
    assert not any("spec.json" in p.name or "check.py" in p.name for p in (out / "environment").rglob("*"))
    assert spec["checks"][0]["path"] == "answer.txt"
    assert "find" in (out / "solution" / "solve.sh").read_text()


def test_check_env(env: TerminalEnv) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(agentrl.make("agentrl/Terminal-v0"), skip_render_check=True)
    assert not [str(w.message) for w in caught if "gymnasium" in str(w.filename)]


def test_reference_action_is_the_oracle_then_submit(env: TerminalEnv) -> None:
    env.reset(seed=5)
    first = env.reference_action()
    assert first == env.reference_answer(env.task) and first.count("<tool_call>") >= 2
    assert '"submit"' in first


def test_the_warm_start_plays_a_few_reference_episodes_and_reads_the_rest_from_answers(tiny_arith) -> None:
    """Terminal-v0's oracle ends every episode in one turn with its reference answer: after the checked
    episodes the warm start's examples are (prompt, answer) pairs, the very tokens playing them gives."""
    from agentrl.config import load_config
    from agentrl.env import fixed_tasks
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, make_executor
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.training.warm_start import reference_examples

    cfg = load_config("examples/configs/terminal_tiny.yaml", ["model.warm_start.check_episodes=4",
                                                                 "rollout.max_new_tokens=400"])  # a byte-level tokenizer
    env = make_env(cfg)
    model, tok = load_policy(cfg, tiny_arith[0])
    engine, tasks, lines = HFEngine(model, tok), fixed_tasks(env, 12, 5), []
    try:
        examples = reference_examples(cfg, env, engine, tok, tasks, log=lines.append)
        played = make_executor(cfg, env, engine, tok).run_scripted(tasks, lambda e: e.reference_action())
    finally:
        env.close()
    assert lines == ["warm start: 4 reference episodes (1.0 turns on average, mean return 1.00)",
                     "warm start: each ended in one turn with the env's reference answer, so 8 more examples are "
                     "its reference answers, not played (0 longer than rollout.max_new_tokens, 0 with a prompt that "
                     "leaves no room for a turn left out)"]
    assert [(p, r) for p, r in examples] == [(t.prompt_ids, t.segments[0].token_ids) for t in played]
    assert all(t.reward == 1.0 and len(t.segments) == 1 for t in played)


def test_answers_read_without_playing_leave_out_the_prompts_a_played_episode_could_not_start(tiny_arith) -> None:
    """A context that holds the checked tasks' prompts and a turn but not every later prompt: the pairs read
    from reference answers are the played episodes that did not fail (no example is longer than the context)."""
    from agentrl.config import load_config
    from agentrl.env import fixed_tasks
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, make_executor
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.executors.single_turn import encode_prompt
    from agentrl.training.warm_start import reference_examples

    base = ["model.warm_start.check_episodes=4", "rollout.max_new_tokens=400"]
    env = make_env(load_config("examples/configs/terminal_tiny.yaml", base))
    model, tok = load_policy(load_config("examples/configs/terminal_tiny.yaml", base), tiny_arith[0])
    tasks = sorted(fixed_tasks(env, 16, 5), key=lambda t: len(encode_prompt(tok, t.prompt, True)))
    lengths = [len(encode_prompt(tok, t.prompt, True)) for t in tasks]
    limit = lengths[7] + 400  # the 8 shortest prompts leave room for a turn; the longer ones do not
    assert lengths[8] > lengths[7], lengths
    cfg = load_config("examples/configs/terminal_tiny.yaml", [*base, f"rollout.context.max_tokens={limit}"])
    engine, lines = HFEngine(model, tok), []
    try:
        examples = reference_examples(cfg, env, engine, tok, tasks, log=lines.append)
        played = make_executor(cfg, env, engine, tok).run_scripted(tasks, lambda e: e.reference_action())
    finally:
        env.close()
    started = [t for t in played if not t.info.get("failed")]
    assert len(started) == 8 and lines[-1].endswith("(0 longer than rollout.max_new_tokens, "
                                                    "8 with a prompt that leaves no room for a turn left out)")
    assert [(p, r) for p, r in examples] == [(t.prompt_ids, t.segments[0].token_ids) for t in started]
    assert max(len(p) + len(r) for p, r in examples) <= limit
