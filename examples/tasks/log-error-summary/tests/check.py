import hashlib
import pathlib
import sys

EXPECTED = ["9 billing", "7 db", "5 api", "5 auth", "2 cache"]

out = pathlib.Path("/app/error_summary.txt")
if not out.is_file():
    sys.exit("no /app/error_summary.txt")
got = [" ".join(line.split()) for line in out.read_text().splitlines() if line.strip()]
if got != EXPECTED:
    sys.exit(f"expected {EXPECTED}, got {got}")
digests = dict(line.split() for line in pathlib.Path("/tests/logs.sha256").read_text().splitlines())
for name, digest in digests.items():
    path = pathlib.Path("/app/logs") / name
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        sys.exit(f"/app/logs/{name} was changed")
print("ok")
