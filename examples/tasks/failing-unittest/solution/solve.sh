#!/bin/bash
# total_value skipped the first item: loop over every item.
set -e
sed -i 's/for i in range(1, len(items)):/for i in range(len(items)):/' /app/inventory/stock.py
cd /app && python3 -m unittest -q
