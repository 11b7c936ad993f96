import json
import sys

with open("/app/config.json") as f:
    sys.exit(0 if json.load(f).get("ready") is True else 1)
