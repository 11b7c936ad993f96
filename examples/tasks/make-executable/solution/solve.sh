#!/bin/bash
set -e
f=/app/bin/hello.py
sed -i '1{/^$/d}' "$f"
sed -i '1i #!/usr/bin/env python3' "$f"
sed -i 's/main(sys.argv)/main(sys.argv[1:])/' "$f"
chmod +x "$f"
"$f" Ada
