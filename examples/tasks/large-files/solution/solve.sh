#!/bin/bash
set -e
find /app/data -type f -size +20000c -printf '%s\t%p\n' | sort -k1,1nr | cut -f2- > /app/large_files.txt
