#!/bin/bash
set -e
cd /app/repo
git checkout -q -b fix-spelling main
git grep -l recieve | xargs sed -i 's/recieve/receive/g'
git commit -q -am "Fix spelling of receive"
