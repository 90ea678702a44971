"""`make demo`'s configuration gives the Binary term something to learn from: the judge says +1 to some replies.

A structural guard, not a timing: when the bootstrapped tiny model could not do the homework, every reply drew a
complaint or a re-ask and the batch mean judge score sat at -1.0 for the whole demo.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def demo_command() -> list[str]:
    """The claw-train command of the Makefile's ``demo`` target, as its words."""
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "the Makefile has no demo target"
    words = recipe.group(1).replace("\\\n", " ").split()
    words = words[words.index("$(VENV)/bin/claw-train") + 1 :]
    return words[: words.index("--output-dir")]  # the rest is the shell's timestamped folder


def with_option(words: list[str], name: str, value: str) -> list[str]:
    """``words`` with ``name``'s value replaced (the option must be there)."""
    at = words.index(name)
    return [*words[: at + 1], value, *words[at + 2 :]]


@pytest.mark.timeout(900)
def test_the_demo_configuration_gets_positive_judge_scores(tmp_path):
    words = demo_command()
    assert words[:8] == ["--env", "conversation", "--persona", "student", "--method", "combined", "--model", "tiny"]
    words = with_option(with_option(words, "--updates", "12"), "--eval-every", "0")
    argv = [str(BIN / "claw-train"), *words, "--output-dir", str(tmp_path / "run"), "--report-to", "none"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates"] == 12
    turns = [
        json.loads(line)
        for path in sorted((tmp_path / "run" / "logs").glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if '"kind": "turn"' in line
    ]
    scores = [t["judgement"]["score"] for t in turns if t.get("judgement")]
    assert len(scores) >= 150  # ~190 judged replies in 12 updates of 16 samples
    assert summary["judge_positive_rate"] > 0, f"the judge gave +1 to none of {summary['turns_judged']} replies"
    thanked = [t for t in turns if t.get("judgement", {}).get("score") == 1.0]
    assert thanked and all(t["next_state"]["evaluative"] == 1.0 for t in thanked)  # +1: the user thanked
