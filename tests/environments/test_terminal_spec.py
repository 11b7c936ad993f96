"""The Terminal-v0 checker reads ``spec.json`` without importing ``json`` (``checks.load_spec``): the same
value as ``json.loads`` for whatever ``json.dumps`` writes (random nested specs, every escape, surrogate
pairs, lone surrogates, numbers of every form), ``json``'s own error for a broken spec, and a grade that
imports neither ``json`` nor ``re`` unless a check reads JSON."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from environments.terminal import checks

ODD = ['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "é", "漢", "😀", "\ud800", "\udfff",
       "\u2028", "'", "{", "}", "[", "]", ":", ",", " ", "\\u0041", "true", "-1e5"]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ODD) if rng.random() < 0.3 else chr(rng.randint(32, 126))
                   for _ in range(rng.randint(0, 12)))


def random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randint(0, 8 if depth < 4 else 5)
    if kind == 0:
        return random_text(rng)
    if kind == 1:
        return rng.choice([0, -0, 1, -7, 2**70, -(2**63)])
    if kind == 2:
        return rng.choice([0.0, -0.0, 1.5, -2.25e-8, 1e300, 6.02e23, rng.uniform(-1e6, 1e6)])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5):
        return random_text(rng)
    if kind in (6, 7):
        return {random_text(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]


@pytest.mark.parametrize("seed", range(4))
def test_spec_reader_equals_json_on_what_json_dumps_writes(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "spec.json"
    for n in range(150):
        value = {"workdir": "/app", "checks": [random_value(rng) for _ in range(rng.randint(0, 5))]}
        text = json.dumps(value, ensure_ascii=n % 2 == 0, indent=(None, 2, "\t")[n % 3],
                          separators=None if n % 5 else (",", ":"))
        want = json.loads(text)
        got, end = checks._value(text, 0)
        assert end == len(text)
        assert repr(got) == repr(want)  # repr: -0.0 and 0.0, 1 and 1.0, True and 1 differ
        if n % 2 == 0:  # escaped to ASCII (a raw lone surrogate cannot be written as UTF-8)
            path.write_text(text, encoding="utf-8")
            assert repr(checks.load_spec(str(path))) == repr(want)


@pytest.mark.parametrize("text", ['{"a": 1} x', '{"a": }', '{"a" 1}', "[1, 2", '"open', "{'a': 1}", "+1", "-",
                                  "1.2.3", "", "tru", '{"a": 1,}', "[1,]", '"\\x"', '"\\u12"'])
def test_a_broken_spec_fails_with_jsons_error(tmp_path, text):
    path = tmp_path / "spec.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(json.JSONDecodeError):
        checks.load_spec(str(path))


def test_a_grade_imports_json_only_for_a_json_check(tmp_path):
    """The checker run as ``tests/test.sh`` runs it (``python3 -I -S check.py spec.json``): its imports
    (``-X importtime``) hold neither ``json`` nor ``re`` unless a check reads JSON."""
    (tmp_path / "a.txt").write_text("5\n")
    (tmp_path / "b.json").write_text('{"k": [1, 2]}')
    for checks_list, want in (([{"kind": "text", "path": "a.txt", "text": "5"}], set()),
                              ([{"kind": "json", "path": "b.json", "value": {"k": [1, 2]}}], {"json", "re"})):
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"workdir": str(tmp_path), "checks": checks_list}))
        out = subprocess.run([sys.executable, "-I", "-S", "-X", "importtime", checks.__file__, str(spec)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and "1 of 1 checks hold" in out.stdout, out.stdout + out.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
        assert imported & {"json", "re"} == want, sorted(imported)
