"""Terminal-v0 families about text: grep and extract from logs, sort and deduplicate, replace words,
sum a CSV column. Configs and broken scripts are in :mod:`environments.terminal.repair_families`."""

from __future__ import annotations

from environments.terminal.families import (
    LEVELS,
    MESSAGES,
    NOUNS,
    USERS,
    Draw,
    Generated,
    family,
    level,
    sha256,
)


def log_lines(draw: Draw, n: int, traps: bool) -> list[tuple[str, str]]:
    """``n`` (level, line) pairs of an application log; with ``traps`` some messages name a level."""
    out = []
    for _ in range(n):
        lvl = draw.pick(LEVELS)
        msg = draw.pick(MESSAGES)
        if traps and draw.chance(0.25):
            msg = f"{msg} after {draw.pick(LEVELS)} in {draw.pick(NOUNS)}"
        out.append((lvl, f"2024-05-{draw.int(1, 28):02d} {draw.int(0, 23):02d}:{draw.int(0, 59):02d}:"
                         f"{draw.int(0, 59):02d} {lvl} {msg}"))
    return out


@family("grep_count")
def grep_count(draw: Draw, d: int) -> Generated:
    target = draw.pick(LEVELS)
    multi = d >= 4
    names = [f"logs/{s}.log" for s in draw.names(level(d, [1, 1, 1, 3, 4]))] if multi else \
        [f"{draw.pick(('app', 'server', 'worker', 'api'))}.log"]
    files, count = {}, 0
    for name in names:
        lines = log_lines(draw, level(d, [8, 15, 30, 30, 40]), traps=d >= 3)
        count += sum(lvl == target for lvl, _ in lines)
        files[name] = "\n".join(line for _, line in lines) + "\n"
    if d >= 5:  # a rotated log that does not count
        files[f"logs/{draw.pick(NOUNS)}.log.1"] = "\n".join(ln for _, ln in log_lines(draw, 10, True)) + "\n"
    src = "logs/*.log" if multi else names[0]
    where = "all files in logs/ whose name ends in .log" if multi else names[0]
    if d <= 2:
        cmd = f"grep -c '{target}' {src} > answer.txt"
        how = f"that contain {target}"
    else:
        cmd = f"cat {src} | awk '$3 == \"{target}\"' | wc -l > answer.txt"
        how = (f"whose level (the third field, after the date and the time) is {target}; a message may mention "
               f"a level too, which does not count")
    return Generated(instruction=f"Count the lines of {where} {how}, and write the count to answer.txt.",
                     files=files, solution=(cmd,), checks=({"kind": "text", "path": "answer.txt", "text": str(count)},))


@family("extract_users")
def extract_users(draw: Draw, d: int) -> Generated:
    multi = d >= 4
    names = [f"logs/auth-{i}.log" for i in range(1, 4)] if multi else ["auth.log"]
    users = draw.sample(USERS, level(d, [3, 5, 7, 9, 12]))
    files, failures = {}, {}
    for name in names:
        rows = []
        for _ in range(level(d, [6, 12, 20, 16, 20])):
            u, ok = draw.pick(users), draw.chance(0.5)
            ip = f"10.0.{draw.int(0, 9)}.{draw.int(1, 254)}"
            rows.append(f"2024-05-{draw.int(1, 28):02d} sshd: user={u} action=login "
                        f"status={'ok' if ok else 'failed'} ip={ip}")
            if not ok:
                failures.setdefault(u, []).append(ip)
        files[name] = "\n".join(rows) + "\n"
    src = "logs/*.log" if multi else names[0]
    grab = "grep -o 'user=[a-z]*' | cut -d= -f2"
    if d == 1:
        want = sorted({u for text in files.values() for u in _users(text)})
        cmd, what = f"grep -o 'user=[a-z]*' {src} | cut -d= -f2 | sort -u > users.txt", "every distinct user name"
    elif d <= 4:
        want = sorted(failures)
        cmd = f"cat {src} | grep 'status=failed' | {grab} | sort -u > users.txt"
        what = "every distinct user name with at least one failed login (status=failed)"
    else:
        want = sorted(u for u, ips in failures.items() if len(ips) >= 2)
        cmd = f"cat {src} | grep 'status=failed' | {grab} | sort | uniq -c | awk '$1 >= 2 {{print $2}}' > users.txt"
        what = "every user name with at least two failed logins (status=failed)"
    if not want:  # every draw must leave something to write
        return extract_users(draw, d)
    where = "the files logs/*.log" if multi else names[0]
    return Generated(
        instruction=f"Each line of {where} records a login (user=NAME ... status=ok|failed). Write {what} to "
                    f"users.txt, one per line, sorted alphabetically.",
        files=files, solution=(cmd,), checks=({"kind": "lines", "path": "users.txt", "lines": want},))


def _users(text: str) -> list[str]:
    return [w.split("=", 1)[1] for w in text.split() if w.startswith("user=")]


@family("sort_dedup")
def sort_dedup(draw: Draw, d: int) -> Generated:
    if d == 1:
        items = draw.sample(NOUNS, 8)
        data = items + draw.sample(items, 4)
        want, cmd = sorted(set(data)), "sort -u words.txt > sorted.txt"
        src, what = "words.txt", "alphabetically"
    elif d <= 3:
        nums = draw.sample(range(1, 10_000 if d == 2 else 100_000), 12)
        data = [str(n) for n in nums + draw.sample(nums, 5)]
        rev = d == 3
        want = [str(n) for n in sorted(set(nums), reverse=rev)]
        cmd = f"sort -n{' -r' if rev else ''} -u numbers.txt > sorted.txt"
        src, what = "numbers.txt", f"numerically, {'largest' if rev else 'smallest'} first"
    else:
        people = draw.sample(USERS, 10)
        rows = [f"{p},{draw.int(10, 99)}" for p in people]
        data = ["name,score"] + draw.shuffled(rows + (draw.sample(rows, 3) if d == 5 else []))
        body = sorted(set(rows), key=lambda r: (-int(r.split(",")[1]), r.split(",")[0]))
        want = ["name,score"] + body
        cmd = "(head -n 1 scores.csv; tail -n +2 scores.csv | sort -u | sort -t, -k2,2nr -k1,1) > sorted.txt"
        src = "scores.csv"
        what = "by score (the second column), highest first, ties by name; the header line stays first"
    data = data if d >= 4 else draw.shuffled(data)
    dedup = "remove duplicate lines" if d != 4 else "keep every row"
    return Generated(
        instruction=f"Sort the lines of {src} {what}, {dedup}, and write the result to sorted.txt.",
        files={src: "\n".join(data) + "\n"}, solution=(cmd,),
        checks=({"kind": "lines", "path": "sorted.txt", "lines": want},
                {"kind": "sha256", "path": src, "sha256": sha256("\n".join(data) + "\n")}))


@family("replace_word")
def replace_word(draw: Draw, d: int) -> Generated:
    old, new = draw.sample(NOUNS, 2)
    names = ["notes.txt"] if d == 1 else [f"docs/{s}.txt" for s in draw.names(level(d, [1, 3, 4, 5, 6]))]
    if d >= 4:
        names += [f"docs/{draw.pick(NOUNS)}/{s}.txt" for s in draw.names(2)]
    files, after = {}, {}
    for name in names:
        words = [draw.pick(NOUNS) for _ in range(24)]
        for i in draw.sample(range(24), 3):
            words[i] = old
        if d >= 3:  # longer words that contain the old one must not change
            words[draw.int(0, 23)] = old + "wood"
        text = "\n".join(" ".join(words[i:i + 6]) for i in range(0, 24, 6)) + "\n"
        files[name] = text
        after[name] = "\n".join(" ".join(new if w == old else w for w in line.split(" "))
                                for line in text.split("\n"))
    others = {}
    if d >= 4:  # the same word in another kind of file stays
        others[f"docs/{draw.pick(NOUNS)}.md"] = f"{old} {draw.pick(NOUNS)}\n"
    files.update(others)
    word = "whole word " if d >= 3 else ""
    pattern = f"\\b{old}\\b" if d >= 3 else old
    if d == 1:
        cmd, where = f"sed -i 's/{pattern}/{new}/g' notes.txt", "notes.txt"
    elif d <= 3:
        cmd, where = f"sed -i 's/{pattern}/{new}/g' docs/*.txt", "every file docs/*.txt"
    else:
        cmd = f"find docs -type f -name '*.txt' -exec sed -i 's/{pattern}/{new}/g' {{}} +"
        where = "every .txt file under docs/ (subdirectories included; other files stay as they are)"
    longer = f" (a longer word such as {old}wood stays)" if d >= 3 else ""
    return Generated(
        instruction=f"Replace every {word}{old} with {new} in {where}{longer}.", files=files, solution=(cmd,),
        checks=(*({"kind": "sha256", "path": n, "sha256": sha256(t)} for n, t in after.items()),
                *({"kind": "sha256", "path": n, "sha256": sha256(t)} for n, t in others.items())))


@family("csv_sum")
def csv_sum(draw: Draw, d: int) -> Generated:
    regions, products = ("north", "south", "east", "west"), draw.sample(NOUNS, 4)
    cols = ["region", "product", "amount"]
    if d >= 4:
        cols = draw.shuffled(cols)
    n_files = 3 if d == 5 else 1
    names = [f"sales/{m}.csv" for m in ("jan", "feb", "mar")] if n_files > 1 else ["sales.csv"]
    region, product = draw.pick(regions), draw.pick(products)
    files, total = {}, 0
    for name in names:
        rows = [",".join(cols)]
        for _ in range(level(d, [6, 10, 15, 20, 15])):
            rec = {"region": draw.pick(regions), "product": draw.pick(products), "amount": str(draw.int(1, 500))}
            rows.append(",".join(rec[c] for c in cols))
            if (d == 1 or rec["region"] == region) and (d < 3 or rec["product"] == product):
                total += int(rec["amount"])
        files[name] = "\n".join(rows) + "\n"
    if total == 0:  # every draw must have a non-zero answer
        return csv_sum(draw, d)
    # levels 1-3 keep the columns in one order, so a position is the template's; from level 4 the order is the
    # header's alone, and the reference reads it there (a position would be a value only the file shows)
    idx = {c: f"c[\"{c}\"]" if d >= 4 else str(i + 1) for i, c in enumerate(cols)}
    first = "NR" if n_files == 1 else "FNR"
    cond = [f"{first} > 1"] if d < 4 else []
    if d >= 2:
        cond.append(f"${idx['region']} == \"{region}\"")
    if d >= 3:
        cond.append(f"${idx['product']} == \"{product}\"")
    header = f"{first} == 1 {{for (i = 1; i <= NF; i++) c[$i] = i; next}} " if d >= 4 else ""
    src = names[0] if n_files == 1 else "sales/*.csv"
    cmd = (f"awk -F, '{header}{' && '.join(cond)} {{s += ${idx['amount']}}} END {{print s + 0}}' {src} "
           "> answer.txt")
    which = "all rows" if d == 1 else f"the rows whose region is {region}" + (
        f" and whose product is {product}" if d >= 3 else "")
    where = names[0] if n_files == 1 else "all files sales/*.csv (each has a header line)"
    return Generated(
        instruction=f"Sum the amount column of {which} in {where} and write the total to answer.txt.",
        files=files, solution=(cmd,), checks=({"kind": "text", "path": "answer.txt", "text": str(total)},))
