import hashlib
import os
import sys

ROOT = "/app/downloads"
problems = []
expected = [line.split("\t") for line in open("/tests/manifest.txt").read().splitlines() if line]
for rel, digest in expected:
    path = os.path.join(ROOT, rel)
    if not os.path.isfile(path):
        problems.append(f"missing {path}")
    elif hashlib.sha256(open(path, "rb").read()).hexdigest() != digest:
        problems.append(f"{path} changed")
left = [n for n in os.listdir(ROOT) if not os.path.isdir(os.path.join(ROOT, n))] if os.path.isdir(ROOT) else []
if left:
    problems.append(f"files left in {ROOT}: {left}")
found = sorted(os.path.relpath(os.path.join(top, f), ROOT) for top, _, files in os.walk(ROOT) for f in files)
if found != sorted(rel for rel, _ in expected):
    problems.append(f"unexpected files: {sorted(set(found) - {rel for rel, _ in expected})}")
if problems:
    sys.exit("; ".join(problems))
print("ok")
