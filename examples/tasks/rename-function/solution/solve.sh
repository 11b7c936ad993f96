#!/bin/bash
set -e
cd /app
grep -rlw calc_total shop --include='*.py' | xargs sed -i 's/\bcalc_total\b/compute_total/g'
python3 -m shop.main
