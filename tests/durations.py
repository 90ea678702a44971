"""Refresh ``tests/durations.json`` from a pytest durations report (the order ``make test`` starts its longest
tests in): ``.venv/bin/python -m pytest -n 3 --durations=0 | .venv/bin/python tests/durations.py``."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

FLOOR_S = 5.0  # shorter tests keep their place


def main() -> None:
    seconds: Counter[str] = Counter()
    for line in sys.stdin:
        if m := re.match(r"\s*([\d.]+)s (?:setup|call|teardown)\s+(\S+)", line):
            seconds[m.group(2)] += float(m.group(1))
    kept = {test: round(s, 1) for test, s in sorted(seconds.items(), key=lambda kv: -kv[1]) if s >= FLOOR_S}
    if not kept:
        sys.exit("no durations of 5 s or more in the input: pipe in pytest's --durations=0 report")
    path = Path(__file__).with_name("durations.json")
    path.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{path}: {len(kept)} tests")


if __name__ == "__main__":
    main()
