"""An update's memory is bounded by its micro-batch token budget, however many rows as long as the context it has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("memory_step.py")


def added_mb(rows: int) -> float:
    """The resident memory an update on ``rows`` context-long rows added at its peak, in a fresh process."""
    done = subprocess.run([sys.executable, str(SCRIPT), str(rows)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def test_sixteen_context_long_rows_peak_like_two_within_a_one_row_budget():
    two, sixteen = added_mb(2), added_mb(16)
    # one row's logits alone (1024 x 8000 fp32, with their log-softmax and gradients) are over 100 MB: sixteen rows
    # at once would add many times that; split into one-row micro-batches they add what two rows do
    assert two > 60, two
    assert sixteen < 1.5 * two, (two, sixteen)
