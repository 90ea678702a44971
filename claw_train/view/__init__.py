"""``claw-view``: a local web page over claw-train / claw-serve run folders, live while they run.

* :mod:`~claw_train.view.tail` — reading JSONL files a run is still appending to (complete lines only, no lock)
* :mod:`~claw_train.view.table` — the turn index: small columns per turn, filtered with numpy
* :mod:`~claw_train.view.runs` — one run folder, refreshed incrementally
* :mod:`~claw_train.view.detail` — one turn in full (its prompt put together) and the before/after check
* :mod:`~claw_train.view.app` — the page and its JSON API (FastAPI); :mod:`~claw_train.view.server` runs it
* :mod:`~claw_train.view.launch` — claw-view in its own process beside a run (``--view``)
* :mod:`~claw_train.view.synthetic` — a synthetic run folder of any size (the bench, the tests)

The page draws its curves with uPlot and its turn list with Tabulator, both vendored under ``static/vendor/`` with
their licences (no network needed).
"""
