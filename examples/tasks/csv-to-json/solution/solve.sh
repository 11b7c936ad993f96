#!/bin/bash
set -e
python3 - <<'PY'
import csv, json
with open("/app/data/employees.csv", newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
employees = []
for r in rows:
    salary = float(r["salary"])
    employees.append({"id": int(r["id"]), "name": r["name"], "department": r["department"],
                      "salary": int(salary) if salary.is_integer() else salary, "start_date": r["start_date"]})
totals = {}
for e in employees:
    totals[e["department"]] = totals.get(e["department"], 0) + e["salary"]
for path, data in (("/app/data/employees.json", employees), ("/app/data/salary_by_department.json", totals)):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=2)
PY
