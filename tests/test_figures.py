"""Every figure of the README and the manual comes from its file under bench/results/ (issue 41): the check finds
no problem on the pages as they are, and fails on a changed number, an unsourced one, or a key that is not there."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


figures = _load("bench_figures", ROOT / "bench" / "figures.py")
results_hook = _load("docs_results_hook", ROOT / "docs" / "hooks" / "results.py")


@pytest.fixture(scope="module")
def checked() -> tuple[list, list]:
    return figures.check()


def test_every_figure_of_the_readme_and_the_manual_matches_its_file(checked):
    found, problems = checked
    assert not problems, "\n".join(map(str, problems))
    assert len(found) >= 30, "the pages cite fewer figures than they did: has the check stopped finding them?"
    assert any(f.page.name == "README.md" for f in found)


def test_a_changed_number_fails_the_check(checked):
    """Mutation: each figure read from a file, its last digit changed, no longer matches."""
    found, _ = checked
    read = [(f, figures.value_of(f)) for f in found if not f.target.startswith("http")]
    assert read
    assert any("#L" in f.target for f, _ in read) and any(".json#" in f.target for f, _ in read)
    for figure, value in read:
        for mutant in figures.mutants(figure):
            assert not figures.matches(mutant, value), f"{figure}: {mutant} still matches {value}"


def _page(tmp_path: Path, text: str) -> Path:
    """A page in a folder beside bench/results/'s real files: tmp/docs/page.md, with tmp/bench/results linked."""
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(text)
    return page


def test_the_check_reads_json_keys_operations_and_text_lines(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "r.json").write_text(json.dumps({"a": {"b": [0.25, 4]}, "c": 2.0}))
    (results / "r.txt").write_text("head 7\n  opd seed 0:  489 s  0:0.182  8:0.771\n")
    monkeypatch.setattr(figures, "RESULTS", results)
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    good = _page(
        tmp_path,
        "Score [0.25](../bench/results/r.json#a.b.0), [25%](../bench/results/r.json#a.b.0*100), "
        "[2.0×](../bench/results/r.json#a.b.1/c), [0.771](../bench/results/r.txt#L2.6), "
        "[head](../bench/results/r.txt), "
        "[10.3](https://example.org/paper), `--lr 2e-4` in code, 95% intervals, 16 updates, "
        "[the file](../bench/results/r.json), [uPlot](https://uplot.example).\n"
        "<!-- no figures: a worked example, computed by a test -->\n| 1.414 | 0.000 |\n<!-- /no figures -->\n"
        "```\n12.5 s in a code block\n```\n",
    )
    found, problems = figures.check([good])
    assert not problems, problems
    assert [f.shown for f in found] == ["0.25", "25", "2.0", "0.771", "10.3"]
    bad = good.with_name("bad.md")
    bad.write_text(
        "[0.26](../bench/results/r.json#a.b.0) [0.25](../bench/results/r.json#a.x) "
        "[0.771](../bench/results/r.txt#L2.4) [0.771](../bench/results/r.txt#L2) [7](../bench/results/r.txt#L1) "
        "[1.0](../bench/results/none.json#a) "
        "[0.25](../bench/results/r.json) took 12.5 s, 3.4× faster, 97% of it\n"
    )
    _, problems = figures.check([bad])
    said = "\n".join(map(str, problems))
    for expected in (
        "shows 0.26, its file says 0.25",
        "no key 'x'",
        "shows 0.771, its file says 0.182",
        "that line holds 6 numbers: say which",
        "none.json: no such file",
        "names no key",
        "unsourced figure '12.5 s'",
        "unsourced figure '3.4×'",
        "unsourced figure '97%'",
    ):
        assert expected in said, said


def test_fill_writes_a_placeholder_from_its_file_and_leaves_shown_numbers_alone(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "r.json").write_text(json.dumps({"ratio": 0.9371, "big": 12345.6}))
    monkeypatch.setattr(figures, "RESULTS", results)
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    page = _page(
        tmp_path,
        "[?.??×](../bench/results/r.json#ratio) and [?](../bench/results/r.json#big) "
        "and [0.5×](../bench/results/r.json#ratio)\n",
    )
    _, problems = figures.check([page])
    assert sum("placeholder" in str(p) for p in problems) == 2
    assert figures.fill(page) == 2
    assert page.read_text().startswith("[0.94×](../bench/results/r.json#ratio) and [12,346](")
    _, problems = figures.check([page])
    assert [str(p).split(": ", 1)[1] for p in problems] == [
        "shows 0.5, its file says 0.9371 (../bench/results/r.json#ratio)"
    ]


def test_every_results_file_says_how_it_was_made():
    """A JSON result carries its provenance: the command, date, commit and load of the run that wrote it."""
    missing = []
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        meta = json.loads(path.read_text()).get("meta", {})
        lacking = [k for k in ("command", "date", "commit", "load") if k not in meta]
        if lacking:
            missing.append(f"{path.name}: no {', '.join(lacking)}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    ("link", "page", "expected"),
    [
        ("../bench/results/x.json", "learning.md", "bench-results/x.json"),
        ("../../bench/results/x.json", "envs/terminal.md", "../bench-results/x.json"),
        ("../bench/results/sub/y.txt", "index.md", "bench-results/sub/y.txt"),
    ],
)
def test_the_site_links_each_figure_to_its_copied_file(link, page, expected):
    assert results_hook.site_link(link, page) == expected
