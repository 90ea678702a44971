"""The tutorials under docs/ run as written: every fenced ``python`` or ``bash`` block right after a
``<!-- run -->`` line is executed, in page order, in a fresh folder per page.

Python blocks of one page share a namespace (like a notebook) and may ``await`` at top level; bash blocks run
with ``set -euo pipefail``, the venv's commands first on ``PATH`` and the hub offline. A block that raises or
exits non-zero fails its page's test. Blocks without the marker (a GPU, the model hub, a long run) are shown,
not run; each page says so beside them.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKER = "<!-- run -->"
BLOCK = re.compile(r"^(?P<marker><!-- run -->\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: its language, its code and the line it starts on."""

    lang: str
    code: str
    line: int
    run: bool


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown page, marked to run or not."""
    return [
        Block(m["lang"], m["code"], text.count("\n", 0, m.start("code")) + 1, bool(m["marker"]))
        for m in BLOCK.finditer(text)
    ]


def run_page(path: Path, workdir: Path, timeout: float = 240) -> None:
    """Execute the marked blocks of ``path`` in ``workdir``; raise with the page and line of the first failure."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "NO_COLOR": "1",
    }
    namespace: dict = {"__name__": "__tutorial__"}
    cwd, saved = os.getcwd(), dict(os.environ)
    os.chdir(workdir)
    os.environ.update(env)  # python blocks see what bash blocks see (they may start the CLIs too)
    try:
        for block in blocks(path.read_text()):
            if not block.run:
                continue
            where = f"{path.relative_to(DOCS) if path.is_relative_to(DOCS) else path.name}:{block.line}"
            if block.lang == "python":
                try:
                    code = compile(block.code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                    result = eval(code, namespace)  # a block with top-level await compiles to a coroutine
                    if asyncio.iscoroutine(result):
                        asyncio.run(result)
                except Exception as e:
                    raise AssertionError(f"{where}: {type(e).__name__}: {e}") from e
            elif block.lang == "bash":
                proc = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", block.code],
                    cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout,
                )  # fmt: skip
                if proc.returncode != 0:
                    output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                    raise AssertionError(f"{where}: exit {proc.returncode}\n{output}")
            else:
                raise AssertionError(f"{where}: {block.lang!r} blocks cannot be marked to run (python or bash)")
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


PAGES = sorted(p for p in DOCS.rglob("*.md") if MARKER in p.read_text())


def test_the_tutorials_have_runnable_blocks():
    names = {_name(p) for p in PAGES}
    families = {f"envs/{f}" for f in ("conversation", "toolcall", "terminal", "swe", "gui")}
    assert {"quickstart", "envs/index", "learning", "reading-a-run", "evaluating", "serving", "gpu"} | families <= names


def _name(page: Path) -> str:
    """A page's path under docs/, without ``.md``."""
    return page.relative_to(DOCS).with_suffix("").as_posix()


def _param(page: Path) -> object:
    """A page as a test case; one that bootstraps a model is ``slow`` (the quick loop skips it)."""
    marks = [pytest.mark.slow] if "bootstrap(" in page.read_text() else []
    return pytest.param(page, id=_name(page), marks=marks)


@pytest.mark.parametrize("page", [_param(p) for p in PAGES])
def test_tutorial_runs_as_written(page, tmp_path):
    run_page(page, tmp_path)


def test_a_block_that_no_longer_runs_fails_with_its_page_and_line(tmp_path):
    page = tmp_path / "broken.md"
    page.write_text(
        "# A page\n\n<!-- run -->\n```python\nvalue = 1\n```\n\nshown only:\n\n```python\nraise SystemExit\n```\n\n"
        "<!-- run -->\n```bash\necho fine\n```\n\n<!-- run -->\n```python\nassert value == 2, 'the page changed'\n```\n"
    )
    with pytest.raises(AssertionError, match=r"broken\.md:21: AssertionError: the page changed"):
        run_page(page, tmp_path)
    page.write_text("<!-- run -->\n```bash\nclaw-envs no-such-command\n```\n")
    with pytest.raises(AssertionError, match=r"broken\.md:3: exit [12]"):
        run_page(page, tmp_path)
    page.write_text("<!-- run -->\n```text\nnot code\n```\n")
    with pytest.raises(AssertionError, match="'text' blocks cannot be marked to run"):
        run_page(page, tmp_path)


def test_the_worked_step_index_example_is_what_the_code_computes():
    from claw_train.advantages import StepReward, step_index_normalise

    text = (DOCS / "learning.md").read_text().replace("−", "-")
    table = text.split("<!-- worked-example -->")[1].split("<!-- /worked-example -->")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    assert len(rows) >= 8
    steps = [StepReward(g, int(k), outcome=float(o), prm=float(p)) for g, _, k, o, p, _, _ in rows]
    advantages = step_index_normalise(steps, c=1.0)
    for row, step, adv in zip(rows, steps, advantages, strict=True):
        assert float(row[5]) == step.outcome + step.prm, row
        assert row[6] == ("none" if adv is None else f"{adv:.3f}"), (row, adv)
