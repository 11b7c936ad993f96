#!/bin/bash
# Verifier: /app/large_files.txt lists exactly the four large regular files, largest first.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
expected='/app/data/docs/annual report.pdf
/app/data/photos/2023/beach.raw
/app/data/cache/.blob
/app/data/photos/2024/city.raw'
[ -f /app/large_files.txt ] || { echo "no /app/large_files.txt"; exit 0; }
got=$(sed -e 's/[[:space:]]*$//' -e '/^$/d' /app/large_files.txt)
if [ "$got" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else echo "got: $got"; fi
