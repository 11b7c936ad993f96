#!/bin/bash
set -e
python3 - <<'PY'
import json
from decimal import Decimal
orders, revenue = {}, {}
for line in open("/app/orders.jsonl"):
    o = json.loads(line)
    if o["status"] != "paid":
        continue
    orders[o["customer"]] = orders.get(o["customer"], 0) + 1
    total = sum(Decimal(str(i["qty"])) * Decimal(str(i["price"])) for i in o["items"])
    revenue[o["customer"]] = revenue.get(o["customer"], Decimal(0)) + total
rows = sorted(revenue, key=lambda c: (-revenue[c], c))
with open("/app/revenue.csv", "w") as f:
    f.write("customer,orders,revenue\n")
    for c in rows:
        f.write(f"{c},{orders[c]},{revenue[c]:.2f}\n")
PY
