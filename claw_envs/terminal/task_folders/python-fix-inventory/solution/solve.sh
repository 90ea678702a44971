#!/bin/bash
set -e
cd /app
python3 - <<'EOF'
import re
path = "inventory/core.py"
text = open(path).read()
text = text.replace("sum(item.price for item in items)", "sum(item.price * item.quantity for item in items)")
text = text.replace("        if item.name == name:\n            item.quantity = amount",
                    "        if item.name == name:\n            if amount < 0:\n                raise ValueError(amount)\n            item.quantity += amount")
open(path, "w").write(text)
EOF
python3 -m pytest -q -p no:cacheprovider tests
