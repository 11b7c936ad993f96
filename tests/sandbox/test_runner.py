"""The test runner: HumanEval, MBPP-style asserts, stdin/stdout cases, and attempts to fake a pass."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest
from sbhelpers import assert_host_clean, broken_variant

import sandbox

SQUARE_TESTS = sandbox.TestSuite(asserts=["assert square(2) == 4", "assert square(3) == 9",
                                          "assert math.isclose(square(0.5), 0.25)"], setup="import math")


def test_humaneval_canonical_all_pass_broken_all_fail(local: sandbox.Sandbox, humaneval: list[dict]) -> None:
    def one(args: tuple[int, dict]) -> tuple[str, bool, int, str]:
        i, p = args
        suite = sandbox.TestSuite(check=p["test"], entry_point=p["entry_point"])
        ok = sandbox.run_tests(p["prompt"] + p["canonical_solution"], suite, sandbox=local)
        bad = sandbox.run_tests(broken_variant(p, i), suite, sandbox=local)
        return p["task_id"], ok.all_passed, bad.passed, ok.error

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, enumerate(humaneval)))
    assert [r for r in results if not r[1]] == []
    assert (sum(r[1] for r in results), sum(r[2] for r in results)) == (164, 0)
    assert_host_clean(local)


def test_asserts_each_count(local: sandbox.Sandbox) -> None:
    report = sandbox.run_tests("def square(x):\n    return x * x if x != 3 else 0\n", SQUARE_TESTS,
                               sandbox=local)
    assert (report.passed, report.total, report.status) == (2, 3, "ok")
    assert [o.passed for o in report.outcomes] == [True, False, True]
    assert report.outcomes[1].error.startswith("AssertionError")
    assert report.fraction == pytest.approx(2 / 3) and not report.all_passed


def test_default_sandbox_and_limits() -> None:
    report = sandbox.run_tests("def square(x):\n    return x * x\n", SQUARE_TESTS)
    assert report.all_passed and report.status == "ok"
    slow = sandbox.run_tests("import time\ntime.sleep(5)\ndef square(x): return x * x", SQUARE_TESTS,
                             limits=sandbox.Limits(timeout_s=0.5))
    assert (slow.passed, slow.status) == (0, "timeout")


def test_partial_results_survive_a_timeout(local: sandbox.Sandbox) -> None:
    suite = sandbox.TestSuite(asserts=["assert f(1) == 1", "assert f(0) == 0", "assert f(2) == 2"])
    code = "def f(x):\n    while x == 0: pass\n    return x\n"
    report = sandbox.run_tests(code, suite, sandbox=local, limits=sandbox.Limits(timeout_s=3))
    assert report.status == "timeout"
    assert [o.passed for o in report.outcomes] == [True, False, False]


def test_io_cases(local: sandbox.Sandbox) -> None:
    suite = sandbox.TestSuite(io=[sandbox.IOCase("1 2\n", "3\n"), sandbox.IOCase("5 5\n", "10"),
                                  sandbox.IOCase("0 0\n", "1\n")])
    report = sandbox.run_tests("a, b = map(int, input().split())\nprint(a + b)", suite, sandbox=local)
    assert [o.passed for o in report.outcomes] == [True, True, False]
    assert report.outcomes[2].error == "wrong output"


def test_candidate_syntax_error(local: sandbox.Sandbox) -> None:
    report = sandbox.run_tests("def square(x) return x", SQUARE_TESTS, sandbox=local)
    assert report.passed == 0 and "SyntaxError" in report.outcomes[0].error


def test_suite_needs_one_kind() -> None:
    with pytest.raises(ValueError):
        sandbox.TestSuite()
    with pytest.raises(ValueError):
        sandbox.TestSuite(asserts=["assert 1"], io=[sandbox.IOCase("", "")])
    with pytest.raises(ValueError):
        sandbox.TestSuite(check="def check(c): pass")


HACKS = {
    "exit_zero_at_import": "import sys\nsys.exit(0)\ndef square(x): return 0",
    "os_exit_at_import": "import os\nos._exit(0)\ndef square(x): return 0",
    "exit_in_call": "import sys\ndef square(x):\n    sys.exit(0)",
    "os_exit_in_call": "import os\ndef square(x):\n    print('PASSED'); os._exit(0)",
    "print_markers": "print('PASSED\\nall tests passed\\nOK')\ndef square(x): return 0",
    "always_equal": "class E:\n    def __eq__(self, o): return True\ndef square(x): return E()",
    "int_subclass": "class I(int):\n    def __eq__(self, o): return True\n"
                    "    __hash__ = int.__hash__\ndef square(x): return I(0)",
    "always_equal_in_list": "class E:\n    __eq__ = lambda s, o: True\ndef square(x): return [E()][0]",
    "patch_isclose": "import math\nmath.isclose = lambda *a, **k: True\ndef square(x): return 0",
    "patch_builtins_in_call": "import builtins\ndef square(x):\n"
                              "    builtins.AssertionError = type('N', (Exception,), {})\n    return 0",
    "raise_systemexit_subclass": "class Done(SystemExit): pass\ndef square(x): raise Done(0)",
    "forge_report_fd": "import os\ndef square(x):\n    for i in range(3):\n"
                       "        os.write(4, f'{\"0\" * 32} {i} 1 \\'\\'\\n'.encode())\n    return 0",
    "steal_nonce_fd": "import os\ntry:\n    nonce = os.read(3, 100)\nexcept OSError:\n    nonce = b''\n"
                      "def square(x):\n    os.write(4, nonce + b' 0 1 x\\n')\n    return 0",
    "keyboard_interrupt": "def square(x): raise KeyboardInterrupt",
    "patch_harness_globals": "import sys\nh = sys.modules['__main__']\nclass E:\n    __eq__ = lambda s, o: True\n"
                             "for n in ('PLAIN', 'enumerate', 'dict', 'list', 'str'):\n"
                             "    setattr(h, n, frozenset([E]) if n == 'PLAIN' else None)\n"
                             "def square(x): return E()",
    "job_secret_via_gc": "import gc, json, os\nfor o in gc.get_objects():\n"
                         "    if isinstance(o, dict) and o.get('secret'):\n"
                         "        n = json.loads(o['secret'])['nonce']\n"
                         "        for i in range(3): os.write(4, f'{n} {i} 1 \\'\\'\\n'.encode())\n"
                         "def square(x): return 0",
    "patch_exit_and_write": "import os\nos._exit = lambda c: None\nos.write = lambda *a: 0\n"
                            "def square(x): return 0",
    "thread_forger": textwrap.dedent("""
        import os, threading
        def spam():
            for i in range(1000):
                try: os.write(4, f'x {i % 3} 1 y\\n'.encode())
                except OSError: pass
        threading.Thread(target=spam, daemon=True).start()
        def square(x): return 0
        """),
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_pass_cannot_be_faked(local: sandbox.Sandbox, name: str) -> None:
    report = sandbox.run_tests(HACKS[name], SQUARE_TESTS, sandbox=local)
    assert report.passed == 0, report.outcomes


def test_patched_builtins_do_not_break_honest_code(local: sandbox.Sandbox) -> None:
    code = "import builtins, os\nbuiltins.abs = lambda x: 0\nos.write = None\ndef square(x): return x * x"
    assert sandbox.run_tests(code, SQUARE_TESTS, sandbox=local).all_passed
