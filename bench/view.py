"""claw-view's figures: how long a 200,000-turn run folder takes to index, to first paint and to answer a filtered
search in Chromium, and whether an open page slows a training run.

    python bench/view.py                      # the page figures on a synthetic folder (200,000 turns)
    python bench/view.py --train              # also: claw-train with and without claw-view + an open page, twice each

First paint: from navigation to the run's header and the score chart drawn. Filtered search: from typing into the
text filter (with version and hint filters set) to the match count updating, the page's 250 ms debounce included.
These are the README's figures; tests/test_view_scale.py checks that what the page fetches does not grow with the run.

Writes bench/results/view.json (--results DIR, --name NAME to write elsewhere): turns, repeats, log_mb, write_s,
index_s, first_paint_s and search_s (each median and max), matches (the search's counts), and with --train: train
(updates, without_page_s and with_page_s: the runs' seconds, ratio: with / without, medians).

Takes a few minutes at the defaults (writing the folder and indexing it most of it), --train about 5 more;
--turns 2000 --repeats 1 for a smoke run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claw_envs.gui.browser import CHROMIUM, CHROMIUM_FLAGS
from claw_train.view.synthetic import write_synthetic_run

BIN = Path(sys.executable).parent


def start_view(folder: Path) -> tuple[subprocess.Popen, str]:
    """``claw-view FOLDER --port 0`` and its URL."""
    proc = subprocess.Popen(
        [str(BIN / "claw-view"), str(folder), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    if not line.startswith("claw-view: http"):
        raise SystemExit(f"claw-view did not start: {line}{proc.stderr.read()}")
    return proc, line.split()[1]


def first_paint(page, url: str) -> float:
    """Seconds from navigation to the header and the score chart drawn."""
    page.goto(url)
    page.wait_for_function("() => window.clawView && window.clawView.charts.score && document.querySelector('.run')")
    return page.evaluate("() => performance.now()") / 1000


def filtered_search(page, url: str, text: str) -> tuple[float, str]:
    """Seconds from typing ``text`` into the search box (version and hint filters set) to the count updating."""
    page.goto(url)
    page.get_by_role("tab", name="Turns").click()
    page.locator(".tabulator-row").first.wait_for()
    page.locator("#filters [name=version]").fill("3-12")
    page.locator("#filters [name=hint]").select_option("yes")
    page.wait_for_function("() => document.querySelector('#match-count').textContent.length > 0")
    page.wait_for_timeout(600)
    before = page.locator("#match-count").inner_text()
    start = time.perf_counter()
    page.locator("#filters [name=q]").fill(text)
    page.wait_for_function("(before) => document.querySelector('#match-count').textContent !== before", arg=before)
    return time.perf_counter() - start, page.locator("#match-count").inner_text()


def page_figures(turns: int, repeats: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        folder = write_synthetic_run(Path(tmp) / "run", turns=turns)
        written = time.perf_counter() - started
        size = sum(p.stat().st_size for p in folder.rglob("*.jsonl")) / 1e6
        started = time.perf_counter()
        proc, url = start_view(folder)
        try:
            import httpx

            while httpx.get(url + "api/runs", timeout=30).json()[0]["counts"]["turns"] < turns:
                time.sleep(0.1)
            indexed = time.perf_counter() - started
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                paints = [first_paint(page, url) for _ in range(repeats)]
                searches = [filtered_search(page, url, word) for word in ("bold", "answer", "7 left")[:repeats]]
                browser.close()
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "turns": turns,
        "repeats": repeats,
        "log_mb": size,
        "write_s": written,
        "index_s": indexed,
        "first_paint_s": {"median": statistics.median(paints), "max": max(paints)},
        "search_s": {"median": statistics.median(s for s, _ in searches), "max": max(s for s, _ in searches)},
        "matches": [m for _, m in searches],
    }


def print_page_figures(values: dict[str, Any]) -> None:
    """The page figures as a table (rounded)."""
    paint, search = values["first_paint_s"], values["search_s"]
    for key, value in (
        ("turns", values["turns"]),
        ("log MB", round(values["log_mb"])),
        ("write s", round(values["write_s"], 1)),
        ("index s", round(values["index_s"], 1)),
        ("first paint s (median, max)", (round(paint["median"], 2), round(paint["max"], 2))),
        ("filtered search s (median, max)", (round(search["median"], 2), round(search["max"], 2))),
        ("matches", values["matches"]),
    ):
        print(f"{key:32} {value}")


def train_once(out: Path, with_view: bool, updates: int) -> float:
    """Wall seconds of a short claw-train run (tiny conversation model), with claw-view and an open page or not."""
    command = [str(BIN / "claw-train"), "--env", "conversation", "--model", "tiny", "--updates", str(updates)]
    command += ["--samples-per-step", "8", "--eval-every", "0", "--no-display", "--output-dir", str(out)]
    started = time.perf_counter()
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    viewer = None
    if with_view:
        from playwright.sync_api import sync_playwright

        while not (out / "run.json").exists() and run.poll() is None:
            time.sleep(0.1)
        viewer, url = start_view(out)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True)
            page = browser.new_page()
            page.goto(url)
            page.get_by_role("tab", name="Turns").click()
            while run.poll() is None:  # the page polls every 2 s and reloads its table page as turns arrive
                page.wait_for_timeout(500)
            browser.close()
    run.wait()
    seconds = time.perf_counter() - started
    if viewer is not None:
        viewer.terminate()
        viewer.wait(30)
    if run.returncode != 0:
        raise SystemExit(f"claw-train failed ({run.returncode}) in {out}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train", action="store_true", help="also time claw-train with and without the page open")
    parser.add_argument("--updates", type=int, default=8)
    record.options(parser, "view")
    args = parser.parse_args()
    values = page_figures(args.turns, args.repeats)
    print_page_figures(values)
    if args.train:
        with tempfile.TemporaryDirectory() as tmp:
            times: dict[bool, list[float]] = {False: [], True: []}
            for attempt in range(2):
                for with_view in (False, True):
                    out = Path(tmp) / f"run-{attempt}-{int(with_view)}"
                    times[with_view].append(train_once(out, with_view, args.updates))
            plain, viewed = statistics.median(times[False]), statistics.median(times[True])
            print(f"{'claw-train, no page s':32} {[round(t, 1) for t in times[False]]}")
            print(f"{'claw-train, page open s':32} {[round(t, 1) for t in times[True]]}")
            print(f"{'with page / without (median)':32} {viewed / plain:.3f}")
            train = {"without_page_s": times[False], "with_page_s": times[True], "ratio": viewed / plain}
            values["train"] = {"updates": args.updates, **train}
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
