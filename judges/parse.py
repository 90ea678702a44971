"""Read a judge model's raw text: the verdict in the last ``\\boxed{...}`` and the hint between tags.

Both readers are total: any string (empty, 100 kB, half-written) gives a value or ``None``, never an
exception, and run in time linear in the text's length.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

BOX_OPEN = "\\boxed{"
HINT_START = "[HINT_START]"
HINT_END = "[HINT_END]"
MIN_HINT_CHARS = 10
MAX_BOX_CONTENT = 64  # a verdict is a few characters; longer content is not a verdict

_WRAPPERS = re.compile(r"\\(?:text|mathrm|mathbf|textbf)\{([^{}]*)\}")
_VERDICT = re.compile(r"[+-]?[01](?:\.0*)?")


def _box_contents(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` whose braces close (nested braces allowed), else ``None``."""
    end = len(text)
    while True:
        start = text.rfind(BOX_OPEN, 0, end)
        if start < 0:
            return None
        depth = 1
        i = start + len(BOX_OPEN)
        limit = min(len(text), i + MAX_BOX_CONTENT)
        while i < limit:
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start + len(BOX_OPEN) : i]
            i += 1
        end = start  # unclosed (or absurdly long): look at the box before it


def parse_score(text: str | None) -> int | None:
    """The verdict in the last closed ``\\boxed{...}``: 1, 0 or -1; ``None`` when absent or not a verdict.

    ``\\boxed{+1}``, ``\\boxed{ -1 }``, ``\\boxed{1.0}`` and ``\\boxed{\\text{1}}`` are read as verdicts;
    ``\\boxed{2}``, ``\\boxed{yes}`` and an unclosed ``\\boxed{1`` are not.
    """
    if not text:
        return None
    content = _box_contents(text)
    if content is None:
        return None
    content = _WRAPPERS.sub(r"\1", content).replace("$", "").replace(" ", "").strip()
    if not _VERDICT.fullmatch(content):
        return None
    value = round(float(content))
    return 0 if value == 0 else value


def extract_hint(text: str | None, min_chars: int = MIN_HINT_CHARS) -> str | None:
    """The text of the last closed ``[HINT_START]...[HINT_END]`` pair, stripped, if longer than ``min_chars``."""
    if not text:
        return None
    end = text.rfind(HINT_END)
    if end < 0:
        return None
    start = text.rfind(HINT_START, 0, end)
    if start < 0:
        return None
    hint = " ".join(text[start + len(HINT_START) : end].split())
    return hint if len(hint) > min_chars else None


def majority(scores: Sequence[int | None]) -> int:
    """Majority over the valid votes; a tie for first place or no valid vote gives 0."""
    counts: dict[int, int] = {}
    for s in scores:
        if s is not None:
            counts[s] = counts.get(s, 0) + 1
    if not counts:
        return 0
    ranked = sorted(counts.values(), reverse=True)
    if len(ranked) > 1 and ranked[0] == ranked[1]:
        return 0
    return max(counts, key=counts.__getitem__)
