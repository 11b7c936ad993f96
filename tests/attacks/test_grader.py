"""The grader against the code under test, on both backends, for real: the verifier's shell is the
grader and every program it starts is the testee, which can neither write, replace, remove nor lock
the reward channel; the verifier's environment comes from nothing the agent wrote (HOME, PATH,
/tmp, git's configuration); rewards are range-checked; a hook that cannot load fails closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.workspace import WorkspaceLimits, WorkspaceSpec, open_workspace
from sandbox.workspace.grading import Verdict, read_reward, verify

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]
pytestmark = pytest.mark.slow



def grade(backend: str, tmp_path: Path, agent: str, test_sh: str, env: tuple = (), **files: str) -> Verdict:
    """The agent's commands in a fresh workspace, then ``test_sh`` on its sealed tree."""
    spec = WorkspaceSpec(env=env, limits=WorkspaceLimits(memory_mb=512, storage_mb=256), name="grading")
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test.sh").write_text("#!/bin/bash\n" + test_sh)
    for name, text in files.items():
        (tests / name.replace("__", ".")).write_text(text)
    with open_workspace(spec, backend) as ws:
        r = ws.exec(agent, timeout_s=60)
        assert not r.timed_out, r.output
        tree = ws.seal()
    return verify(spec, tree, str(tests), backend=backend, timeout_s=60)


# The agent leaves a program that, when the verifier runs it, attacks the reward channel every way a
# process of its uid could: write, chmod 444, replace by rename, remove and recreate, a watcher that
# rewrites it after the verifier is done, a directory swapped in for /logs/verifier.
ATTACK = r"""cat > /app/solve.sh <<'EOF'
#!/bin/bash
for f in /logs/verifier/reward.txt /logs/verifier/reward.json; do
  echo 1 > $f; chmod 444 $f; rm -f $f; echo '{"reward": 1}' > $f.new; mv -f $f.new $f
done
mv /logs/verifier /logs/old 2>/dev/null; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt
python3 -c "import os; os.chmod('/logs/verifier/reward.txt', 0o444)"
(setsid bash -c 'for i in $(seq 100); do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' &) 2>/dev/null
echo done
EOF
chmod +x /app/solve.sh"""


def test_the_code_under_test_cannot_write_replace_or_lock_the_reward(backend, tmp_path):
    # The commonest shape: run the agent's program, then write the verdict with a shell redirect.
    v = grade(backend, tmp_path, ATTACK, "out=$(/app/solve.sh 2>&1); echo \"$out\"\n"
              "if [ \"$out\" = never ]; then echo 1 > /logs/verifier/reward.txt; "
              "else echo 0 > /logs/verifier/reward.txt; fi\n")
    assert v.error is None and v.reward == 0.0, v
    assert "Permission denied" in v.output or "Operation not permitted" in v.output, v.output
    # The shape that writes 0 first and 1 only on success: the attack cannot reach the file in between.
    v = grade(backend, tmp_path, ATTACK, "echo 0 > /logs/verifier/reward.txt\nbash /app/solve.sh >/dev/null 2>&1\n"
              "sleep 0.5\n")
    assert v.error is None and v.reward == 0.0, v


def test_programs_run_as_the_testee_the_shell_and_the_verifiers_own_as_the_grader(backend, tmp_path):
    check = ("import os, subprocess\nopen('/logs/verifier/reward.json', 'w').write('{\"reward\": 0.5, \"own\": %d}'"
             " % (os.getuid() != int(subprocess.run(['id', '-u'], capture_output=True, text=True).stdout)))\n")
    v = grade(backend, tmp_path, "true",
              "[ \"$(id -u)\" != \"$UID\" ] || { echo 'a program ran as the grader'; exit 1; }\n"
              "python3 -c 'open(\"/logs/verifier/reward.txt\", \"w\")' 2>/dev/null && echo 'testee wrote the reward'\n"
              "python3 /tests/check.py\n", check__py=check)
    assert v.error is None and v.reward == 0.5 and v.rewards["own"] == 1.0, v
    assert "testee wrote" not in v.output


def test_the_verifier_environment_comes_from_nothing_the_agent_wrote(backend, tmp_path):
    agent = r"""mkdir -p /root/.local/bin /app/repo && cd /app/repo && git init -q . && echo a > f && git add f
for name in python3 git grep cat; do printf '#!/bin/sh\necho SHIM\n' > /root/.local/bin/$name; done
chmod +x /root/.local/bin/*; printf '[core]\n\tfsmonitor = "echo FSMON >&2"\n' >> /root/.gitconfig
git config core.fsmonitor "sh -c 'echo FSMON >&2'"; git config filter.x.clean "sh -c 'echo FILTER >&2; cat'"
echo '* filter=x diff=x' > .gitattributes; git config diff.x.textconv "sh -c 'echo TEXTCONV'"
echo planted > /tmp/scratch; chmod 444 /tmp/scratch; echo b >> f"""
    test_sh = ("echo \"home=$HOME\"; echo \"path=$PATH\"; ls -A $HOME; python3 -c 'print(1+1)'\n"
               "cd /app/repo && git status --porcelain && git diff | tail -1\n"
               "ls /tmp/scratch 2>&1; echo fresh > /tmp/scratch && cat /tmp/scratch\n"
               "echo 0 > /logs/verifier/reward.txt\n")
    v = grade(backend, tmp_path, agent, test_sh, env=(("PATH", "/root/.local/bin:/usr/local/bin:/usr/bin:/bin"),))
    assert v.error is None and v.reward == 0.0, v
    out = v.output
    assert "SHIM" not in out and "FSMON" not in out and "FILTER" not in out and "TEXTCONV" not in out, out
    assert "\n2\n" in out and "+b" in out and "fresh" in out and "planted" not in out, out
    assert "home=/run/agentrl-grader/home" in out and "/root" not in out.split("path=")[1].split("\n")[0], out


@pytest.mark.parametrize("written,ok", [("1e300", False), ("-inf", False), ("nan", False), ("1e-400", True),
                                        ("0.5", True), ('{"reward": 1, "tests": 17}', True),
                                        ('{"reward": true}', False), ('{"reward": NaN}', False),
                                        ("2", False), ('{"a": 1, "b": 2}', False)])
def test_rewards_are_finite_and_in_range(written, ok):
    name = "reward.json" if written.startswith("{") else "reward.txt"
    reward, named, problem = read_reward({name: written})
    assert (problem is None) == ok, (written, problem)
    if ok:
        assert reward is not None and -1.0 <= reward <= 1.0


def test_a_reward_out_of_range_or_too_large_fails_the_sample_loudly(backend, tmp_path):
    v = grade(backend, tmp_path, "true", "echo 1e300 > /logs/verifier/reward.txt\n")
    assert v.reward is None and "outside the task's range" in v.error, v
    v = grade(backend, tmp_path, "true", "head -c 200000 /dev/zero | tr '\\0' 1 > /logs/verifier/reward.json\n")
    assert v.reward is None and "larger than" in v.error, v


def test_a_hook_that_cannot_load_fails_closed(backend, tmp_path, monkeypatch):
    from sandbox.workspace import testee_hook

    monkeypatch.setattr(testee_hook, "_cached", b"not a shared object")
    v = grade(backend, tmp_path, "true", "echo 1 > /logs/verifier/reward.txt\n")
    assert v.reward is None and "could not be trusted" in v.error, v


def test_the_graders_writes_follow_no_link_of_the_agents(backend, tmp_path):
    # Links where the verifier writes, into the reward, the tests and the exec hook, made by the agent's
    # program while the verifier runs it (links left in the tree are removed before: the next test).
    agent = ("printf '%s\\n' 'ln -s /logs/verifier/reward.txt /app/input.txt; ln -s /tests/expected.txt /app/out.txt'"
             " 'ln -s /run/agentrl-grader/testee.so /app/log.txt; mkdir -p /app/d && ln -s /tests /app/d/t' > /app/prep.sh;"
             "echo mine > /app/own.txt && ln -s /app/own.txt /app/own-link.txt")
    test_sh = ("echo 0 > /logs/verifier/reward.txt\nbash /app/prep.sh\n"
               "echo 1 > /app/input.txt; echo \"input: $?\"\n"
               "echo 'hello' > /app/out.txt; echo \"out: $?\"\n"
               "echo junk >> /app/log.txt; echo \"log: $?\"\n"
               "echo evil > /app/d/t/conftest.py; echo \"new: $?\"\n"
               "echo yours > /app/own-link.txt; echo \"own: $? $(cat /app/own.txt)\"\n"
               "python3 /tests/check.py\n"
               "diff -q /tests/expected.txt <(echo hello) >/dev/null && echo 1 > /logs/verifier/reward.txt\n")
    check = ("import os\nfor p in ('/app/input.txt', '/app/out.txt'):\n    try:\n"
             "        open(p, 'w').write('1')\n        print('python wrote', p)\n"
             "    except PermissionError:\n        print('python refused', p)\n")
    v = grade(backend, tmp_path, agent, test_sh, check__py=check, expected__txt="the expected output\n")
    assert v.error is None and v.reward == 0.0, v
    for name in ("input", "out", "log", "new"):
        assert f"{name}: 1" in v.output, v.output  # each write through a link was refused
    assert "own: 0 yours" in v.output and "python wrote" not in v.output, v.output


def test_links_into_the_graders_directories_are_removed_before_grading(backend, tmp_path):
    # The output file a link to the expected one (the verifier would compare it with itself).
    agent = "ln -s /tests/expected.txt /app/answer.txt; ln -s ../../proc/self/root/tests /app/t; ln -s /etc/hostname /app/h"
    v = grade(backend, tmp_path, agent, "ls -l /app | tail -n +2\n"
              "if diff -q /app/answer.txt /tests/expected.txt; then echo 1 > /logs/verifier/reward.txt; "
              "else echo 0 > /logs/verifier/reward.txt; fi\n", expected__txt="42\n")
    assert v.error is None and v.reward == 0.0, v
    assert "2 link(s) into the grader's directories were removed" in v.output and " h -> /etc/hostname" in v.output


def test_env_lines_expand_over_the_base_images_path():
    from sandbox.workspace.dockerfile import BASE_ENV, parse_dockerfile

    env = dict(parse_dockerfile("FROM x\nENV PATH=/root/.local/bin:$PATH A=${NOPE:-dflt} B=${PATH:+set}\n").env)
    assert env == {"PATH": "/root/.local/bin:" + BASE_ENV["PATH"], "A": "dflt", "B": "set"}


def test_a_task_path_with_agent_directories_keeps_the_systems_part_for_the_verifier(backend, tmp_path):
    # ENV PATH=/root/.local/bin:$PATH (uv, pipx): the agent's shell finds its tools, the verifier never does.
    from sandbox.workspace.dockerfile import parse_dockerfile

    env = parse_dockerfile("FROM x\nENV PATH=/root/.local/bin:$PATH\n").env
    v = grade(backend, tmp_path, "ls >/dev/null && mkdir -p /root/.local/bin && printf '#!/bin/sh\\necho SHIM\\n' "
              "> /root/.local/bin/ls && chmod +x /root/.local/bin/ls && [ \"$(ls)\" = SHIM ]",
              "out=$(ls /app); echo \"path=$PATH\"; [ \"$out\" != SHIM ] && echo 0 > /logs/verifier/reward.txt\n", env=env)
    assert v.error is None and v.reward == 0.0 and "/root" not in v.output, v


def test_on_docker_the_images_own_directories_stay_the_images(docker, tmp_path):
    # An image's /opt/venv is not the agent's: it cannot change it, and the verifier gets the image's copy.
    from sandbox.workspace.grading import verify

    context = tmp_path / "ctx"
    context.mkdir()
    dockerfile = ("FROM agentrl-no-such-image:1\nRUN mkdir -p /opt/venv/bin && printf '#!/bin/sh\\necho IMAGE\\n' > "
                  "/opt/venv/bin/tool && chmod 755 /opt/venv/bin/tool\nENV PATH=/opt/venv/bin:$PATH\nWORKDIR /app\n")
    spec = WorkspaceSpec(dockerfile=dockerfile, context=str(context), workdir="/app", name="image-dirs",
                         env=(("PATH", "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),))
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("#!/bin/bash\nout=$(tool); echo \"tool=$out\"\n"
                                   "[ \"$out\" = IMAGE ] && echo 0 > /logs/verifier/reward.txt\n")
    with open_workspace(spec, "docker") as ws:
        r = ws.exec("printf '#!/bin/sh\\necho AGENT\\n' > /opt/venv/bin/tool; echo rc=$?; tool")
        assert "rc=1" in r.output and r.output.strip().endswith("IMAGE"), r.output
        tree = ws.seal()
    assert not any(p.startswith("/opt") for p in tree.files()), sorted(tree.files())[:5]
    v = verify(spec, tree, str(tests), backend="docker", timeout_s=60)
    assert v.error is None and v.reward == 0.0 and "tool=IMAGE" in v.output, v


def test_a_reward_file_the_verifier_keeps_open_does_not_reach_the_testee(backend, tmp_path):
    agent = "printf '#!/bin/bash\\nfor n in 3 4 5 6 7 8 9; do echo 1 >&$n; done 2>/dev/null\\n' > /app/run.sh"
    v = grade(backend, tmp_path, agent, "exec 3> /logs/verifier/reward.txt\necho 0 >&3\nbash /app/run.sh\n"
              "cat /logs/verifier/reward.txt\n")
    assert v.error is None and v.reward == 0.0, v


def test_a_grader_programs_system_and_popen_start_testees_and_posix_spawn_is_refused(backend, tmp_path):
    check = ("import ctypes, os, subprocess\nlibc = ctypes.CDLL(None)\nlibc.popen.restype = ctypes.c_void_p\n"
             "f = libc.popen(b'id -u > /tmp/popen.txt', b'r'); libc.pclose(ctypes.c_void_p(f))\n"
             "os.system('id -u > /tmp/system.txt')\n"
             "try:\n    os.posix_spawn('/usr/bin/id', ['id'], dict(os.environ)); spawn = 'ran'\n"
             "except OSError:\n    spawn = 'refused'\n"
             "me = str(os.getuid())\nids = [open(p).read().strip() for p in ('/tmp/popen.txt', '/tmp/system.txt')]\n"
             "print('ids', ids, 'me', me, 'spawn', spawn)\n"
             "ok = all(i and i != me for i in ids) and spawn == 'refused'\n"
             "open('/logs/verifier/reward.txt', 'w').write('0.5' if ok else '0')\n")
    v = grade(backend, tmp_path, "true", "python3 /tests/check.py\n", check__py=check)
    assert v.error is None and v.reward == 0.5, v
