"""Terminal-v0 families about files: find and count, rename, sort into folders, delete by rule, archive,
checksum, permissions, the largest file. See :mod:`environments.terminal.families`."""

from __future__ import annotations

import posixpath

from environments.terminal.families import (
    DIRS,
    EXTS,
    NOUNS,
    Draw,
    Generated,
    family,
    level,
    sha256,
    unchanged,
)


def spread(draw: Draw, root: str, stems: list[str], exts: list[str], depth: int) -> list[str]:
    """Paths ``root/[sub/...]stem.ext`` for each (stem, ext), nested up to ``depth`` folders deep."""
    subs = [""] + [posixpath.join(*draw.sample(NOUNS, draw.int(1, depth))) for _ in range(3)] if depth else [""]
    return [posixpath.join(root, draw.pick(subs), f"{s}.{e}") for s, e in zip(stems, exts)]


def contents(draw: Draw, path: str) -> str:
    """Some lines of text for a file (distinct per file, so a moved file is recognisable)."""
    return "\n".join(f"{draw.pick(NOUNS)} {draw.int(0, 9999)}" for _ in range(draw.int(1, 5))) + f"\n# {path}\n"


@family("count_files")
def count_files(draw: Draw, d: int) -> Generated:
    root, ext = draw.pick(DIRS), draw.pick(EXTS)
    others = [e for e in EXTS if e != ext]
    n_match = draw.int(*level(d, [(2, 6), (3, 9), (4, 12), (5, 16), (6, 24)]))
    n_other = level(d, [2, 4, 8, 12, 16])
    stems = draw.names(n_match + n_other, spaces=d >= 4)
    exts = [ext] * n_match + [draw.pick(others) for _ in range(n_other)]
    paths = spread(draw, root, stems, exts, level(d, [0, 1, 2, 3, 3]))
    if d >= 2:  # near misses: a longer extension, the extension inside a name
        paths += [f"{root}/{draw.pick(NOUNS)}.{ext}.bak", f"{root}/{draw.pick(NOUNS)}_{ext}.{draw.pick(others)}"]
    if d >= 3:  # matching files outside the directory
        paths += [f"{draw.pick([x for x in DIRS if x != root])}/{draw.pick(NOUNS)}.{ext}"]
    files = {p: contents(draw, p) for p in paths}
    where = f"the directory {root}" if d == 1 else f"{root} and all of its subdirectories"
    return Generated(
        instruction=f"How many files with the extension .{ext} are in {where}? Write the number to answer.txt.",
        files=files, solution=(f"find {root} -type f -name '*.{ext}' | wc -l > answer.txt",),
        checks=({"kind": "text", "path": "answer.txt", "text": str(n_match)},))


@family("rename_extension")
def rename_extension(draw: Draw, d: int) -> Generated:
    root = draw.pick(DIRS)
    a, b = draw.sample(EXTS, 2)
    n = level(d, [3, 5, 8, 10, 14])
    stems = draw.names(n + level(d, [1, 3, 5, 6, 8]), spaces=d >= 4)
    exts = [a] * n + [draw.pick([e for e in EXTS if e not in (a, b)]) for _ in stems[n:]]
    paths = spread(draw, root, stems, exts, level(d, [0, 0, 2, 2, 3]))
    if d >= 2:
        paths.append(f"{root}/{draw.pick(NOUNS)}.{a}.orig")
    files = {p: contents(draw, p) for p in paths}
    renamed = {p: p[:-len(a)] + b if p.endswith("." + a) else p for p in paths}
    if d <= 2:
        cmd = f'for f in {root}/*.{a}; do mv "$f" "${{f%.{a}}}.{b}"; done'
    else:
        cmd = (f"find {root} -type f -name '*.{a}' | while IFS= read -r f; do mv \"$f\" \"${{f%.{a}}}.{b}\"; "
               f"done")
    where = f"the directory {root}" if d <= 2 else f"{root} and its subdirectories"
    return Generated(
        instruction=f"Rename every file ending in .{a} in {where} so that it ends in .{b} instead "
                    f"(keep the rest of the name and the contents; leave other files alone).",
        files=files, solution=(cmd,),
        checks=({"kind": "files", "dir": root, "names": sorted(posixpath.relpath(p, root) for p in renamed.values())},
                *({"kind": "sha256", "path": new, "sha256": sha256(files[old])} for old, new in renamed.items())))


@family("organize_by_extension")
def organize_by_extension(draw: Draw, d: int) -> Generated:
    root = draw.pick(("inbox", "downloads", "uploads", "incoming"))
    kinds = draw.sample(EXTS, level(d, [2, 3, 4, 5, 6]))
    stems = draw.names(level(d, [4, 6, 10, 14, 20]), spaces=d >= 4)
    paths = [f"{root}/{s}.{draw.pick(kinds)}" for s in stems]
    plain = [f"{root}/{s.upper().replace(' ', '_')}" for s in draw.sample(NOUNS, 2)] if d >= 3 else []
    existing = [f"{root}/{kinds[0]}/{draw.pick(NOUNS)}-old.{kinds[0]}"] if d >= 5 else []
    files = {p: contents(draw, p) for p in paths + plain + existing}
    moved = {p: f"{root}/{p.rsplit('.', 1)[1]}/{posixpath.basename(p)}" for p in paths}
    cmd = (f'(cd {root} && for f in *.*; do [ -f "$f" ] || continue; mkdir -p "${{f##*.}}" && '
           f'mv "$f" "${{f##*.}}/"; done)')
    extra = " Files without an extension stay where they are." if d >= 3 else ""
    return Generated(
        instruction=f"Sort the files in {root} into subdirectories of {root} named after their extension: for "
                    f"example {root}/{stems[0]}.{kinds[0]} goes to {root}/{kinds[0]}/{stems[0]}.{kinds[0]}.{extra}",
        files=files, solution=(cmd,),
        checks=({"kind": "files", "dir": root,
                 "names": sorted(posixpath.relpath(p, root) for p in [*moved.values(), *plain, *existing])},
                *({"kind": "sha256", "path": new, "sha256": sha256(files[old])} for old, new in moved.items())))


@family("delete_matching")
def delete_matching(draw: Draw, d: int) -> Generated:
    root = draw.pick(("cache", "build", "tmp_work", "scratch", "output"))
    junk = draw.pick(("tmp", "bak", "swp", "old", "pyc"))
    keep_exts = [e for e in EXTS if e != junk]
    n_junk, n_keep = level(d, [2, 4, 6, 9, 12]), level(d, [2, 4, 6, 9, 12])
    stems = draw.names(n_junk + n_keep, spaces=d >= 4)
    exts = [junk] * n_junk + [draw.pick(keep_exts) for _ in range(n_keep)]
    paths = spread(draw, root, stems, exts, level(d, [0, 1, 2, 3, 3]))
    if d >= 2:
        paths += [f"{root}/{draw.pick(NOUNS)}.{junk}.keep", f"{root}/{junk}_{draw.pick(NOUNS)}.txt"]
    files = {p: contents(draw, p) for p in paths}
    kept = [p for p in paths if not p.endswith("." + junk)]
    where = f"the directory {root}" if d == 1 else f"{root} and its subdirectories"
    return Generated(
        instruction=f"Delete every file whose name ends in .{junk} in {where}. Keep every other file as it is.",
        files=files, solution=(f"find {root} -type f -name '*.{junk}' -delete",),
        checks=({"kind": "files", "dir": root, "names": sorted(posixpath.relpath(p, root) for p in kept)},
                *unchanged(files, kept)))


@family("archive_directory")
def archive_directory(draw: Draw, d: int) -> Generated:
    root = draw.pick(("project", "site", "app", "webapp", "service"))
    name = draw.pick(("backup", "release", "snapshot", "bundle"))
    stems = draw.names(level(d, [3, 5, 8, 10, 14]), spaces=d >= 5)
    skip = draw.pick(("log", "tmp", "bak")) if d >= 3 else None
    exts = [draw.pick(("py", "md", "txt", "json", "cfg")) for _ in stems]
    if skip:
        exts[: max(1, len(exts) // 3)] = [skip] * max(1, len(exts) // 3)
    paths = spread(draw, root, stems, exts, level(d, [0, 1, 2, 2, 3]))
    files = {p: contents(draw, p) for p in paths}
    members = {p: sha256(files[p]) for p in paths if not (skip and p.endswith("." + skip))}
    exclude = f" --exclude='*.{skip}'" if skip else ""
    leave = f", leaving out every file ending in .{skip}" if skip else ""
    return Generated(
        instruction=f"Create a gzip-compressed tar archive {name}.tar.gz of the directory {root}{leave}. Paths in "
                    f"the archive must start with {root}/ (as `tar czf {name}.tar.gz {root}` writes them). Keep "
                    f"{root} itself as it is.",
        files=files, solution=(f"tar czf {name}.tar.gz{exclude} {root}",),
        checks=({"kind": "tar", "path": f"{name}.tar.gz", "members": members},
                {"kind": "files", "dir": root, "names": sorted(posixpath.relpath(p, root) for p in paths)}))


@family("checksums")
def checksums(draw: Draw, d: int) -> Generated:
    root = draw.pick(("data", "release", "dist", "assets", "payload"))
    ext = draw.pick(("csv", "bin", "dat", "json")) if d >= 2 else None
    stems = draw.names(level(d, [3, 5, 7, 9, 12]), spaces=d >= 4)
    exts = [ext or draw.pick(EXTS) for _ in stems]
    if ext:
        exts[::3] = [draw.pick([e for e in EXTS if e != ext]) for _ in exts[::3]]
    paths = spread(draw, root, stems, exts, level(d, [0, 0, 2, 2, 3]))
    files = {p: contents(draw, p) for p in paths}
    chosen = sorted((p for p in paths if ext is None or p.endswith("." + ext)), key=lambda p: p.encode())
    lines = [f"{sha256(files[p])}  {p}" for p in chosen]
    which = "every file" if not ext else f"every file ending in .{ext}"
    where = f"in {root}" if d <= 2 else f"under {root} (subdirectories included)"
    if d <= 2:
        cmd = f"sha256sum {root}/*{'.' + ext if ext else ''} > SHA256SUMS"
    else:
        cmd = (f"find {root} -type f -name '*.{ext}' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum > SHA256SUMS")
    return Generated(
        instruction=f"Write the SHA-256 checksums of {which} {where} to SHA256SUMS, one line per file in the format "
                    f"sha256sum prints (`HASH  {root}/NAME`), sorted by path in byte order.",
        files=files, solution=(cmd,), checks=({"kind": "lines", "path": "SHA256SUMS", "lines": lines},))


@family("make_executable")
def make_executable(draw: Draw, d: int) -> Generated:
    root = draw.pick(("scripts", "bin", "tools", "hooks"))
    stems = draw.names(level(d, [3, 5, 7, 9, 12]), spaces=d >= 5)
    n_sh = max(1, len(stems) // 2)
    exts = ["sh"] * n_sh + [draw.pick(("txt", "md", "py", "cfg")) for _ in stems[n_sh:]]
    paths = spread(draw, root, stems, exts, level(d, [0, 0, 2, 2, 3]))
    files = {p: ("#!/bin/bash\necho " + posixpath.basename(p) + "\n" if p.endswith(".sh") else contents(draw, p))
             for p in paths}
    start_exec = frozenset(p for p in paths if not p.endswith(".sh") and d >= 4 and draw.chance(0.5))
    cmd = [f"chmod +x {root}/*.sh" if d <= 2 else f"find {root} -type f -name '*.sh' -exec chmod +x {{}} +"]
    if start_exec:
        cmd.append(f"find {root} -type f ! -name '*.sh' -exec chmod -x {{}} +")
    rule = " Every other file there must not be executable." if start_exec else " Leave other files as they are."
    where = f"the directory {root}" if d <= 2 else f"{root} and its subdirectories"
    return Generated(
        instruction=f"Make every file ending in .sh in {where} executable.{rule}",
        files=files, executable=start_exec, solution=tuple(cmd),
        checks=(*({"kind": "executable", "path": p, "value": p.endswith(".sh")} for p in paths
                  if p.endswith(".sh") or p in start_exec or d < 4),
                *unchanged(files, paths)))


@family("largest_file")
def largest_file(draw: Draw, d: int) -> Generated:
    root = draw.pick(DIRS)
    stems = draw.names(level(d, [3, 5, 8, 12, 16]), spaces=d >= 4)
    paths = spread(draw, root, stems, [draw.pick(EXTS) for _ in stems], level(d, [0, 0, 2, 3, 3]))
    sizes = draw.sample(range(100, 5000), len(paths))
    files = {p: (f"{p}\n" + "x" * size)[:size] + "\n" for p, size in zip(paths, sizes)}
    if d >= 2:  # a larger file elsewhere
        files[f"{draw.pick([x for x in DIRS if x != root])}/big.{draw.pick(EXTS)}"] = "y" * (max(sizes) + 500) + "\n"
    best = max(paths, key=lambda p: len(files[p]))
    if d <= 2:
        answer, cmd = posixpath.basename(best), f"ls -S {root} | head -n 1 > answer.txt"
        what = f"the name of the largest file in the directory {root} (just the file name)"
    else:
        answer = best
        cmd = f"find {root} -type f -printf '%s %p\\n' | sort -n | tail -n 1 | cut -d' ' -f2- > answer.txt"
        what = f"the path (starting with {root}/) of the largest file under {root}, subdirectories included"
    return Generated(instruction=f"Write {what} to answer.txt.", files=files, solution=(cmd,),
                     checks=({"kind": "text", "path": "answer.txt", "text": answer},))
