#!/bin/bash
cat > /app/backup.sh <<'SCRIPT'
#!/bin/bash
# Usage: backup.sh SRC DEST
# Copies every .txt file directly in SRC into DEST (made if missing) and prints how many it copied.
SRC=$1
DEST=$2
mkdir -p -- "$DEST"
count=0
for f in "$SRC"/*.txt; do
    [ -f "$f" ] || continue
    cp -- "$f" "$DEST/"
    count=$((count + 1))
done
echo "copied $count files"
SCRIPT
chmod +x /app/backup.sh
