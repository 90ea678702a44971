"""claw-view on a synthetic run folder of 200,000 turns (built once): what the page fetches for its first paint and
for a filtered search does not grow with the run (the same as on 2,000 turns: charts of the curves, one page of
rows), the filtered count is the one the files give, and paging reaches the end of the filtered list. How long
these take is measured by bench/view.py (the README's figures), not asserted here: these machines are noisy."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

sync_api = pytest.importorskip("playwright.sync_api")

from claw_envs.gui.browser import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from claw_train.view.runs import RunIndex  # noqa: E402
from claw_train.view.server import ViewServer, listen  # noqa: E402
from claw_train.view.synthetic import write_synthetic_run  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs the system Chromium"),
]
TURNS = 200_000
FEW = 2_000
PAINTED = "() => window.clawView && window.clawView.charts.score && document.querySelector('.run')"
SLACK = 2.0  # a run 100x larger fetches under twice as much (its counts have more digits: 4,793 bytes against 4,465)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``{turns: (url, index)}`` for a run of ``TURNS`` and one of ``FEW`` (the same 20 versions)."""
    out, servers = {}, []
    for turns in (TURNS, FEW):
        folder = write_synthetic_run(tmp_path_factory.mktemp("runs") / f"run-{turns}", turns=turns)
        index = RunIndex(folder)
        server = ViewServer([index], listen("127.0.0.1", 0), every=0.25)
        servers.append(server)
        out[turns] = (server.start(), index)
        deadline = time.monotonic() + 120
        while index.turns.n < turns:
            assert time.monotonic() < deadline, f"indexed only {index.turns.n} turns in 120 s"
            time.sleep(0.1)
    yield out
    for server in servers:
        server.stop()


def matching(index: RunIndex, q: str = "") -> str:
    """The match count the page must show for versions 3-12, hinted, with ``q`` in the text (from the files)."""
    t = index.turns
    n = sum(3 <= t.version.values[i] <= 12 and t.hint.values[i] and q in t.search[i] for i in range(t.n))
    return f"{n} turn(s)"


def visit(pw: Any, url: str, index: RunIndex, check: Any = None) -> tuple[int, int]:
    """Open the page, then search the Turns tab (versions 3-12, hinted, "bold"); the bytes fetched by each, from the
    run's server (the static files are the same for any run). Each step waits for the count the files give, not for
    a time: a loaded machine once answered the version and hint filters after the search had begun. ``check(page)``
    runs on the searched page."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    seen: list[Any] = []
    page.on("response", lambda response: seen.append(response))

    def fetched(responses: list[Any]) -> int:
        return sum(len(r.body()) for r in responses if "/api/" in r.url)

    page.goto(url)
    page.wait_for_function(PAINTED)
    sync_api.expect(page.locator(".run .counts")).to_contain_text(f"turns {index.turns.n}")
    painted = fetched(seen)
    page.get_by_role("tab", name="Turns").click()
    page.locator(".tabulator-row").first.wait_for()
    page.locator("#filters [name=version]").fill("3-12")
    page.locator("#filters [name=hint]").select_option("yes")
    count = page.locator("#match-count")
    sync_api.expect(count).to_have_text(matching(index), timeout=60_000)
    page.wait_for_load_state("networkidle")
    start = len(seen)
    page.locator("#filters [name=q]").fill("bold")
    sync_api.expect(count).to_have_text(matching(index, "bold"), timeout=60_000)
    page.wait_for_load_state("networkidle")
    searched = fetched(seen[start:])
    if check is not None:
        check(page)
    browser.close()
    return painted, searched


def test_first_paint_and_a_filtered_search_fetch_what_a_small_run_does_on_200000_turns(served):
    url, index = served[TURNS]

    def check(page: Any) -> None:
        expected = int(matching(index, "bold").split()[0])
        assert page.evaluate("() => window.clawView.table.getData().length") == 50  # one page (rows drawn as seen)
        assert "Don't use any bold text." in page.locator(".tabulator-row").first.inner_text()
        page.locator(".tabulator-page[data-page=last]").click()  # the last page of the filtered list, from the server
        sync_api.expect(page.locator(".tabulator-page.active")).to_have_text(str(-(-expected // 50)))

    with sync_api.sync_playwright() as pw:
        big = visit(pw, url, index, check)
        small = visit(pw, *served[FEW])
    assert big[0] <= small[0] * SLACK, f"first paint fetched {big[0]} bytes on {TURNS} turns, {small[0]} on {FEW}"
    assert big[1] <= small[1] * SLACK, f"the search fetched {big[1]} bytes on {TURNS} turns, {small[1]} on {FEW}"
