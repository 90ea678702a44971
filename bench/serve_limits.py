"""claw-serve's body limit in time: how long a 50 MB body waits for its 413, and how long ``/healthz`` takes while a
slow upload goes on, each ÷ the same probe's time on an idle server (prints ratios; not a test).

tests/security/test_serve_security.py checks what these figures stand for without timing anything: the upload is
cut off (never read whole), and ``/healthz`` is asked and answered while a slow upload is under way. This script
measures the README's figures with the test's own helpers, against the tiny model's server in this process.

Writes ``bench/results/serve-limits.json`` (``--results DIR``, ``--name NAME`` to write elsewhere): ``repeats``,
``idle`` (``/healthz`` on an idle server: ``p50_ms``, ``worst_ms``, ``n``), ``upload_50mb.<content_length|chunked>``
(``median_ms`` to the 413, ``ratio`` to the idle p50, ``n``) and ``slow_upload`` (``answered_s``: its 413 after;
``/healthz`` meanwhile: ``p50_ms``, ``ratio`` to the idle p50, ``worst_ms``, ``n``).

Run: ``.venv/bin/python bench/serve_limits.py [--repeats N]`` (under a minute at the default 5; ``--repeats 1`` for
a smoke run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import record

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from claw_train.models.tiny import bootstrap  # noqa: E402
from tests.security.test_serve_security import HealthProbe, big_body, make_server, raw_post, too_large  # noqa: E402


def probe_seconds(port: int, seconds: float) -> list[float]:
    """``/healthz`` round trips over ``seconds`` of polling."""
    probe = HealthProbe(port)
    time.sleep(seconds)
    return [ended - began for began, ended in probe.done()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="50 MB uploads of each kind")
    record.options(parser, "serve-limits")
    args = parser.parse_args()
    values: dict[str, object] = {"repeats": args.repeats}
    server = make_server(str(bootstrap("conversation", steps=2)), Path(tempfile.mkdtemp()) / "run")
    try:
        time.sleep(2.0)  # the trainer thread builds its model at start
        idle = probe_seconds(server.port, 2.0)
        p50, worst = statistics.median(idle), max(idle)
        print(f"/healthz idle: p50 {p50 * 1000:.2f} ms, worst {worst * 1000:.2f} ms of {len(idle)}")
        values["idle"] = {"p50_ms": p50 * 1000, "worst_ms": worst * 1000, "n": len(idle)}
        values["upload_50mb"] = uploads = {}
        body = big_body(50_000_000)
        for chunked in (False, True):
            times = []
            for _ in range(args.repeats):
                upload = raw_post(server.port, body, chunked=chunked)
                too_large(upload.reply)
                times.append(upload.answered - upload.started)
            how, median = "chunked" if chunked else "Content-Length", statistics.median(times)
            said = f"413 after {median * 1000:.1f} ms (median of {len(times)}), {median / p50:.1f}x idle /healthz"
            print(f"50 MB ({how}): {said}")
            key = "chunked" if chunked else "content_length"
            uploads[key] = {"median_ms": median * 1000, "ratio": median / p50, "n": len(times)}
        slow = big_body(16_000_000)
        probe = HealthProbe(server.port)
        upload = raw_post(server.port, slow, chunked=True, piece=1 << 16, pause=0.01)
        during = [ended - began for began, ended in probe.done() if upload.started < began and ended < upload.answered]
        print(
            f"/healthz during a slow upload (64 KiB / 10 ms, 413 after {upload.answered - upload.started:.2f} s): "
            f"p50 {statistics.median(during) * 1000:.2f} ms ({statistics.median(during) / p50:.1f}x idle), "
            f"worst {max(during) * 1000:.2f} ms (idle: {worst * 1000:.2f} ms) of {len(during)}"
        )
        values["slow_upload"] = {
            "answered_s": upload.answered - upload.started,
            "p50_ms": statistics.median(during) * 1000,
            "ratio": statistics.median(during) / p50,
            "worst_ms": max(during) * 1000,
            "n": len(during),
        }
    finally:
        server.stop()
    record.write(args.name, values, folder=args.results)


if __name__ == "__main__":
    main()
