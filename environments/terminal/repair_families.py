"""Terminal-v0 families that repair something: a JSON config, a KEY=VALUE or INI config, a failing shell
script, a failing Python script. Scripts are checked by running them, on their own data and on fresh
data the agent never saw (a script that prints a memorised answer fails)."""

from __future__ import annotations

import json

from environments.terminal.families import NOUNS, Draw, Generated, family, level


def sed_fix(path: str, wrong: str, right: str) -> str:
    """A ``sed -i`` command replacing the first ``wrong`` (literal text) on a line by ``right``."""
    def pattern(s: str) -> str:
        return "".join("\\" + c if c in "\\/.*[]^$&" else c for c in s)

    def replacement(s: str) -> str:
        return "".join("\\" + c if c in "\\/&" else c for c in s)

    if "'" in wrong + right:
        raise ValueError("sed_fix takes text without single quotes")
    return f"sed -i 's/{pattern(wrong)}/{replacement(right)}/' {path}"


@family("fix_json_config")
def fix_json_config(draw: Draw, d: int) -> Generated:
    cfg = {"name": draw.pick(NOUNS), "host": "127.0.0.1", "port": draw.pick((8000, 8080, 5000, 3000)),
           "debug": False, "workers": draw.int(2, 6), "log_level": "info",
           "database": {"host": "db.internal", "port": 5432, "name": draw.pick(NOUNS)}}
    want = json.loads(json.dumps(cfg))
    changes = draw.sample([("port", draw.pick((8443, 9090, 8888))), ("workers", draw.int(8, 16)),
                           ("debug", True), ("log_level", draw.pick(("debug", "warning")))], level(d, [1, 1, 1, 1, 2]))
    if d >= 4:
        changes[0] = ("database.port", draw.pick((5433, 6432)))
    for key, value in changes:
        *parents, last = key.split(".")
        node = want
        for p in parents:
            node = node[p]
        node[last] = value
    text = json.dumps(cfg, indent=2) + "\n"
    broken = text
    if d >= 3:  # a trailing comma after the last member
        broken = broken.replace('"name": "' + cfg["database"]["name"] + '"\n  }', '"name": "'
                                + cfg["database"]["name"] + '",\n  }')
    if d >= 5:  # a string in single quotes
        broken = broken.replace('"host": "127.0.0.1"', "'host': '127.0.0.1'")
    asks = " and ".join(f"set {k} to {json.dumps(v)}" for k, v in changes)
    if d <= 2:
        key, value = changes[0]
        old = json.dumps(cfg[key])
        cmd = sed_fix("config.json", f'"{key}": {old}', f'"{key}": {json.dumps(value)}')
        what = f"In config.json, {asks} (it is {old} now)."
    else:
        cmd = json_repair(changes, quotes=d >= 5)
        what = f"config.json is no longer valid JSON. Fix it so that it parses, keep every setting, and {asks}."
    return Generated(instruction=what + " Keep the file valid JSON.", files={"config.json": broken},
                     solution=(cmd,), checks=({"kind": "json", "path": "config.json", "value": want},))


def json_repair(changes: list[tuple[str, object]], quotes: bool) -> str:
    """The reference of a broken config.json (levels 3-5): a policy can write it from the instruction alone,
    as it never holds a value the file has and the instruction does not show (it once wrote the whole file from
    the generator's settings). Each asked key's line is rewritten whatever its value (top-level keys are indented
    two spaces, ``database.*`` four; none is the last of its object), the comma after the nested ``name`` (the
    last member) is dropped, and with ``quotes`` single quotes become double ones (no value holds one)."""
    script = []
    for key, value in changes:
        indent = "    " if key.startswith("database.") else "  "
        name = key.split(".")[-1]
        script.append(f's/^{indent}"{name}": .*/{indent}"{name}": {json.dumps(value)},/')
    script.append('/^    "name"/s/,$//')
    cmd = f"sed -i '{'; '.join(script)}' config.json"
    return cmd + ("; sed -i \"s/'/\\\"/g\" config.json" if quotes else "")


@family("set_config_key")
def set_config_key(draw: Draw, d: int) -> Generated:
    keys = {"APP_NAME": draw.pick(NOUNS), "LOG_LEVEL": "info", "MAX_CONN": str(draw.int(10, 40)),
            "TIMEOUT": str(draw.int(5, 60)), "CACHE_DIR": f"/var/cache/{draw.pick(NOUNS)}"}
    if d == 5:
        return _ini_key(draw)
    lines = ["# settings for " + keys["APP_NAME"]] + [f"{k}={v}" for k, v in keys.items()]
    change_key = draw.pick(["LOG_LEVEL", "MAX_CONN", "TIMEOUT"])
    new_value = draw.pick(("debug", "warn")) if change_key == "LOG_LEVEL" else str(int(keys[change_key]) + draw.int(1, 50))
    if d >= 2:  # a commented-out line and a longer key with the same prefix
        lines.insert(2, f"# {change_key}={draw.pick(('old', '0'))}")
        lines.append(f"{change_key}_FILE=/tmp/{draw.pick(NOUNS)}.txt")
    want = [f"{change_key}={new_value}" if ln.startswith(change_key + "=") else ln for ln in lines]
    cmds, asks = [], []
    if d != 3:
        cmds.append(f"sed -i 's/^{change_key}=.*/{change_key}={new_value}/' settings.conf")
        asks.append(f"set {change_key} to {new_value}")
    else:
        want = list(lines)
    if d >= 3:
        add_key, add_value = draw.pick((("RETRIES", str(draw.int(2, 9))), ("REGION", draw.pick(("eu", "us"))),
                                        ("WORKERS", str(draw.int(2, 9)))))
        want.append(f"{add_key}={add_value}")
        cmds.append(f"echo '{add_key}={add_value}' >> settings.conf")
        asks.append(f"add the setting {add_key}={add_value} as a new last line")
    exact = " Change nothing else (comments included)." if d >= 2 else ""
    ask = " and ".join(asks)
    return Generated(  # upper-case the first letter only: str.capitalize() would lower-case the key names
        instruction=f"settings.conf holds KEY=VALUE lines. {ask[0].upper() + ask[1:]}.{exact}",
        files={"settings.conf": "\n".join(lines) + "\n"}, solution=tuple(cmds),
        checks=({"kind": "lines", "path": "settings.conf", "lines": want},))


def _ini_key(draw: Draw) -> Generated:
    """The hardest set_config_key: a key that occurs in two INI sections, changed in one."""
    server_port, db_port, new = draw.int(8000, 8999), draw.int(5400, 5499), draw.int(6000, 6999)
    lines = ["[server]", "host=0.0.0.0", f"port={server_port}", "", "[database]", "host=db.internal",
             f"port={db_port}", f"name={draw.pick(NOUNS)}", "", "[cache]", f"port={draw.int(6300, 6399)}"]
    want = [ln for ln in lines if ln]
    want[want.index(f"port={db_port}")] = f"port={new}"
    return Generated(
        instruction=f"In app.ini, set port to {new} in the [database] section only; the other sections keep "
                    f"their port.", files={"app.ini": "\n".join(lines) + "\n"},
        solution=(f"sed -i '/^\\[database\\]/,/^\\[/ s/^port=.*/port={new}/' app.ini",),
        checks=({"kind": "lines", "path": "app.ini", "lines": want},))


SHELL = {"sum": ["#!/bin/bash", "# Prints the sum of the numbers in {data}, one number per line.", "total=0",
                 "while read -r n; do", "    total=$((total + n))", "done < {data}", 'echo "$total"'],
         "max": ["#!/bin/bash", "# Prints the largest of the numbers in {data}, one number per line.", "best=0",
                 "while read -r n; do", '    if [ "$n" -gt "$best" ]; then best=$n; fi', "done < {data}",
                 'echo "$best"']}
SHELL_BUGS = {"sum": [("done < {data}", "done < {typo}", "it reads {typo} instead of {data}"),
                      ('echo "$total"', 'echo "$totl"', "it prints an empty line"),
                      ("total=$((total + n))", "total=$((total - n))", "it prints a wrong number")],
              "max": [("done < {data}", "done < {typo}", "it reads {typo} instead of {data}"),
                      ('echo "$best"', 'echo "$bset"', "it prints an empty line"),
                      ('-gt "$best"', '-lt "$best"', "it prints a wrong number")]}


@family("fix_shell_script")
def fix_shell_script(draw: Draw, d: int) -> Generated:
    kind = draw.pick(sorted(SHELL))
    script, data = ("tools/report.sh", "data/values.txt") if d == 5 else ("run.sh", "numbers.txt")
    typo = data.replace("values", "value") if d == 5 else "number.txt"
    nums, fresh = [draw.int(1, 999) for _ in range(level(d, [5, 8, 10, 12, 15]))], [draw.int(1, 999) for _ in range(7)]
    bugs = [0] if d == 1 else draw.sample(range(3), level(d, [1, 1, 1, 2, 2]))
    good = "\n".join(SHELL[kind]).format(data=data) + "\n"
    text, cmds, symptoms = good, [], []
    for i in bugs:
        right, wrong, symptom = (s.format(data=data, typo=typo) for s in SHELL_BUGS[kind][i])
        text = text.replace(right, wrong)
        cmds.append(sed_fix(script, wrong, right))
        symptoms.append(symptom)
    run = f"bash {script}"
    if d <= 2:
        why = f" ({'; '.join(symptoms)})"
    else:
        why = " (it prints the wrong result)" if d < 4 else ""
    return Generated(
        instruction=f"`{run}` should print the {'sum' if kind == 'sum' else 'largest'} of the numbers in {data}, "
                    f"but it does not{why}. Fix {script}; do not change {data}.",
        files={script: text, data: "\n".join(map(str, nums)) + "\n"}, solution=tuple(cmds),
        checks=({"kind": "command", "command": run, "stdout": str(_value(kind, nums))},
                {"kind": "command", "command": run, "stdout": str(_value(kind, fresh)),
                 "files": {data: "\n".join(map(str, fresh)) + "\n"}}))


def _value(kind: str, nums: list[int]) -> int:
    return {"sum": sum, "max": max, "min": min}[kind](nums)


PYTHON = ["import csv", "", "", "def main():", '    with open("{data}") as f:', "        rows = list(csv.DictReader(f))",
          "    values = []", "    for row in rows:", '        values.append(int(row["{column}"]))', "    print({expr})",
          "", "", "main()"]
PY_EXPR = {"total": "sum(values)", "largest": "max(values)", "smallest": "min(values)"}
PY_BUGS = [('row["{column}"]', 'row["{typo}"]', "it stops with a KeyError: '{typo}' is not a column"),
           ("for row in rows:", "for row in rows[1:]:", "the result leaves out a row"),
           ('open("{data}")', 'open("{typo_file}")', "it looks for {typo_file}, which does not exist")]


@family("fix_python_script")
def fix_python_script(draw: Draw, d: int) -> Generated:
    what = draw.pick(sorted(PY_EXPR))
    column = draw.pick(("amount", "value", "price", "count"))
    typo = column[:-2] + column[-1] + column[-2]
    script, data = ("report/stats.py", "report/data.csv") if d == 5 else ("stats.py", "data.csv")
    fields = dict(data=data, column=column, typo=typo, typo_file=data.replace("data", "date"), expr=PY_EXPR[what])
    good = "\n".join(PYTHON).format(**fields) + "\n"
    bugs = [0] if d == 1 else draw.sample(range(3), level(d, [1, 1, 1, 2, 2]))
    text, cmds, symptoms = good, [], []
    for i in bugs:
        right, wrong, symptom = (s.format(**fields) for s in PY_BUGS[i])
        text = text.replace(right, wrong)
        cmds.append(sed_fix(script, wrong, right))
        symptoms.append(symptom)
    if d >= 3:  # no symptom told: which bugs the script has is not in the instruction, so every one is fixed
        cmds = [f"sed -i 's/row\\[\"[a-z]*\"\\]/row[\"{column}\"]/; s/rows\\[1:\\]/rows/; s/date\\.csv/data.csv/' {script}"]
    rows, fresh = ([draw.int(1, 999) for _ in range(level(d, [4, 6, 8, 10, 12]))] for _ in range(2))
    if 1 in bugs:  # the row left out must change the answer
        rows[0] = max(rows) + 1 if what == "largest" else (min(rows) - 1 if what == "smallest" else rows[0])
        fresh[0] = max(fresh) + 1 if what == "largest" else (min(fresh) - 1 if what == "smallest" else fresh[0])
    def csv_text(vals: list[int]) -> str:
        return f"name,{column}\n" + "".join(f"{draw.pick(NOUNS)},{v}\n" for v in vals)

    expected = {"total": sum, "largest": max, "smallest": min}[what]
    run = f"python3 {script}"
    why = f" ({'; '.join(symptoms)})" if d <= 2 else ""
    return Generated(
        instruction=f"`{run}` should print the {what} of the {column} column of {data}, but it does not{why}. "
                    f"Fix {script}; do not change {data}.",
        files={script: text, data: csv_text(rows)}, solution=tuple(cmds),
        checks=({"kind": "command", "command": run, "stdout": str(expected(rows))},
                {"kind": "command", "command": run, "stdout": str(expected(fresh)), "files": {data: csv_text(fresh)}}))
