#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import csv, json
totals = {}
with open("data/sales.csv", newline="") as fh:
    for row in csv.DictReader(fh):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["units"]) * float(row["unit_price"])
json.dump({k: round(v, 2) for k, v in sorted(totals.items())}, open("revenue.json", "w"), indent=2)
EOF
