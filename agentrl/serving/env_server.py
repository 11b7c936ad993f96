"""``agentrl serve-env ENV_ID``: any agentrl env served over OpenEnv's protocol (FastAPI + uvicorn).

OpenEnv's clients (openenv-core's ``EnvClient``/``GenericEnvClient``, TRL's OpenEnv integration) and
``env.remote`` pools of agentrl runs reset and step it. Endpoints, as OpenEnv's ``create_app`` has them:

- ``WS /ws`` — a session per client, with its own copy of the env: messages ``{"type": "reset",
  "data": {"seed"?, "episode_id"?, "task"?}}``, ``{"type": "step", "data": {"text": ...}}``,
  ``{"type": "state"}``, ``{"type": "close"}``; answers ``{"type": "observation", "data":
  {"observation": {"text", "info"}, "reward", "done"}}``, ``{"type": "state", ...}`` or ``{"type":
  "error", "data": {"message", "code"}}``.
- ``POST /reset`` ``{"seed"?, "episode_id"?, "task"?}`` and ``POST /step`` ``{"action": {"text"},
  "episode_id"}`` — plain HTTP. OpenEnv's own server builds a fresh env for every HTTP call; here
  ``/reset`` starts an episode kept under its ``episode_id`` (the request's, or a new one, returned in
  ``observation.info.episode_id``) and ``/step`` continues it, so a multi-step episode works over plain
  HTTP too. ``GET /state?episode_id=`` reads it.
- ``GET /schema`` (the action model: one string field ``text``; the observation: ``text`` and
  ``info`` with ``reward`` and ``done``), ``GET /metadata`` (``name`` is the env id), ``GET /health``,
  ``POST /mcp`` (JSON-RPC; this env has no MCP tools).

``task`` pins the episode's task (``{"id", "prompt", "answer", "metadata"}``, what ``env.remote`` sends);
without it the env draws one (from ``seed`` when given). Security as the reward server's: loopback by
default, an optional bearer token on everything but ``/health`` (WebSocket clients that cannot send a
header may add ``?token=``), request bodies over ``--max-body-bytes`` refused (413; a WebSocket message
over it closes the connection with code 1009).
Sessions past ``--max-sessions`` are refused (``CAPACITY_REACHED`` / 503), except that a new session
closes the least recently used idle HTTP episode first (a client may reset and never step); idle
sessions close after ``--idle-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import sys
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.routing import Route

from agentrl.env import TextEnv, make
from agentrl.serving.sessions import Session, SessionError, SessionTable, action_text
from rewards.server import BodyLimit, document_post, listen_socket, port_number, token_check


@dataclass(frozen=True)
class EnvServerConfig:
    """How ``agentrl serve-env`` runs."""

    env_id: str
    """The env to serve: a registered id, ``module:Class`` or a family id (``harbor:PATH``, ...)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the env."""
    host: str = "127.0.0.1"
    """Interface to bind; loopback by default."""
    port: int = 8000
    """TCP port."""
    token: str | None = None
    """Bearer token required on every endpoint but ``/health`` (None: open)."""
    max_sessions: int = 256
    """WebSocket sessions and HTTP episodes open at once."""
    idle_timeout_s: float = 600.0
    """A session without a call for this long is closed."""
    max_body_bytes: int = 1024 * 1024
    """Larger request bodies and WebSocket messages are refused."""
    threads: int = -8
    """Threads for env calls: N > 0 always N threads; 0 always on the event loop; -N (default -8) auto:
    N threads until the env's calls prove cheap, then on the loop (back to threads if one blocks)."""
    announce: bool = False
    """Print the URL once ready."""


class TextAction(BaseModel):
    """The action: the policy's text."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="The model's response for this turn")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Additional metadata for the action")


class TextObservation(BaseModel):
    """The observation: the env's text (prompt or feedback) and its info, with reward and done."""

    model_config = ConfigDict(extra="forbid")
    done: bool = Field(default=False, description="Whether the episode has ended (terminated or truncated)")
    reward: float | None = Field(default=None, description="Reward of the last action (None after reset)")
    metadata: dict[str, Any] = Field(default_factory=dict)
    text: str = Field(description="The env's text: the task's prompt after reset, feedback after a step")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info (task_id, prompt, "
                                 "reward_components, terminated, truncated, ...)")


class EpisodeState(BaseModel):
    """OpenEnv's ``State`` with the task id and whether the episode is over."""

    model_config = ConfigDict(extra="allow")
    episode_id: str | None = None
    step_count: int = 0


class ResetRequest(BaseModel):
    """OpenEnv's reset request; ``task`` (agentrl's) pins the episode's task."""

    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(default=None, ge=0)
    episode_id: str | None = Field(default=None, max_length=255)
    task: dict[str, Any] | None = None


class StepRequest(BaseModel):
    """OpenEnv's step request; ``episode_id`` names the HTTP episode ``/reset`` started."""

    model_config = ConfigDict(extra="allow")
    action: dict[str, Any]
    episode_id: str | None = Field(default=None, max_length=255)
    timeout_s: float | None = Field(default=None, gt=0)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status, media_type="application/json")


def _error(e: SessionError) -> JSONResponse:
    return JSONResponse({"detail": str(e), "code": e.code}, e.status)


async def _body(request: Request, token: str | None) -> dict[str, Any] | Response:
    """The request's JSON object (an empty body is ``{}``), or the error response (401, 422)."""
    if token is not None and not hmac.compare_digest(request.headers.get("authorization", "").encode(),
                                                     f"Bearer {token}".encode()):
        return JSONResponse({"detail": "missing or wrong bearer token"}, 401, {"WWW-Authenticate": "Bearer"})
    raw = await request.body()
    try:
        data = json.loads(raw) if raw.strip() else {}
    except ValueError as e:
        return JSONResponse({"detail": f"the body is not JSON: {e}"}, 422)
    if not isinstance(data, dict):
        return JSONResponse({"detail": "the body must be a JSON object"}, 422)
    return data


class EnvResponse(BaseModel):
    """An observation as OpenEnv's endpoints answer it."""

    observation: dict[str, Any] = Field(description="The observation's fields: text and info")
    reward: float | None = None
    done: bool = False


def episode_routes(table: SessionTable, config: EnvServerConfig) -> list[Route]:
    """``POST /reset`` and ``POST /step``: HTTP episodes kept under their ``episode_id``."""

    async def reset(request: Request) -> Response:
        """Start an episode (kept under its ``episode_id`` for ``/step``)."""
        data = await _body(request, config.token)
        if isinstance(data, Response):
            return data
        eid = data.get("episode_id") or uuid.uuid4().hex
        if not isinstance(eid, str) or len(eid) > 255:
            return JSONResponse({"detail": "'episode_id' must be a string of at most 255 characters"}, 422)
        data["episode_id"] = eid
        try:  # HTTP episodes are keyed apart from WebSocket sessions; at capacity the oldest one goes
            session = table.sessions.get("http:" + eid)
            if session is None:
                if len(table.sessions) >= table.max_sessions:
                    table.evict_oldest("http:")
                session = table.open("http:" + eid)
            return _json(await table.reset(session, data))
        except SessionError as e:
            return _error(e)

    async def step(request: Request) -> Response:
        """One action of the episode ``episode_id``; a finished episode is closed."""
        data = await _body(request, config.token)
        if isinstance(data, Response):
            return data
        eid = data.get("episode_id")
        if not isinstance(eid, str):
            return JSONResponse({"detail": "POST /step needs 'episode_id': the one /reset returned in "
                                 "observation.info.episode_id (or use the WebSocket session at /ws)"}, 422)
        try:
            session = table.get("http:" + eid, eid)
            out = await table.step(session, action_text(data.get("action")))
        except SessionError as e:
            return _error(e)
        if out["done"]:
            table.close(session.id)
        return _json(out)

    return [Route("/reset", reset, methods=["POST"]), Route("/step", step, methods=["POST"])]


def build_env(config: EnvServerConfig) -> TextEnv:
    """The served env (an :class:`~agentrl.env.EnvError` when it cannot be made)."""
    return make(config.env_id, **config.env_kwargs)


def create_app(config: EnvServerConfig, env: TextEnv | None = None) -> FastAPI:
    """The server's app; ``env`` is the template every session copies (built from the config if None, and then
    closed by the app's shutdown; one passed in stays the caller's to close)."""
    template = env if env is not None else build_env(config)
    table = SessionTable(template, lambda: build_env(config), max_sessions=config.max_sessions,
                         idle_timeout_s=config.idle_timeout_s, threads=config.threads, owns_template=env is None)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        reaper = asyncio.create_task(table.reap_forever())
        if config.announce:
            print(f"agentrl env server for {config.env_id} on http://{config.host}:{config.port} "
                  f"(OpenEnv protocol: WS /ws, POST /reset /step, GET /state /schema; docs at /docs)", flush=True)
        yield
        reaper.cancel()
        table.shutdown()

    app = FastAPI(title=f"agentrl env server: {config.env_id}", version="1.0.0", lifespan=lifespan)
    app.state.sessions = table
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    auth = [Depends(token_check(config.token))]

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness (no token needed): ``{"status": "healthy"}`` and the sessions open."""
        return {"status": "healthy", "sessions": len(table.sessions), "max_sessions": table.max_sessions}

    @app.get("/metadata", dependencies=auth)
    async def metadata() -> dict[str, Any]:
        """OpenEnv's environment metadata: ``name`` is the env id."""
        doc = (type(template).__doc__ or "").strip().splitlines()
        return {"name": config.env_id, "description": doc[0] if doc else type(template).__name__,
                "version": "1.0.0", "author": "agentrl", "max_turns": int(getattr(template, "max_turns", 1))}

    @app.get("/schema", dependencies=auth)
    async def schema() -> dict[str, Any]:
        """JSON schemas of the action, the observation and the state."""
        return {"action": TextAction.model_json_schema(), "observation": TextObservation.model_json_schema(),
                "state": EpisodeState.model_json_schema()}

    # /reset and /step are plain Starlette routes (FastAPI's validation and dependency layers cost more
    # than the env call on cheap envs), matched first; document_post puts them into the OpenAPI schema.
    app.router.routes[:0] = episode_routes(table, config)
    document_post(app, {"/reset": (ResetRequest, EnvResponse, "Start an episode"),
                        "/step": (StepRequest, EnvResponse, "One action of an episode")})

    @app.get("/state", dependencies=auth, response_model=EpisodeState)
    async def state(episode_id: str | None = Query(None)) -> dict[str, Any]:
        """The state of HTTP episode ``episode_id`` (an empty state without one)."""
        if episode_id is None:
            return table.state(None)
        session = table.sessions.get("http:" + episode_id)
        if session is None:
            raise HTTPException(404, f"unknown episode_id {episode_id!r}")
        return table.state(session)

    @app.post("/mcp", dependencies=auth)
    async def mcp(body: Any = Body(None)) -> dict[str, Any]:
        """MCP's JSON-RPC endpoint: this env has no MCP tools."""
        rid = body.get("id") if isinstance(body, dict) else None
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "this environment has no MCP tools "
                                                       "(reset and step it over /ws or /reset and /step)"}}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await serve_session(websocket, table, config)

    return app


def _ws_allowed(websocket: WebSocket, token: str | None) -> bool:
    if token is None:
        return True
    want = f"Bearer {token}".encode()
    got = websocket.headers.get("authorization", "").encode()
    query = f"Bearer {websocket.query_params.get('token', '')}".encode()
    return hmac.compare_digest(got, want) or hmac.compare_digest(query, want)


async def serve_session(websocket: WebSocket, table: SessionTable, config: EnvServerConfig) -> None:
    """One WebSocket client's session: its own env until the client closes or goes idle."""
    if not _ws_allowed(websocket, config.token):
        await websocket.close(code=1008, reason="missing or wrong bearer token")
        return
    await websocket.accept()
    session: Session | None = None
    try:
        if len(table.sessions) >= table.max_sessions:  # an idle HTTP episode gives way to a live client
            table.evict_oldest("http:")
        session = table.open()
        while True:
            raw = await asyncio.wait_for(websocket.receive_text(), timeout=config.idle_timeout_s)
            reply = await _answer(raw, session, table, config)
            if reply is None:
                break
            await websocket.send_text(reply)
    except SessionError as e:
        await websocket.send_text(json.dumps({"type": "error", "data": {"message": str(e), "code": e.code}}))
    except (TimeoutError, WebSocketDisconnect):
        pass
    finally:
        if session is not None:
            table.close(session.id)
        try:
            await websocket.close()
        except (RuntimeError, WebSocketDisconnect):  # the client is gone already
            pass


async def _answer(raw: str, session: Session, table: SessionTable, config: EnvServerConfig) -> str | None:
    """The reply to one message (None: the client closed the session)."""
    if len(raw) > config.max_body_bytes:
        return _ws_error(f"message larger than {config.max_body_bytes} bytes", "VALIDATION_ERROR")
    try:
        message = json.loads(raw)
    except json.JSONDecodeError as e:
        return _ws_error(f"Invalid JSON: {e}", "INVALID_JSON")
    kind = message.get("type") if isinstance(message, dict) else None
    data = message.get("data") if isinstance(message, dict) else None
    try:
        if kind == "reset":
            out = await table.reset(session, data if isinstance(data, dict) else {})
        elif kind == "step":
            out = await table.step(session, action_text(data))
        elif kind == "state":
            return json.dumps({"type": "state", "data": table.state(session)})
        elif kind == "close":
            return None
        else:
            return _ws_error(f"Unknown message type: {kind}", "UNKNOWN_TYPE")
    except SessionError as e:
        return _ws_error(str(e), e.code)
    return json.dumps({"type": "observation", "data": out}, separators=(",", ":"))


def _ws_error(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of ``agentrl serve-env``."""
    p = argparse.ArgumentParser(prog="agentrl serve-env",
                                description="Serve an agentrl env over OpenEnv's protocol (WebSocket and HTTP).")
    p.add_argument("env_id", help="env id: agentrl/Arithmetic-v0, module:Class, harbor:PATH, ...")
    p.add_argument("--kwargs", default="{}", help="env keyword arguments as JSON (default {})")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port, or 0 for a free one (default 8000)")
    p.add_argument("--token", default=os.environ.get("AGENTRL_ENV_TOKEN"),
                   help="bearer token required by the API (default: $AGENTRL_ENV_TOKEN; none if unset)")
    p.add_argument("--max-sessions", type=int, default=256, help="sessions open at once (default 256)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle session closes")
    p.add_argument("--max-body-bytes", type=int, default=1024 * 1024, help="largest request or message")
    p.add_argument("--threads", type=int, default=-8,
                   help="threads for env calls: N always N threads, 0 always on the event loop, -N (default -8) "
                        "N threads until the calls prove cheap (32 in a row under 2 ms), then on the loop, and "
                        "back to threads for good when one takes over 10 ms")
    p.add_argument("--log-level", default="warning")
    return p


def cli_main(argv: list[str]) -> int:
    """Entry point of ``agentrl serve-env``: build the env, bind, print the URL once ready, serve."""
    import uvicorn

    from agentrl.env import EnvError

    args = build_parser().parse_args(argv)
    try:
        kwargs = json.loads(args.kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        print(f"agentrl serve-env: --kwargs must be a JSON object ({e})", file=sys.stderr)
        return 2
    if args.max_sessions < 1:
        print("agentrl serve-env: --max-sessions must be at least 1", file=sys.stderr)
        return 2
    sock = listen_socket(args.host, args.port, "agentrl serve-env")
    if sock is None:
        return 2
    config = EnvServerConfig(args.env_id, kwargs, host=args.host, port=sock.getsockname()[1],
                             token=args.token or None, max_sessions=args.max_sessions,
                             idle_timeout_s=args.idle_timeout, max_body_bytes=args.max_body_bytes,
                             threads=args.threads, announce=True)
    try:
        app = create_app(config)
    except (EnvError, ImportError, TypeError, ValueError) as e:
        sock.close()
        print(f"agentrl serve-env: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False,
                                           ws_max_size=args.max_body_bytes, ws_ping_interval=None))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main(sys.argv[1:]))
