#!/bin/bash
# Verifier: run the agent's /app/backup.sh on fresh directories whose names hold spaces.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
work=/tmp/backup-check  # a fixed path: the verifier's workspace is fresh, and its output the same each run
rm -rf "$work" && mkdir -p "$work"
src="$work/my notes"
mkdir -p "$src/sub dir"
printf 'one\n' > "$src/a file.txt"
printf 'two\n' > "$src/b.txt"
printf 'three\n' > "$src/  spaced  .txt"
printf 'skip\n' > "$src/c.md"
printf 'skip\n' > "$src/sub dir/d.txt"
out=$(cd "$work" && timeout 20 bash /app/backup.sh "$src" "$work/the backup" 2>&1)
echo "output: $out"
[ "$out" = "copied 3 files" ] || { echo "wrong output"; exit 0; }
for f in "a file.txt" "b.txt" "  spaced  .txt"; do
    cmp -s "$src/$f" "$work/the backup/$f" || { echo "missing or different: $f"; exit 0; }
done
n=$(find "$work/the backup" -type f | wc -l)
[ "$n" = 3 ] || { echo "expected 3 files in the backup, found $n"; exit 0; }
echo 1 > /logs/verifier/reward.txt
