#!/bin/bash
set -e
cd /app/downloads
for f in * .[!.]*; do
    [ -f "$f" ] || continue
    base="${f#.}"
    if [[ "$base" == *.* ]]; then ext="${base##*.}"; ext="${ext,,}"; else ext=other; fi
    mkdir -p "$ext"
    mv -- "$f" "$ext/"
done
