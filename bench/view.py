"""claw-view's figures: how long a 200,000-turn run folder takes to index, to first paint and to answer a filtered
search in Chromium, and whether an open page slows a training run.

    python bench/view.py                      # the page figures on a synthetic folder (200,000 turns)
    python bench/view.py --train              # also: claw-train with and without claw-view + an open page, twice each

First paint: from navigation to the run's header and the score chart drawn. Filtered search: from typing into the
text filter (with version and hint filters set) to the match count updating, the page's 250 ms debounce included.
These are the README's figures; tests/test_view_scale.py checks that what the page fetches does not grow with the run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def page_figures(turns: int, repeats: int) -> dict[str, object]:
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
        "log MB": round(size),
        "write s": round(written, 1),
        "index s": round(indexed, 1),
        "first paint s (median, max)": (round(statistics.median(paints), 2), round(max(paints), 2)),
        "filtered search s (median, max)": (
            round(statistics.median(s for s, _ in searches), 2),
            round(max(s for s, _ in searches), 2),
        ),
        "matches": [m for _, m in searches],
    }


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
    args = parser.parse_args()
    for key, value in page_figures(args.turns, args.repeats).items():
        print(f"{key:32} {value}")
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


if __name__ == "__main__":
    main()
