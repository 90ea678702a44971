"""The HTTP side of ``claw-view``: the page, its static files (the vendored chart and table libraries), and a JSON
API over the runs' indexes.

Routes: ``GET /`` (the page), ``/static/…``, ``/api/runs`` (each run's state: live or finished, counts, problems
found reading it), ``/api/curves``, ``/api/turns`` (a filtered page of the turn list, Tabulator's remote format),
``/api/turn`` (one turn in full, with its episode and its prompt), ``/api/image`` (a GUI turn's screenshot),
``/api/improve`` (the before/after check),
``/healthz``. A bad query parameter is a 400 with a one-line message, never a 500.

Access: with an API key every route but ``/healthz`` needs it — ``Authorization: Bearer <key>``, or ``?key=<key>``
once, which sets a cookie for the page's own requests. Without a key (loopback only) every route but ``/healthz``
answers only a ``Host`` that names this machine literally, and an ``Origin``, if any, of this machine on this port
(:func:`claw_train.access.stranger`; no DNS), else a 403: a web page elsewhere cannot read the runs through DNS
rebinding.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from claw_train.access import stranger
from claw_train.view.detail import improvement, turn_detail
from claw_train.view.runs import RunIndex
from claw_train.view.table import TurnFilter

STATIC = Path(__file__).parent / "static"
COOKIE = "claw_view_key"
IMAGE = re.compile(r"images/[\w.-]+\.png")
"""A GUI turn's screenshot, as its record names it (nothing outside ``logs/images/`` is served)."""
MAX_PAGE = 500


class BadQuery(ValueError):
    """A query parameter the API cannot use (a 400)."""


def create_app(runs: Sequence[RunIndex], *, key: str = "") -> FastAPI:
    """The app over ``runs`` (indexes kept fresh by a :class:`~claw_train.view.server.Refresher`)."""
    app = FastAPI(title="claw-view", docs_url=None, redoc_url=None, openapi_url=None)

    app.middleware("http")(_guard(key))

    @app.exception_handler(BadQuery)
    async def bad_query(request: Request, err: BadQuery) -> JSONResponse:
        return JSONResponse({"error": str(err)}, 400)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/")
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "runs": len(runs)}

    @app.get("/api/runs")
    def run_states() -> list[dict[str, Any]]:
        return [dict(r.state(), run=i) for i, r in enumerate(runs)]

    @app.get("/api/curves")
    def curves() -> list[dict[str, Any]]:
        return [dict(r.curves(), run=i) for i, r in enumerate(runs)]

    @app.get("/api/turns")
    def turns(request: Request) -> dict[str, Any]:
        params = request.query_params
        page_no = _number(params.get("page", "1"), "page", low=1)
        size = _number(params.get("size", "50"), "size", low=1, high=MAX_PAGE)
        chosen = _runs(params.get("run", "all"), len(runs))
        family = params.get("family", "").strip()
        try:
            wanted = TurnFilter.from_params(params)
            matches = [
                (i, runs[i].select(wanted)) for i in chosen if not family or runs[i].options.get("env") == family
            ]
        except ValueError as err:
            raise BadQuery(str(err)) from None
        total = sum(len(rows) for _, rows in matches)
        start, stop = (page_no - 1) * size, page_no * size
        data, seen = [], 0
        for i, rows in matches:
            lo, hi = max(start - seen, 0), min(stop - seen, len(rows))
            data += [dict(runs[i].row(n), run=i, id=f"{i}:{n}") for n in rows[lo:hi]] if lo < hi else []
            seen += len(rows)
        return {"last_page": max(1, -(-total // size)), "last_row": total, "data": data}

    @app.get("/api/turn")
    def turn(run: str, n: str) -> dict[str, Any]:
        i = _number(run, "run", low=0, high=len(runs) - 1)
        index = runs[i]
        number = _number(n, "n", low=0, high=index.turns.n - 1)
        return turn_detail(index, number) | {"run": i}

    @app.get("/api/image")
    def image(run: str, path: str) -> Response:
        index = runs[_runs(run, len(runs))[0]]
        if not IMAGE.fullmatch(path):
            raise BadQuery(f"path must name a screenshot under logs/images/, not {path!r}")
        file = index.root / "logs" / path
        if not file.is_file():
            return JSONResponse({"error": f"{path}: not in this run's logs"}, 404)
        return FileResponse(file, media_type="image/png")

    @app.get("/api/improve")
    def improve(run: str = "0") -> dict[str, Any]:
        i = _runs(run, len(runs))[0]
        return improvement(runs[i]) | {"run": i}

    return app


def _guard(key: str) -> Any:
    """The access middleware: keyless, a request from this machine only; with ``key``, the key (Bearer, or once as
    ``?key=`` which sets a cookie). ``/healthz`` is open."""
    secret = key.encode()

    async def guard(request: Request, call_next: Any) -> Response:
        if request.url.path == "/healthz":
            return await call_next(request)
        if not secret:
            if (why := stranger(request.scope)) is not None:
                return JSONResponse({"error": f"claw-view: {why}"}, 403)
            return await call_next(request)
        given = request.query_params.get("key")
        if given is not None and hmac.compare_digest(given.encode(), secret):
            response = RedirectResponse(request.url.remove_query_params("key"), status_code=303)
            response.set_cookie(COOKIE, key, httponly=True, samesite="strict")
            return response
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        sent = bearer.strip() if scheme.lower() == "bearer" else request.cookies.get(COOKIE, "")
        if not hmac.compare_digest(sent.encode("utf-8", "replace"), secret):
            return JSONResponse(
                {"error": "missing or wrong key: open the page as /?key=<key> or send 'Authorization: Bearer <key>'"},
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await call_next(request)

    return guard


def _number(text: str, name: str, *, low: int, high: int | None = None) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise BadQuery(f"{name} must be a whole number, not {text!r}") from None
    if high is not None and high < low:
        raise BadQuery(f"there is no {name} yet")
    if value < low or (high is not None and value > high):
        raise BadQuery(
            f"{name} must be {low} to {high}, got {value}" if high is not None else f"{name} must be at least {low}"
        )
    return value


def _runs(text: str, count: int) -> list[int]:
    if text == "all":
        return list(range(count))
    return [_number(text, "run", low=0, high=count - 1)]
