"""Every measured figure in the README and the manual comes from a file under ``bench/results/``, by a key.

A figure is written as a Markdown link whose text starts with the number as shown and whose target is its file:

* ``[0.792](bench/results/personalization-smollm2.json#student.combined.8.score.0)`` — a JSON file and a key path
  (dots between keys, list indices as numbers); ``#a.b*100`` or ``#a.b/c.d`` applies one operation with a number or
  another key path (a percentage, a ratio of two measured values);
* ``[0.771](bench/results/personalization-smollm2.txt#L2.6)`` — a text log: the 6th number written on line 2 (numbers
  counted left to right: ``seed 0: 489 s 0:0.182 8:0.771`` holds 0, 489, 0, 0.182, 8, 0.771); ``#L2`` alone for a
  line that holds one number;
* ``[10.3](https://…)`` — a figure from elsewhere (a paper, a model card): its source.

The shown number must equal the file's value to the decimals shown. A new figure may be written with a placeholder
for its number, ``[?.??×](bench/results/envs.json#rows.sandbox_true.ratio)``: ``--fill`` writes the file's value
there at the decimals the question marks ask for (placeholders only: a number already shown is never rewritten).

Any other number that reads as a measurement (a decimal, or a number with a unit of time, size, speed, a percentage
or a ratio) outside code is an unsourced figure. Settings are written as code (`` `--lr 2e-4` ``,
`` `disk_mb=256` ``); a worked example (numbers an example computes, checked by a test) stands between
``<!-- no figures: why -->`` and ``<!-- /no figures -->``. A link whose text holds no number is a plain link. Paths
are relative to the page.

Run: ``.venv/bin/python bench/figures.py [FILE ...]`` (default: README.md and docs/) lists every problem and exits 1
if there is one; ``--list`` prints each figure with its value; ``--fill`` fills the placeholders first.
``tests/test_figures.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]*(?:\([^()\s]*\))?[^()\s]*)\)")
NUMBER = re.compile(r"[−-]?\d[\d,]*(?:\.\d+)?")
PLACEHOLDER = re.compile(r"\?(?:\.\?+)?")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
EXEMPT = re.compile(r"<!-- no figures: [^>]*\S[^>]*-->.*?<!-- /no figures -->", re.S)
UNIT = r"(?:%|×|x(?=[\s,;:)/]|$)|\s?(?:ms|s|min|h|GB|MB|kB|KiB|MiB|GiB|tok/s|tokens/s|steps/s|episodes/s|GFLOP/s)\b)"
FIGURE = re.compile(rf"(?<![\w.\-/+#@=~])(?:\d[\d,]*\.\d+(?![.\d]){UNIT}?|\d[\d,]*{UNIT})(?![\w-])")
LINES = re.compile(r"L(\d+)(?:\.(\d+))?")
OPERATION = re.compile(r"^(?P<left>[^*/]+?)\s*(?:(?P<op>[*/])\s*(?P<right>[^*/]+))?$")
ALLOWED = ("95% interval", "95% bootstrap interval")
"""Phrases that hold a number but state a setting of the statistics, not a measurement."""


@dataclass(frozen=True)
class Figure:
    """A linked figure: where it stands, the number as shown, and its source (a file and a key, or a URL)."""

    page: Path
    line: int
    shown: str
    target: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.shown} <- {self.target}"


@dataclass(frozen=True)
class Problem:
    """A figure that does not match its source, or a number that reads as a measurement and has none."""

    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"


def pages(paths: Iterable[Path] = ()) -> list[Path]:
    """The given Markdown files, or the README and every page of the manual."""
    chosen = [Path(p).resolve() for p in paths]
    return chosen or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blank(match: re.Match[str]) -> str:
    """``match`` replaced by spaces, line breaks kept (so line numbers stay right)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """``text`` with code blocks, code spans and comments blanked: what is left is read as prose."""
    for pattern in (FENCE, EXEMPT, COMMENT, CODE):
        text = pattern.sub(_blank, text)
    return text


def scan(page: Path) -> tuple[list[Figure], list[Problem]]:
    """The figures linked on ``page`` and the unsourced measurement-like numbers in its prose."""
    text = prose(page.read_text())
    figures, problems = [], []
    for match in LINK.finditer(text):
        image, label, target = match.groups()
        line = text.count("\n", 0, match.start()) + 1
        if image or not _is_source(target):
            continue
        shown = NUMBER.search(label)
        if shown is None:
            if PLACEHOLDER.search(label):
                problems.append(Problem(page, line, f"a placeholder for {target}: run bench/figures.py --fill"))
            continue
        figures.append(Figure(page, line, shown.group(0), target))
    bare = LINK.sub(lambda m: _blank(m) if m.group(1) or _cites(m) else m.group(2), text)
    for match in FIGURE.finditer(bare):
        context = bare[max(0, match.start() - 40) : match.end() + 40]
        if any(phrase in context for phrase in ALLOWED):
            continue
        line = bare.count("\n", 0, match.start()) + 1
        problems.append(Problem(page, line, f"unsourced figure {match.group(0).strip()!r}: link it to its file"))
    return figures, problems


def _cites(link: re.Match[str]) -> bool:
    """Whether a link cites a figure: its target is a source and its text holds a number (or a placeholder)."""
    return _is_source(link.group(3)) and bool(NUMBER.search(link.group(2)) or PLACEHOLDER.search(link.group(2)))


def _is_source(target: str) -> bool:
    return target.startswith(("http://", "https://")) or "bench/results/" in target


def value_of(figure: Figure) -> float | None:
    """The value ``figure``'s source gives (``None`` for a URL, which is not read), or raise ``ValueError``."""
    if figure.target.startswith(("http://", "https://")):
        return None
    name, _, key = figure.target.partition("#")
    path = (figure.page.parent / name).resolve()
    if not path.is_relative_to(RESULTS) or not path.is_file():
        raise ValueError(f"{name}: no such file under bench/results/")
    if not key:
        raise ValueError(f"{name}: the link names no key (#path.to.value, or #L<line>.<k> for a text file)")
    if path.suffix == ".json":
        return _evaluate(_load(path), key)
    lines = LINES.fullmatch(key)
    if lines is None:
        raise ValueError(f"{name}#{key}: a text file takes #L<line>.<k> (the k-th number of the line)")
    text = path.read_text().splitlines()
    line = text[int(lines.group(1)) - 1] if 0 < int(lines.group(1)) <= len(text) else ""
    numbers = NUMBER.findall(line)
    if lines.group(2) is None and len(numbers) != 1:
        raise ValueError(f"{name}#{key}: that line holds {len(numbers)} numbers: say which, #L<line>.<k>")
    k = int(lines.group(2) or 1)
    if not 0 < k <= len(numbers):
        raise ValueError(f"{name}#{key}: that line holds {len(numbers)} numbers, not {k}")
    return _number(numbers[k - 1])


@cache
def _load(path: Path) -> object:
    return json.loads(path.read_text())


def _evaluate(data: object, expression: str) -> float:
    parts = OPERATION.match(expression.strip())
    if parts is None:
        raise ValueError(f"#{expression}: one key path, optionally * or / a number or another key path")
    value = _operand(data, parts["left"])
    if parts["op"] is None:
        return value
    right = _operand(data, parts["right"])
    return value * right if parts["op"] == "*" else value / right


def _operand(data: object, text: str) -> float:
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    node = data
    for key in text.split("."):
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.lstrip("-").isdigit() and -len(node) <= int(key) < len(node):
            node = node[int(key)]
        else:
            raise ValueError(f"#{text}: no key {key!r}")
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise ValueError(f"#{text}: {node!r} is not a number")
    return float(node)


def _number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def matches(shown: str, value: float) -> bool:
    """Whether ``value`` rounds to ``shown`` at the decimals ``shown`` has (half to even, as Python formats it; a
    value a hair from a tie, such as ``0.1 * 125``, counts as the tie)."""
    decimals = len(shown.partition(".")[2])
    nearest = round(value, decimals + 6)
    return _number(shown) == _number(f"{nearest:.{decimals}f}")


def check(paths: Iterable[Path] = ()) -> tuple[list[Figure], list[Problem]]:
    """Every figure of the pages with its check: the figures, and the problems (mismatches, unsourced numbers)."""
    all_figures, problems = [], []
    for page in pages(paths):
        figures, unsourced = scan(page)
        all_figures += figures
        problems += unsourced
        problems += [p for figure in figures if (p := _verify(figure)) is not None]
    return all_figures, problems


def _verify(figure: Figure) -> Problem | None:
    try:
        value = value_of(figure)
    except (ValueError, ZeroDivisionError) as err:
        return Problem(figure.page, figure.line, str(err))
    if value is not None and not matches(figure.shown, value):
        return Problem(figure.page, figure.line, f"shows {figure.shown}, its file says {value:g} ({figure.target})")
    return None


def fill(page: Path) -> int:
    """Write each placeholder's value from its file into ``page``; returns how many were filled."""
    text, filled = page.read_text(), 0

    def one(match: re.Match[str]) -> str:
        nonlocal filled
        image, label, target = match.groups()
        hole = PLACEHOLDER.search(label)
        if image or not _is_source(target) or hole is None or NUMBER.search(label):
            return match.group(0)
        try:
            if ".json#" not in target:
                raise ValueError("a placeholder is filled from a JSON file's key")
            value = float(value_of(Figure(page, 0, "0", target)) or 0)
        except (ValueError, ZeroDivisionError) as err:  # left as it is: the check names it
            print(f"{page.relative_to(ROOT)}: not filled, {target}: {err}")
            return match.group(0)
        decimals = len(hole.group(0).partition(".")[2])
        filled += 1
        number = f"{value:,.{decimals}f}" if abs(value) >= 10_000 else f"{value:.{decimals}f}"
        return f"[{label[: hole.start()]}{number}{label[hole.end() :]}]({target})"

    page.write_text(LINK.sub(one, text))
    return filled


def mutants(figure: Figure) -> Iterator[str]:
    """``figure``'s number with its last digit changed (each such edit must fail the check)."""
    shown = figure.shown
    i = max(i for i, c in enumerate(shown) if c.isdigit())
    yield shown[:i] + str((int(shown[i]) + 1) % 10) + shown[i + 1 :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/)")
    parser.add_argument("--list", action="store_true", help="print every figure and its source")
    parser.add_argument("--fill", action="store_true", help="write each placeholder's value from its file first")
    args = parser.parse_args(argv)
    if args.fill:
        for page in pages(args.files):
            if count := fill(page):
                print(f"{page.relative_to(ROOT)}: {count} placeholders filled")
    figures, problems = check(args.files)
    if args.list:
        print("\n".join(map(str, figures)))
    print("\n".join(map(str, problems)) or f"{len(figures)} figures, each matches its file")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
