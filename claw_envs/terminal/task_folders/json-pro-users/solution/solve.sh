#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import json
users = [u for u in json.load(open("users.json")) if u["active"] and (u["plan"] or {}).get("name") == "pro"]
open("pro_emails.txt", "w").write("".join(e + "\n" for e in sorted(u["email"].lower() for u in users)))
open("pro_seats.txt", "w").write(f"{sum(u['plan']['seats'] for u in users)}\n")
EOF
