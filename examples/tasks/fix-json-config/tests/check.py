import json
import sys

EXPECTED = {
    "server": {"host": "0.0.0.0", "port": 8443, "workers": 4},
    "database": {"url": "postgres://app@db:5432/app", "pool_size": 10, "timeout_s": 2.5},
    "features": ["search", "export", "beta-ui"],
    "log_level": "info",
}

try:
    with open("/app/config/app.json") as f:
        got = json.load(f)
except (OSError, ValueError) as e:
    sys.exit(f"/app/config/app.json does not load as JSON: {e}")
if got != EXPECTED:
    sys.exit(f"settings differ: expected {EXPECTED}, got {got}")
if type(got["server"]["port"]) is not int or type(got["database"]["timeout_s"]) is not float:
    sys.exit("a setting changed its type")
print("ok")
