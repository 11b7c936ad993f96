"""``agentrl view``'s web server: FastAPI + uvicorn on 127.0.0.1 by default.

The page (``static/``: one HTML file, its scripts and style, no third-party code) asks the JSON API
below and polls ``/api/poll`` every few seconds, which reads what the runs appended since, so a run
that is training shows its new steps and episodes without a restart. Every endpoint but
``/healthz`` needs the token when one is set (``--token`` or ``$AGENTRL_VIEW_TOKEN``): as
``Authorization: Bearer TOKEN``, or the cookie the page sets when opened as ``/?token=TOKEN`` (the
URL the command prints). Requests whose ``Host`` is not the address the server is bound to are
refused (421), so a web page elsewhere cannot read the runs through DNS rebinding.

- ``GET /api/runs`` — the runs: name, path, config highlights, counts, problems;
- ``GET /api/runs/{r}/metrics?since=N`` — metrics rows from row N, with the run's ``generation``;
- ``GET /api/runs/{r}/episodes?since=N`` — episode summaries from N (``samples.jsonl``);
- ``GET /api/runs/{r}/episodes/{i}`` — one episode record (docs/trajectories.md);
- ``GET /api/runs/{r}/evals`` — eval reports with their episode summaries;
- ``GET /api/runs/{r}/evals/{k}/episodes/{i}`` — one episode record of eval report k;
- ``GET /api/runs/{r}/doctor`` — the run's ``doctor.json``: ``{"state": "ok", "report": {...}}``, ``{"state":
  "error", "error": "one line"}`` (malformed) or ``{"state": "missing"}`` (agentrl/viewer/doctor.py);
- ``GET /api/runs/{r}/warm_start`` — the curve of the run's warm start (``warm_start.jsonl``): ``{"rows":
  [{"step", "loss", "seconds", "dev_accuracy"?}], "error": null | "one line"}``, no rows without one
  (agentrl/viewer/warm_start.py);
- ``GET /api/poll`` — per run: rows, episodes, generation, eval report times and stamps of
  ``doctor.json`` and ``warm_start.jsonl`` (reads new lines).
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse

from agentrl.viewer.data import RunData

STATIC = Path(__file__).resolve().parent / "static"
SCRIPTS = ("data.js", "charts.js", "episode.js", "doctor.js", "app.js")
"""The page's scripts, in load order (shared by the server's page and the exported file)."""
COOKIE = "agentrl_view_token"


def page(static: bool, data_json: str | None = None) -> str:
    """The HTML page: linked assets for the server, or every asset and the data inlined (``--export``)."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    if not static:
        return (html.replace("<!--STYLE-->", '<link rel="stylesheet" href="static/view.css">')
                .replace("<!--SCRIPTS-->", "\n".join(f'<script src="static/{s}"></script>' for s in SCRIPTS))
                .replace("<!--DATA-->", ""))
    css = (STATIC / "view.css").read_text(encoding="utf-8")
    scripts = "\n".join(f"<script>\n{_inline((STATIC / s).read_text(encoding='utf-8'))}\n</script>" for s in SCRIPTS)
    # JSON: every "<" as \u003c, so that no text in a record can close or open an element
    safe = (data_json or "{}").replace("<", "\\u003c")
    data = f'<script id="agentrl-data" type="application/json">{safe}</script>'
    return html.replace("<!--STYLE-->", f"<style>\n{css}\n</style>").replace("<!--SCRIPTS-->", scripts).replace(
        "<!--DATA-->", data)


def _inline(text: str) -> str:
    """Our scripts inside a <script> element: no "</" or "<!--" in them can end it early."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _allowed_hosts(host: str, port: int) -> set[str] | None:
    """The ``Host`` headers a loopback-bound server answers (None: any, for a server bound elsewhere)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return None
    names = {"localhost", "127.0.0.1", "[::1]", host if ":" not in host else f"[{host}]"}
    return {f"{n}:{port}" for n in names} | names


def create_app(runs: list[RunData], token: str | None = None, host: str = "127.0.0.1", port: int = 0) -> FastAPI:
    """The FastAPI app serving ``runs`` (see the module docstring)."""
    app = FastAPI(title="agentrl view", docs_url=None, redoc_url=None, openapi_url=None)
    hosts = _allowed_hosts(host, port)

    @app.middleware("http")
    async def check_host(request: Request, call_next: Any) -> Any:
        if hosts is not None and port and request.headers.get("host", "") not in hosts:
            return JSONResponse({"detail": "unexpected Host header"}, status_code=421)
        return await call_next(request)

    async def check_token(request: Request) -> None:
        if token is None:
            return
        got = request.headers.get("authorization", "")
        cookie = request.cookies.get(COOKIE, "")
        if not (hmac.compare_digest(got.encode(), f"Bearer {token}".encode())
                or hmac.compare_digest(cookie.encode(), token.encode())):
            raise HTTPException(401, "missing or wrong token: open the URL agentrl view printed (with ?token=...)")

    def run(r: int) -> RunData:
        if not 0 <= r < len(runs):
            raise HTTPException(404, f"no run {r}; there are {len(runs)}")
        return runs[r]

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, token_arg: str | None = Query(None, alias="token")) -> Any:
        if token is not None and token_arg is not None:
            if not hmac.compare_digest(token_arg.encode(), token.encode()):
                raise HTTPException(401, "wrong token")
            response = RedirectResponse("/", status_code=303)  # the token leaves the address bar
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
            return response
        if token is not None:
            check = request.cookies.get(COOKIE, "")
            if not hmac.compare_digest(check.encode(), token.encode()):
                raise HTTPException(401, "missing token: open the URL agentrl view printed (with ?token=...)")
        return HTMLResponse(page(static=False))

    @app.get("/static/{name}", dependencies=[Depends(check_token)])
    def asset(name: str) -> Any:
        if name not in (*SCRIPTS, "view.css"):
            raise HTTPException(404, "no such file")
        return FileResponse(STATIC / name)

    @app.get("/api/runs", dependencies=[Depends(check_token)])
    def list_runs() -> list[dict[str, Any]]:
        for r in runs:
            r.refresh()
        return [r.summary() for r in runs]

    @app.get("/api/poll", dependencies=[Depends(check_token)])
    def poll() -> dict[str, Any]:
        for r in runs:
            r.refresh()
        return {"runs": [{"metrics": len(r.metrics), "episodes": len(r.episodes), "generation": r.generation,
                          "evals": r.eval_stamp(), "doctor": r.doctor_stamp(),
                          "warm_start": r.warm_start_stamp()} for r in runs]}

    @app.get("/api/runs/{r}/metrics", dependencies=[Depends(check_token)])
    def metrics(r: int, since: int = Query(0, ge=0)) -> dict[str, Any]:
        data = run(r)
        return {"generation": data.generation, "total": len(data.metrics), "rows": data.metrics[since:]}

    @app.get("/api/runs/{r}/episodes", dependencies=[Depends(check_token)])
    def episodes(r: int, since: int = Query(0, ge=0)) -> dict[str, Any]:
        data = run(r)
        return {"generation": data.generation, "total": len(data.episodes), "episodes": data.episodes[since:]}

    @app.get("/api/runs/{r}/episodes/{i}", dependencies=[Depends(check_token)])
    def episode(r: int, i: int) -> dict[str, Any]:
        try:
            return run(r).record(i)
        except IndexError:
            raise HTTPException(404, f"run {r} has no episode {i}") from None

    @app.get("/api/runs/{r}/evals", dependencies=[Depends(check_token)])
    def evals(r: int) -> list[dict[str, Any]]:
        return run(r).evals()

    @app.get("/api/runs/{r}/doctor", dependencies=[Depends(check_token)])
    def doctor(r: int) -> dict[str, Any]:
        return run(r).doctor()

    @app.get("/api/runs/{r}/warm_start", dependencies=[Depends(check_token)])
    def warm_start(r: int) -> dict[str, Any]:
        return run(r).warm_start()

    @app.get("/api/runs/{r}/evals/{k}/episodes/{i}", dependencies=[Depends(check_token)])
    def eval_episode(r: int, k: int, i: int) -> dict[str, Any]:
        try:
            return run(r).eval_record(k, i)
        except IndexError:
            raise HTTPException(404, f"run {r} has no eval report {k} with an episode {i}") from None

    return app
