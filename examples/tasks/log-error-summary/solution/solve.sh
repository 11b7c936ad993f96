#!/bin/bash
# The level is the second field; the component is the third, without its colon.
set -e
cd /app
awk '$2 == "ERROR" { sub(/:$/, "", $3); n[$3]++ } END { for (c in n) print n[c], c }' logs/*.log \
  | sort -k1,1nr -k2,2 > error_summary.txt
