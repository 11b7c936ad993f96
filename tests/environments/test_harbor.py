"""``harbor:PATH``: the task loader, episodes in real workspaces (the graded tree, hidden tests, the end of
an episode, failures), the warm pool."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harborkit import BACKENDS, EXAMPLES, SECRET, call, make_task
from wscheck import leftovers

import agentrl
from agentrl.env import EnvError
from environments.harbor import HarborEnv, find_tasks, load_task
from environments.harbor.task import TaskError


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    """After the module's tests nothing of any workspace they opened is left on the host."""
    yield
    assert not leftovers()


# ---------------------------------------------------------------------- the loader
def test_the_examples_load() -> None:
    tasks, problems = find_tasks(EXAMPLES)
    assert not problems and len(tasks) >= 10
    assert [t.name for t in tasks] == sorted(t.name for t in tasks)
    assert all(t.has_solution and t.agent_timeout_s == 300 and t.verifier_timeout_s == 60 for t in tasks)
    one = load_task(EXAMPLES / "failing-unittest")
    assert one.memory_mb == 512 and one.cpus == 1 and one.metadata["category"] == "debugging"
    assert find_tasks(EXAMPLES / "failing-unittest")[0][0].name == "failing-unittest"  # a task dir is one task


BROKEN = {
    "no-toml": ({"task.toml": None}, "no task.toml"),
    "bad-toml": ({"task.toml": "[agent\ntimeout_sec = 1"}, "task.toml is not valid TOML"),
    "empty-instruction": ({"instruction.md": "  \n"}, "instruction.md is empty"),
    "no-test": ({"tests/test.sh": None, "tests/other.sh": "x"}, "no tests/test.sh"),
    "no-dockerfile": ({"environment/Dockerfile": None, "environment/data.txt": "x"}, "no environment/Dockerfile"),
    "compose": ({"environment/Dockerfile": None, "environment/docker-compose.yaml": "services: {}"},
                "compose environments are not supported"),
    "gpus": ({"task.toml": "[environment]\ngpus = 1\n"}, "workspaces have no GPUs"),
    "steps": ({"task.toml": "[[steps]]\nname = 'a'\n"}, "multi-step tasks"),
    "bad-timeout": ({"task.toml": "[agent]\ntimeout_sec = -5\n"}, r"\[agent\] timeout_sec must be a positive number"),
    "bad-memory": ({"task.toml": "[environment]\nmemory = 'lots'\n"}, "is not a size"),
    "cmd": ({"environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nCMD [\"bash\"]\n"},
            "line 3: CMD is not supported by the local workspace backend"),
}


def _write(root: Path, name: str, changes: dict[str, str | None]) -> None:
    files = {"instruction.md": "Do it.\n", "task.toml": "[agent]\ntimeout_sec = 10.0\n",
             "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n", "tests/test.sh": "echo 1\n"}
    files.update(changes)
    for rel, text in files.items():
        if text is not None:
            (root / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / name / rel).write_text(text)


def test_each_malformed_task_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    for name, (changes, _) in BROKEN.items():
        _write(tmp_path, name, changes)
    _write(tmp_path, "good", {})
    (tmp_path / "docs").mkdir()  # not a task: skipped, as Harbor skips it
    (tmp_path / "docs" / "README.md").write_text("notes")
    _write(tmp_path, ".hidden", {})
    tasks, problems = find_tasks(tmp_path)
    assert [t.name for t in tasks] == [n for n in sorted(BROKEN) + ["good"] if n in ("cmd", "good")]
    found = dict(problems)
    assert set(found) == set(BROKEN) - {"cmd"}  # the loader reads the Dockerfile only as text
    for name, (_, message) in BROKEN.items():
        if name != "cmd":
            assert "\n" not in found[name] and found[name].startswith(name + ": ")
            assert re.search(message, found[name]), found[name]
    env = HarborEnv(str(tmp_path), skip_invalid=True)  # the local backend checks the Dockerfile
    assert [t.id for t in env.tasks] == ["good"] and "CMD is not supported" in dict(env.problems)["cmd"]
    with pytest.raises(EnvError, match=r"cannot run; .*\(agentrl tasks list .* shows each\)"):
        HarborEnv(str(tmp_path))
    with pytest.raises(EnvError, match="no such directory"):
        agentrl.make(f"harbor:{tmp_path}/nope")
    with pytest.raises(EnvError, match="no Harbor task here"):
        agentrl.make(f"harbor:{tmp_path / 'docs'}")


def test_task_toml_fields(tmp_path: Path) -> None:
    _write(tmp_path, "t", {"task.toml": """schema_version = "1.1"
[task]
name = "org/t"
description = "a test"
[metadata]
difficulty = "easy"
[agent]
timeout_sec = 12
[verifier]
timeout_sec = 34.5
env = { MODE = "strict", LEVEL = 3 }
[solution]
env = { SEED = "7" }
[environment]
cpus = 2
memory = "1G"
storage = "512M"
allow_internet = true
unknown_key = "ignored, as Harbor ignores it"
"""})
    t = load_task(tmp_path / "t")
    assert (t.agent_timeout_s, t.verifier_timeout_s, t.cpus, t.memory_mb, t.storage_mb) == (12, 34.5, 2, 1024, 512)
    assert t.verifier_env == {"MODE": "strict", "LEVEL": "3"} and t.solution_env == {"SEED": "7"}
    assert t.metadata == {"difficulty": "easy", "name": "org/t", "description": "a test"} and t.allow_internet
    env = HarborEnv(str(tmp_path / "t"))
    spec = env.spec_of(t)
    assert not spec.limits.allow_internet  # off unless the user allows it
    assert HarborEnv(str(tmp_path / "t"), allow_internet=True).spec_of(t).limits.allow_internet
    assert (spec.limits.cpus, spec.limits.memory_mb, spec.limits.storage_mb, spec.workdir) == (2, 1024, 512, "/app")


def test_task_filters_and_splits(tmp_path: Path) -> None:
    for split, names in (("train", ["a", "b", "c"]), ("test", ["d"])):
        for n in names:
            make_task(tmp_path / split, n)
    env = agentrl.make(f"harbor:{tmp_path}/{{split}}")
    assert [t.id for t in env.tasks] == ["a", "b", "c"]
    assert [t.id for t in agentrl.make(f"harbor:{tmp_path}/{{split}}", split="test").tasks] == ["d"]
    assert [t.id for t in agentrl.make(f"harbor:{tmp_path}/train", limit=2).tasks] == ["a", "b"]
    assert [t.id for t in agentrl.make(f"harbor:{tmp_path}/train", tasks=["c"]).tasks] == ["c"]
    with pytest.raises(EnvError, match="no task named 'zz'"):
        agentrl.make(f"harbor:{tmp_path}/train", tasks=["zz"])
    with pytest.raises(EnvError, match="unknown tool_parser"):
        agentrl.make(f"harbor:{tmp_path}/train", tool_parser="xml")
    with pytest.raises(EnvError, match="unknown workspace backend"):
        agentrl.make(f"harbor:{tmp_path}/train", backend="vm")


def test_two_task_folders_train_together(tmp_path: Path) -> None:
    """Issue 46, finding 9: no way to train on two task folders at once (a folder of symlinks worked).
    ``harbor:A,B`` holds both, ``{split}`` in each; one task name in both is refused in one line."""
    for folder, split, names in (("mine", "train", ["b", "c"]), ("mine", "test", ["t1"]),
                                 ("theirs", "train", ["a"]), ("theirs", "test", ["t2"])):
        for n in names:
            make_task(tmp_path / folder / split, n)
    both = f"harbor:{tmp_path}/mine/{{split}},{tmp_path}/theirs/{{split}}"
    assert [t.id for t in agentrl.make(both).tasks] == ["a", "b", "c"]
    assert [t.id for t in agentrl.make(both, split="test").tasks] == ["t1", "t2"]
    assert [t.id for t in agentrl.make(both, limit=2).tasks] == ["a", "b"]  # the first by name, over both
    make_task(tmp_path / "theirs" / "train", "c")
    with pytest.raises(EnvError, match=r"two tasks are named 'c' \(.*mine/train/c and .*theirs/train\); task names"):
        agentrl.make(both)
    with pytest.raises(EnvError, match="nowhere: no such directory"):
        agentrl.make(f"harbor:{tmp_path}/mine/train,{tmp_path}/nowhere")


def test_write_task_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    make_task(tmp_path, "x")
    with pytest.raises(FileExistsError):
        make_task(tmp_path, "x")
    with pytest.raises(TaskError):
        load_task(tmp_path / "nope")


# ---------------------------------------------------------------------- episodes
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_changes_the_graded_tree(tmp_path: Path, backend: str) -> None:
    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}", backend=backend)
    obs, info = env.reset(seed=0)
    assert "Write 42 to /app/out.txt." in obs and "<tools>" in obs and '"name": "str_replace"' in obs
    assert info["prompt"][0]["role"] == "system" and "/app" in info["prompt"][0]["content"]
    o, r, term, trunc, i = env.step(call("bash", command="echo 41 > out.txt && cat out.txt"))
    assert (r, term, trunc) == (0.0, False, False) and o == "<tool_response>\n41\n\n</tool_response>"
    o, r, term, trunc, i = env.step(call("str_replace", path="out.txt", old_str="41", new_str="42")
                                    + call("submit") + call("bash", command="echo 0 > out.txt"))
    assert (r, term, trunc) == (1.0, True, False) and i["ended_by"] == "submit" and not i.get("failed")
    record = i["trajectory_info"]
    assert record["commands"] == ["echo 41 > out.txt && cat out.txt",
                                  'str_replace {"path": "out.txt", "old_str": "41", "new_str": "42"}', "submit"]
    assert record["outputs"][0] == "41\n" and record["outputs"][1].startswith("Edited /app/out.txt")
    assert "+++ b/app/out.txt" in record["diff"] and "+42" in record["diff"]
    assert record["verifier"]["reward"] == 1.0 and record["verifier"]["error"] is None
    env.close()


def test_the_tests_are_never_visible_to_the_agent(tmp_path: Path) -> None:
    """During the episode neither the tests nor the solution exist anywhere the agent can look; what it
    writes to /tests or /logs/verifier is gone before the verifier runs."""
    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}")
    env.reset(seed=0)
    look = ("ls -A /tests /logs/verifier; cat /tests/test.sh; find / -xdev \\( -name test.sh -o -name solve.sh \\) "
            f"2>/dev/null; grep -rl {SECRET} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
            "--exclude-dir=usr 2>/dev/null; echo done")  # /usr is the host's, read-only; /dev has endless files
    o, *_ = env.step(call("bash", command=look))
    assert SECRET not in o and "test.sh" not in o.replace("/tests/test.sh: No such file", "") and "done" in o
    forge = ("echo 1 > /logs/verifier/reward.txt; mkdir -p /tests 2>/dev/null; echo 'echo 1 > /logs/verifier/reward.txt'"
             " > /tests/test.sh; ls -l /logs/verifier /tests")
    o, r, term, trunc, i = env.step(call("bash", command=forge) + call("submit"))
    assert term and r == 0.0 and i["trajectory_info"]["verifier"]["error"] is None  # the real test ran: out.txt is not 42
    env.close()


def test_a_reply_without_a_tool_call_ends_and_grades(tmp_path: Path) -> None:
    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}")
    env.reset(seed=0)
    o, r, term, trunc, i = env.step("I am done.")
    assert (o, r, term, trunc, i["ended_by"]) == ("", 0.0, True, False, "no_tool_call")
    assert i["trajectory_info"]["commands"] == [] and i["trajectory_info"]["diff"] == ""
    with pytest.raises(RuntimeError, match="needs a reset"):
        env.step(call("bash", command="ls"))
    env.close()


def test_bad_calls_are_the_tools_errors_not_failures(tmp_path: Path) -> None:
    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}", max_calls_per_turn=4)
    env.reset(seed=0)
    action = ("<tool_call>not json</tool_call>" + call("rm", path="/") + call("bash", cmd="ls")
              + call("read_file", path="missing.txt") + call("bash", command="echo never"))
    o, r, term, trunc, i = env.step(action)
    assert not term and not trunc and r == 0.0 and o.count("<tool_response>") == 5
    for text in ("not valid JSON", "unknown tool 'rm'", "missing required argument(s): command",
                 "cannot read /app/missing.txt", "at most 4 tool calls run per turn"):
        assert text in o, (text, o)
    assert "never" not in o
    assert [c["name"] for c in i["calls"]] == [None, "rm", "bash", "read_file", "bash"]
    assert all(c["error"] and c["result"] == f"Error: {c['error']}" for c in i["calls"])
    env.close()


def test_max_turns_and_agent_timeout_grade_the_state_left(tmp_path: Path) -> None:
    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}", max_turns=2)
    env.reset(seed=0)
    o, *_ = env.step(call("bash", command="echo 42 > out.txt"))
    assert "next turn is the last one" in o
    o, r, term, trunc, i = env.step(call("bash", command="ls"))
    assert (r, term, trunc, i["ended_by"]) == (1.0, False, True, "max_turns")
    env.close()
    make_task(tmp_path, "slow", agent_timeout=1.0)
    env = agentrl.make(f"harbor:{tmp_path}", tasks=["slow"])
    env.reset(seed=0)
    o, r, term, trunc, i = env.step(call("bash", command="echo 42 > out.txt; sleep 30") + call("bash", command="ls"))
    assert (r, term, trunc, i["ended_by"]) == (1.0, False, True, "agent_timeout")
    assert "time for this task is up" in i["trajectory_info"]["outputs"][0] and len(i["trajectory_info"]["outputs"]) == 1
    env.close()


def test_reward_json_and_a_verifier_that_fails(tmp_path: Path) -> None:
    named = "#!/bin/bash\nmkdir -p /logs/verifier\necho '{\"reward\": 0.25, \"style\": 1.0}' > /logs/verifier/reward.json\n"
    make_task(tmp_path, "partial", test_sh=named)
    make_task(tmp_path, "broken", test_sh="#!/bin/bash\necho the verifier crashed >&2\nexit 3\n")
    env = agentrl.make(f"harbor:{tmp_path}", tasks=["partial"])
    env.reset(seed=0)
    _, r, _, _, i = env.step("done")
    assert r == 0.25 and i["reward_components"] == {"reward": 0.25, "style": 1.0} and not i.get("failed")
    env = agentrl.make(f"harbor:{tmp_path}", tasks=["broken"])
    env.reset(seed=0)
    _, r, term, _, i = env.step("done")
    assert r == 0.0 and term and i["failed"] and "wrote no /logs/verifier/reward.txt" in i["error"]
    assert "the verifier crashed" in i["trajectory_info"]["verifier"]["output"]


def test_a_task_that_does_not_build_raises_for_the_executor(tmp_path: Path) -> None:
    from sandbox.workspace import WorkspaceError

    make_task(tmp_path, "nobuild", dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nRUN echo broken; exit 4\n")
    env = agentrl.make(f"harbor:{tmp_path}")
    env.reset(seed=0)
    with pytest.raises(WorkspaceError, match="RUN at line 3 failed"):
        env.step(call("bash", command="ls"))
    env.close()


def test_reference_answers_in_every_call_format(tmp_path: Path) -> None:
    make_task(tmp_path, "echo-42", solve="echo 42 > /app/out.txt\nprintf 'bin' | base64 > /dev/null",
              files={"data.txt": "x"})
    (tmp_path / "echo-42" / "solution" / "helper.bin").write_bytes(b"\xff\x00\xfe")
    for fmt in ("hermes", "qwen3_coder", "llama3_json", "pythonic"):
        env = agentrl.make(f"harbor:{tmp_path}", tool_parser=fmt)
        obs, _ = env.reset(seed=0)
        action = env.reference_answer(env.task)
        _, r, term, _, i = env.step(action)
        assert (r, term, i["ended_by"]) == (1.0, True, "submit"), (fmt, i)
        assert i["trajectory_info"]["commands"][-2] == "bash /tmp/solution/solve.sh"
        env.close()


def test_a_deep_copy_per_episode_shares_no_workspace(tmp_path: Path) -> None:
    from agentrl.rollout.env_pool import clone_env

    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}")
    env.reset(seed=0)
    env.step(call("bash", command="echo 42 > out.txt"))
    clone = clone_env(env)
    assert clone.tasks is env.tasks and not clone.session.started and env.session.started
    clone.reset(seed=0)
    assert clone.step(call("bash", command="cat out.txt"))[0].count("No such file") == 1  # its own workspace
    assert env.step(call("submit"))[1] == 1.0
    clone.close()
    env.close()


def test_a_warm_pool_serves_the_episodes_of_the_env_and_its_copies(tmp_path: Path) -> None:
    from agentrl.rollout.env_pool import clone_env

    make_task(tmp_path, "echo-42")
    env = agentrl.make(f"harbor:{tmp_path}", pool_size=1)
    pool = env.session.pool
    for _ in range(2):
        episode = clone_env(env)  # what the executor runs each episode on
        assert episode.session.pool is pool
        episode.reset(seed=0)
        assert episode.step(call("bash", command="echo 42 > out.txt") + call("submit"))[1] == 1.0
        episode.close()  # an episode's close leaves the pool to the env that made it
    assert pool.hits >= 1 and pool.misses == 1 and not pool.closed
    env.close()
    assert pool.closed


@pytest.mark.parametrize("backend", BACKENDS)
def test_filling_the_storage_scores_zero_not_a_failure(tmp_path: Path, backend: str) -> None:
    make_task(tmp_path, "full", extra_toml="")
    toml = tmp_path / "full" / "task.toml"
    toml.write_text(toml.read_text().replace("storage_mb = 128", "storage_mb = 16"))
    env = agentrl.make(f"harbor:{tmp_path}", backend=backend)
    env.reset(seed=0)
    fill = "echo 42 > out.txt; for f in a b c; do head -c 9000000 /dev/zero > /app/$f; done; true"
    _, r, term, _, i = env.step(call("bash", command=fill) + call("submit"))
    assert term and not i.get("failed")  # never an infrastructure failure: the sample stays in the loss
    if backend == "local":  # one tmpfs of storage_mb holds the whole tree: the writes fail, the tree is graded
        assert r == 1.0
    else:  # Docker caps the tree a seal returns: a larger one is the agent's doing, 0 and ungraded
        assert r == 0.0 and i["trajectory_info"]["verifier"]["output"].startswith("not graded:")
    env.close()


def test_a_lone_mode_change_is_a_change_for_unchanged_reward(tmp_path):
    """An env with ``unchanged_reward`` scores an untouched tree without grading; a ``chmod +x`` is a touch
    (issue 43: the tree comparison ignored modes, so the grader, which checks the mode, never ran)."""
    test_sh = "#!/bin/bash\nif [ -x /app/run.sh ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    make_task(tmp_path, "chmod", test_sh=test_sh, solve="chmod +x /app/run.sh",
              dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nRUN printf 'echo hi\\n' > run.sh && chmod 644 run.sh\n")

    class Untouched(HarborEnv):
        unchanged_reward = 0.0

    env = Untouched(str(tmp_path), backend="local")
    try:
        for action, reward, graded in ((call("submit"), 0.0, False),
                                       (call("bash", command="chmod +x run.sh") + call("submit"), 1.0, True)):
            env.reset(options={"task": env.tasks[0]})
            _, r, _, _, info = env.step(action)
            output = info["trajectory_info"]["verifier"]["output"]
            assert r == reward and ("not graded" not in output) == graded, (r, output)
    finally:
        env.close()


def test_a_harbor_folder_warm_starts_from_its_oracles():
    """Harbor tasks with solution/solve.sh had no reference policy: the warm start was off ("define
    reference_action"), which a user of harbor: cannot do (issue 46, finding 2)."""
    from agentrl.config import load_config
    from agentrl.env import fixed_tasks, reference_episode
    from agentrl.rollout.build import make_env
    from agentrl.training.warm_start import warm_start_decision

    cfg = load_config(None, [f"env.id=harbor:{EXAMPLES}", "env.kwargs={max_turns: 2}"])
    env = make_env(cfg)
    try:
        run, why = warm_start_decision(cfg, env)
        assert run and "reference policy" in why, why
        for task in fixed_tasks(env, 2, 0):
            texts, total = reference_episode(env, task)
            assert total == 1.0 and len(texts) == 2, texts[-1][-500:]  # one turn: the oracle's work, then submit
    finally:
        env.close()
    assert leftovers() == []
