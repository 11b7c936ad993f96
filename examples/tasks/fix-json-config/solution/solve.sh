#!/bin/bash
# Drop the comment, the trailing commas and the single quotes, then set the port with python's json.
set -e
f=/app/config/app.json
sed -i -e '/^[[:space:]]*\/\//d' -e "s/'\([^']*\)'/\"\1\"/g" "$f"
python3 - "$f" <<'PY'
import json, re, sys
path = sys.argv[1]
text = re.sub(r",(\s*[}\]])", r"\1", open(path).read())
config = json.loads(text)
config["server"]["port"] = 8443
with open(path, "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
PY
