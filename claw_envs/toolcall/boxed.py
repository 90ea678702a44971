"""Find a final answer in model text: the last complete ``\\boxed{...}``."""

from __future__ import annotations

import re

_FINAL_LINE = re.compile(
    r"(?:final answer|the answer is|answer)\s*(?:is|:|=)?\s*\$?(-?[\d,]*\.?\d+(?:/\d+)?)\s*\$?\.?\s*$", re.I | re.M
)
_PYTHON_FENCE = re.compile(r"```[ \t]*(?:python|py)[ \t]*\n(.*?)```", re.S | re.I)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.S)


def last_boxed(text: str) -> str | None:
    """Content of the last complete top-level ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Nested braces are matched (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``); escaped braces ``\\{``
    ``\\}`` do not count; a box inside a box belongs to the outer one; an unclosed box is skipped.
    """
    found = None
    pos = 0
    closing: dict[int, int] | None = None
    while (m := _BOXED.search(text, pos)) is not None:
        if closing is None:
            closing = _brace_pairs(text)  # once, only when there is a box: linear however many boxes there are
        end = closing.get(m.end() - 1)
        if end is None:
            pos = m.end()
            continue
        found = text[m.end() : end].strip()
        pos = end + 1
    return found


def _brace_pairs(text: str) -> dict[int, int]:
    """Position of each ``{`` → its matching ``}`` (escaped ``\\{``/``\\}`` skipped; unmatched ones left out).

    One pass with a stack: the same pairing a forward scan from each brace would find, in linear time.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(m.start())
        elif tok == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def final_answer_line(text: str) -> str | None:
    """The number of the last plain final-answer line ("Final answer: 42", "The answer is 42."), for replies that
    give no ``\\boxed{}``."""
    found = _FINAL_LINE.findall(text[-4000:])
    return found[-1].replace(",", "") if found else None


def fenced_python(text: str) -> str | None:
    """The body of the first closed ```python block of ``text`` (read as a call of the python tool)."""
    m = _PYTHON_FENCE.search(text)
    return m.group(1) if m and m.group(1).strip() else None
