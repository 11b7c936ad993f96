#!/bin/bash
# Usage: backup.sh SRC DEST
# Copies every .txt file directly in SRC into DEST (made if missing) and prints how many it copied.
SRC=$1
DEST=$2
mkdir -p $DEST
count=0
for f in $(ls $SRC/*.txt); do
    cp $f $DEST/
    count=$((count + 1))
done
echo "copied $count files"
