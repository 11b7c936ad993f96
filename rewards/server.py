"""The reward server (``agentrl serve-reward``): FastAPI + uvicorn, binds 127.0.0.1 by default.

Endpoints (OpenAPI docs at ``/docs``, schema at ``/openapi.json``):

- ``POST /score`` — native batch API: ``{"reward": "math", "items": [{"response": "...",
  "task": {...}} | {"response": "...", "label": ...}]}`` -> ``{"results": [{"score", "components",
  "info", "error"}]}``. An item's own ``reward`` overrides the request's.
- ``POST /get_reward`` — OpenRLHF's remote reward protocol: ``{"query": [...], "prompts": [...],
  "labels": [...]}`` -> ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``. The response is
  the query with its prompt prefix removed; the reward is ``?reward=`` or the server's default.
- ``GET /rewards`` — the reward names available; ``GET /healthz`` — liveness (no token needed).

A request whose ``reward`` (``?reward=`` on ``/get_reward``) the server does not have is refused as
a whole (400, naming the rewards that exist); an item naming an unknown reward gets that error in its
result. ``--default-reward`` sets the reward of requests that name none. On start the server
prints one line with its URL, its rewards and the default (``--port 0`` picks a free port).

Scoring runs in a pool of worker processes (:mod:`rewards._pool`), so the event loop stays
responsive; an item that raises, hangs or kills its worker gets an ``error`` (score 0), the batch
never fails. Optional bearer token (401), request size limit (413), schema validation (422).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import socket
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.routing import Route

from rewards._pool import WorkerPool
from rewards.registry import available, get_reward, load_object, register


@dataclass(frozen=True)
class ServerConfig:
    """How the reward server runs."""

    host: str = "127.0.0.1"
    """Interface to bind; loopback by default."""
    port: int = 8000
    """TCP port."""
    token: str | None = None
    """Bearer token required on every endpoint but ``/healthz`` (``None``: no auth)."""
    workers: int = 2
    """Scoring worker processes."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Larger request bodies get 413."""
    item_timeout_s: float = 10.0
    """Per-item scoring time limit."""
    default_reward: str = "math"
    """Reward used when a request names none."""
    plugins: list[str] = field(default_factory=list)
    """``module:function`` rewards to load (registered under that string and the function name)."""
    announce: bool = False
    """Print the server's URL and rewards on one line once it is ready (``agentrl serve-reward``)."""


class TaskModel(BaseModel):
    """A task (see ``agentrl.types.Task``)."""

    id: str = "0"
    prompt: str | list[dict[str, Any]] = ""
    answer: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ScoreItem(BaseModel):
    """One response to score, against a full task or just a gold label."""

    response: str
    task: TaskModel | None = None
    label: Any = None
    reward: str | None = None


class ScoreRequest(BaseModel):
    """A batch of items; ``reward`` is the default reward for items that name none."""

    items: list[ScoreItem]
    reward: str | None = None


class ItemResult(BaseModel):
    """The result of one item: ``error`` is set (and ``score`` 0) when it could not be scored."""

    score: float
    components: dict[str, float]
    info: dict[str, Any]
    error: str | None


class ScoreResponse(BaseModel):
    results: list[ItemResult]


class OpenRLHFRequest(BaseModel):
    """OpenRLHF's remote reward request (``--reward.remote_url``)."""

    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


class OpenRLHFResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]


class BodyLimit:
    """ASGI middleware: 413 for bodies over ``max_bytes`` (by header, or counted while streaming); the env
    server (:mod:`agentrl.serving.env_server`) uses it too."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._reject(scope, receive, send)
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise HTTPException(413, "request body too large")
            return message

        await self.app(scope, limited, send)

    async def _reject(self, scope: dict, receive: Any, send: Any) -> None:
        response = JSONResponse({"detail": f"request body larger than {self.max_bytes} bytes"}, 413)
        await response(scope, receive, send)


def _load_plugins(specs: list[str]) -> None:
    for spec in specs:
        fn = load_object(spec)
        register(spec, fn)
        register(getattr(fn, "__name__", spec), fn)


def _items_for_pool(items: list[ScoreItem], default: str) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for i, item in enumerate(items):
        task = item.task.model_dump() if item.task is not None else {
            "id": str(i), "prompt": "", "answer": item.label, "metadata": {}}
        out.append((item.reward or default, item.response, task))
    return out


def _openrlhf_items(req: OpenRLHFRequest, reward: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Pool items from an OpenRLHF request: the response is the query minus its prompt prefix."""
    prompts = req.prompts or [""] * len(req.query)
    labels = req.labels if req.labels is not None else [None] * len(req.query)
    if len(prompts) != len(req.query) or len(labels) != len(req.query):
        raise HTTPException(422, "query, prompts and labels must have the same length")
    items = []
    for i, (query, prompt, label) in enumerate(zip(req.query, prompts, labels)):
        response = query[len(prompt):] if prompt and query.startswith(prompt) else query
        items.append((reward, response, {"id": str(i), "prompt": prompt, "answer": label, "metadata": {}}))
    return items


def _openrlhf_response(results: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"rewards", "scores", "extra_logs"}``; extra_logs has one list per component and ``error``."""
    scores = [r["score"] for r in results]
    logs: dict[str, list[float]] = {}
    for name in sorted({k for r in results for k in r["components"]}):
        logs[name] = [float(r["components"].get(name, 0.0)) for r in results]
    logs["error"] = [1.0 if r["error"] else 0.0 for r in results]
    return {"rewards": scores, "scores": scores, "extra_logs": logs}


def document_post(app: FastAPI, routes: dict[str, tuple[type[BaseModel], type[BaseModel], str]]) -> None:
    """Put plain ``POST`` routes (Starlette ``Route``s, not FastAPI's) into the app's OpenAPI schema:
    ``{path: (request model, response model, summary)}``. The env server uses it too."""

    def entry(request_model: type[BaseModel], response_model: type[BaseModel], summary: str) -> dict[str, Any]:
        def content(model: type[BaseModel]) -> dict[str, Any]:
            return {"application/json": {"schema": model.model_json_schema(ref_template="#/components/schemas/{model}")}}

        return {"post": {"summary": summary, "requestBody": {"required": True, "content": content(request_model)},
                         "responses": {"200": {"description": "Successful Response", "content": content(response_model)},
                                       "401": {"description": "Missing or wrong bearer token"},
                                       "413": {"description": "Request body too large"},
                                       "422": {"description": "Validation error"}}}}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for path, (req, resp, summary) in routes.items():
                schema["paths"][path] = entry(req, resp, summary)
                for model in (req, resp):  # nested models ($defs) become shared components
                    full = model.model_json_schema(ref_template="#/components/schemas/{model}")
                    components.update(full.pop("$defs", {}))
                    components[model.__name__] = full
            for item in schema["paths"].values():  # $defs inside the entries point at the components
                for op in item.values():
                    for part in [op.get("requestBody", {})] + list(op.get("responses", {}).values()):
                        for media in part.get("content", {}).values():
                            media["schema"].pop("$defs", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _lifespan(config: ServerConfig, state: dict[str, WorkerPool], known: list[str]) -> Any:
    """The app's lifespan: start the worker pool (into ``state["pool"]``), announce, close it at exit."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        state["pool"] = WorkerPool(config.workers, config.plugins, config.item_timeout_s)
        await state["pool"].start()
        if config.announce:
            print(f"agentrl reward server on http://{config.host}:{config.port} (rewards: {', '.join(known)}; "
                  f"default: {config.default_reward}; POST /score, POST /get_reward, docs at /docs)", flush=True)
        yield
        await state["pool"].close()

    return lifespan


def token_check(token: str | None) -> Any:
    """A FastAPI dependency refusing requests without ``Authorization: Bearer <token>`` (none: open)."""

    async def check_token(request: Request) -> None:
        if token is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    return check_token


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app; the worker pool starts with the app's lifespan."""
    _load_plugins(config.plugins)
    # workers register plugins under the spec; the short name is mapped back here
    aliases = {getattr(load_object(s), "__name__", s): s for s in config.plugins}
    get_reward(aliases.get(config.default_reward, config.default_reward))  # unknown name: fail now
    state: dict[str, WorkerPool] = {}
    known = sorted(set(available()) | set(aliases))
    app = FastAPI(title="agentrl reward server", version="1", lifespan=_lifespan(config, state, known))
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    check_token = token_check(config.token)

    def request_reward(name: str | None) -> str:
        """The request's reward (or the default); an unknown one refuses the request, naming what exists."""
        if name is not None and name not in known and name not in config.plugins:
            raise HTTPException(400, f"unknown reward {name!r}; this server has: {', '.join(known)}")
        return name or config.default_reward

    async def run(items: list[tuple[str, str, dict[str, Any]]]) -> list[bytes]:
        if aliases:
            items = [(aliases.get(name, name), resp, task) for name, resp, task in items]
        return await state["pool"].score_json(items)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        """Liveness: ``{"status": "ok"}``."""
        return {"status": "ok", "workers": config.workers, "restarts": state["pool"].restarts}

    @app.get("/rewards", dependencies=[Depends(check_token)])
    async def rewards_list() -> dict[str, Any]:
        """Names accepted as ``reward``."""
        return {"rewards": known, "default": config.default_reward}

    async def score(request: Request) -> Response:
        """Score a batch; each item gets a result (or an error), in order. A plain route (FastAPI's
        validation and dependency layers cost more than scoring a cheap item): the same checks by hand."""
        try:
            await check_token(request)
            req = ScoreRequest.model_validate_json(await request.body())
            results = await run(_items_for_pool(req.items, request_reward(req.reward)))
        except HTTPException as e:
            return JSONResponse({"detail": e.detail}, e.status_code, e.headers)
        except ValidationError as e:
            return JSONResponse({"detail": e.errors(include_url=False, include_context=False, include_input=False)}, 422)
        return Response(b'{"results":[' + b",".join(results) + b"]}", media_type="application/json")

    app.router.routes.insert(0, Route("/score", score, methods=["POST"]))  # the hot route is matched first
    document_post(app, {"/score": (ScoreRequest, ScoreResponse, "Score a batch of items")})

    @app.post("/get_reward", response_model=OpenRLHFResponse, dependencies=[Depends(check_token)])
    async def get_reward_openrlhf(req: OpenRLHFRequest, reward: str | None = Query(None)) -> JSONResponse:
        """OpenRLHF remote reward protocol."""
        results = [json.loads(r) for r in await run(_openrlhf_items(req, request_reward(reward)))]
        return JSONResponse(_openrlhf_response(results))

    return app


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of ``agentrl serve-reward``."""
    p = argparse.ArgumentParser(prog="agentrl serve-reward", description="Serve reward functions over HTTP.")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port 1-65535, or 0 for a free one (default 8000)")
    p.add_argument("--token", default=os.environ.get("AGENTRL_REWARD_TOKEN"),
                   help="bearer token required by the API (default: $AGENTRL_REWARD_TOKEN; none if unset)")
    p.add_argument("--workers", type=int, default=2, help="scoring worker processes")
    p.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024)
    p.add_argument("--item-timeout", type=float, default=10.0, help="seconds per item")
    p.add_argument("--default-reward", default="math", metavar="NAME",
                   help="reward of requests that name none (default: math; GET /rewards lists them)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE:FUNCTION",
                   help="load a reward function (repeatable)")
    p.add_argument("--log-level", default="warning")
    return p


def port_number(text: str) -> int:
    """``--port``: an integer 0-65535 (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range; give 1-65535 (or 0 for a free port)")
    return port


def listen_socket(host: str, port: int, prog: str) -> socket.socket | None:
    """A bound TCP socket for ``host:port`` (0: a free port), or None after printing one line naming the
    busy port and the fix (``agentrl serve-reward``, ``agentrl serve-env``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        print(f"{prog}: cannot listen on {host}:{port}: {e.strerror} "
              f"(pass another --port, or --port 0 for a free one)", file=sys.stderr)
        return None
    return sock


def cli_main(argv: list[str]) -> int:
    """Entry point of ``agentrl serve-reward``: bind, build the app, print the URL once ready, serve."""
    import uvicorn

    args = build_parser().parse_args(argv)
    sock = listen_socket(args.host, args.port, "agentrl serve-reward")
    if sock is None:
        return 2
    config = ServerConfig(host=args.host, port=sock.getsockname()[1], token=args.token or None,
                          workers=args.workers, max_body_bytes=args.max_body_bytes, item_timeout_s=args.item_timeout,
                          default_reward=args.default_reward, plugins=args.plugin, announce=True)
    try:
        app = create_app(config)
    except (KeyError, ImportError, AttributeError, ValueError) as e:
        sock.close()
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"agentrl serve-reward: {msg}", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main(__import__("sys").argv[1:]))
