"""The ASGI app of ``parley serve``: FastAPI on Starlette (FastAPI generates the OpenAPI schema from
the protocol's pydantic models, and validates requests with them).

Every handler is ``async`` and quick, so they all run on the event loop, one at a time: a session's
busy check and the start of its turn cannot interleave with another request's change to it. Turns
run on worker threads (``NPCs``); their events come back as Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtime.dialogue.dialog_file import MAX_HISTORY_BYTES
from runtime.serve import openai_door
from runtime.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from runtime.serve.npcs import Item, NPCs, Stream
from runtime.serve.protocol import (
    API_VERSION,
    EVENT_KINDS,
    KEEP_ALIVE_SECONDS,
    PREFIX,
    RUN_HEADER,
    SCENE_EVENT_KINDS,
    AssetOut,
    Assets,
    CancelOut,
    ErrorOut,
    Health,
    Live,
    NewScene,
    NewSession,
    ParamsIn,
    PreviousCrash,
    Ready,
    RegenerateIn,
    RewindIn,
    SceneLineIn,
    SceneNpcIn,
    SceneOut,
    SceneRewindIn,
    Scenes,
    ServeError,
    SessionOut,
    Sessions,
    ShuttingDown,
    ToolResultIn,
    Transcript,
    TurnIn,
    TurnLine,
    TurnLines,
    VariablesIn,
)
from runtime.serve.scenes import ServedScenes
from runtime.session.failures import FAILURE_CODES
from runtime.session.record import TurnRecord

log = logging.getLogger("parley.serve")

SSE = {200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events: `event: KIND` and one line "
             "of JSON `data:` each, KIND one of " + ", ".join(EVENT_KINDS) + " (a client ignores a kind it does not "
             "know: a later server may send more); the last is turn_finished or turn_failed, whose `error` is "
             "`{code, message, node, field, model}` with code one of: "
             + "; ".join(f"{code} ({when})" for code, when in FAILURE_CODES.items()) + "."}}
SCENE_SSE = {200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events of one round: `event: "
                   "KIND` and one line of JSON `data:` each, KIND one of " + ", ".join(SCENE_EVENT_KINDS) + " (a client "
                   "ignores a kind it does not know). round_started first; scene_line {speaker, name, text, heard_by} "
                   "for each line said; each NPC's node events and tool_request carry `speaker`; the last is "
                   "round_finished (RoundOut) or round_failed {line, speaker, error: {code, message, node, field, "
                   "model}}. Closing the stream cancels the round (it cannot be resumed)."}}
ERRORS = {code: {"model": ErrorOut} for code in (400, 401, 404, 409, 413, 422, 429)}

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]


def error_response(error: ServeError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


async def _send_error(send: Callable[[dict[str, Any]], Awaitable[None]], error: ServeError) -> None:
    body = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


MAX_REQUESTS = 4096  # answered at once (open streams count); past it, limit_reached
BODY_SECONDS = 30.0  # for a request's whole body to arrive, once its header has
# A request's line and headers, in bytes: h11 checks only a head that arrives in pieces
# (``h11_max_incomplete_event_size``), so one sent whole is measured here too
MAX_HEADER_BYTES = 64 * 1024
HISTORY_PATH = re.compile(rf"{PREFIX}/sessions/[^/]+/history")


class RequestGuard:
    """The token check and the request limits, before any route runs. The token is compared in
    constant time and never logged. The body is read here, up to ``max_body`` and within
    ``body_seconds``, before the app sees it: FastAPI turns an error raised while it reads a body
    into a 400, so a chunked body past the limit would not be refused as too_large there. Past
    ``max_requests`` at once a request is refused as JSON (uvicorn's own limit answers plain text,
    and counts idle connections too, so idle ones could shut everyone out).

    With no token on a loopback address (``local_only``), a request must name this computer in its
    Host header and come from no other site's web page (Origin): otherwise any web page the player
    opens could drive the server, through DNS rebinding or a plain cross-site POST.

    ``cors_origins`` (``--cors-origin``) are the web pages' origins allowed to call the server from a
    browser: their preflights (``OPTIONS`` with ``Access-Control-Request-Method``) are answered here,
    before the token is asked for (a browser sends none with a preflight), and every answer to them,
    errors included, allows that origin, so a page can read what went wrong. Every other origin is
    refused or left without CORS headers exactly as before."""

    def __init__(self, app: ASGIApp, token: str | None, max_body: int, max_requests: int = MAX_REQUESTS,
                 body_seconds: float = BODY_SECONDS) -> None:
        self.app, self.token, self.max_body = app, token, max_body
        self.max_requests, self.body_seconds = max_requests, body_seconds
        self.local_only = False  # the server sets it when it listens on a loopback address without a token
        self.cors_origins: frozenset[str] = frozenset()  # set by the server from --cors-origin
        self.active = 0  # requests being answered; only the event loop's thread touches it

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":  # no route takes one; refused before the token could be skipped
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + sum(
            len(name) + len(value) + 4 for name, value in scope.get("headers") or [])
        if head > MAX_HEADER_BYTES:
            return await _send_error(send, ServeError("bad_request", f"the request's headers are {head} bytes; at "
                                                      f"most {MAX_HEADER_BYTES} are read"))
        if self.active >= self.max_requests:
            return await _send_error(send, ServeError("limit_reached", f"the server is answering {self.max_requests} "
                                                      "requests at once, its limit; try again when one has finished"))
        self.active += 1
        try:
            await self._guarded(scope, receive, send)
        finally:
            self.active -= 1

    async def _guarded(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if b"websocket" in headers.get(b"upgrade", b"").lower():  # uvicorn without a WebSocket library passes it on
            return await _send_error(send, ServeError("bad_request", "this server speaks HTTP and server-sent events; "
                                                      "it takes no WebSocket"))
        origin = headers.get(b"origin")
        allowed = origin is not None and origin.decode("latin-1") in self.cors_origins
        if allowed:
            send = _allowing(send, origin)
            if scope.get("method") == "OPTIONS" and b"access-control-request-method" in headers:
                return await _preflight(send)
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.token.encode()):
                return await _send_error(send, ServeError("unauthorized", "give the server's token as "
                                                          "'Authorization: Bearer TOKEN'"))
        elif self.local_only:
            refused = _not_local(headers, origin_allowed=allowed)
            if refused:
                return await _send_error(send, ServeError("unauthorized", refused))
        limit = self.max_body
        if scope.get("method") == "PUT" and HISTORY_PATH.fullmatch(scope.get("path", "")):
            # what GET .../history exported must import: a history may grow past --max-body (about 400
            # turns on the sample model), up to what a history file may hold
            limit = max(limit, MAX_HISTORY_BYTES)
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await _send_error(send, self._too_large(limit))  # refused unread
        try:
            async with asyncio.timeout(self.body_seconds):
                whole = await self._body(receive, limit)
        except TimeoutError:
            whole = ServeError("bad_request", f"the request body did not arrive within {self.body_seconds:g} s")
        if whole is None:
            return  # the client went away before its body was complete: nobody to answer
        if isinstance(whole, ServeError):
            return await _send_error(send, whole)
        body: dict[str, Any] | None = {"type": "http.request", "body": whole, "more_body": False}

        async def replay() -> dict[str, Any]:
            nonlocal body
            if body is not None:
                message, body = body, None
                return message
            return await receive()  # http.disconnect, which a streaming answer listens for

        await self.app(scope, replay, send)

    async def _body(self, receive: Any, limit: int) -> bytes | ServeError | None:
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                return self._too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self, limit: int) -> ServeError:
        if limit > self.max_body:
            return ServeError("too_large", f"the history is over {limit} bytes, the most a history file holds")
        return ServeError("too_large", f"the request body is over {limit} bytes (--max-body)")


# What a page of an allowed origin may send: the token, a JSON body and a resumed stream's last id.
CORS_METHODS = b"GET, POST, PUT, PATCH, DELETE"
CORS_HEADERS = b"authorization, content-type, last-event-id"
CORS_MAX_AGE = b"600"  # seconds a browser may keep a preflight's answer


def _allowing(send: Callable[[dict[str, Any]], Awaitable[None]], origin: bytes) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """``send`` with ``origin`` allowed on the answer's head (a stream's too)."""
    async def allowing(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"access-control-allow-origin", origin),
                                               (b"access-control-expose-headers", RUN_HEADER.encode()),
                                               (b"vary", b"Origin")]}
        await send(message)

    return allowing


async def _preflight(send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    await send({"type": "http.response.start", "status": 204,
                "headers": [(b"access-control-allow-methods", CORS_METHODS),
                            (b"access-control-allow-headers", CORS_HEADERS),
                            (b"access-control-max-age", CORS_MAX_AGE), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def cors_origin(text: str) -> str:
    """``text`` as a web page's origin (``scheme://host[:port]``, lowercased, no path), as browsers
    send it in ``Origin``; ValueError saying why it is not one."""
    value = text.strip().lower().rstrip("/")
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("http", "https") or not rest or any(c in rest for c in "/?#@ *"):
        raise ValueError(f"--cors-origin {text!r} is not a web page's origin: give scheme://host[:port], such "
                         "as https://game.example or http://localhost:8080 (no path, no wildcard)")
    name, colon, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if colon and not (port.isdigit() and name):
        raise ValueError(f"--cors-origin {text!r}: the port must be a number")
    if colon and port == {"http": "80", "https": "443"}[scheme]:
        return f"{scheme}://{name}"  # a browser leaves the scheme's own port out of Origin
    return value


def _not_local(headers: dict[bytes, bytes], *, origin_allowed: bool = False) -> str:
    """Why a request to a loopback server is not from this computer's programs ("" when it is);
    ``origin_allowed``: its web page's origin is one ``--cors-origin`` allows."""
    host = headers.get(b"host")
    if host is not None and not _is_local_name(_host_name(host.decode("latin-1"))):
        return ("the request's Host header names another computer; this server answers requests to localhost "
                "or its loopback address only (listen on another --host, with a token, to be reached by name)")
    origin = headers.get(b"origin")
    if origin is not None and not origin_allowed:
        name = origin.decode("latin-1").partition("://")[2] if b"://" in origin else ""
        if not _is_local_name(_host_name(name.partition("/")[0])):
            return "requests from another site's web page are refused (its Origin is not this computer)"
    # A browser sends no Origin with a plain GET (an <img>, a <script>, a link) but says where it came
    # from: another site's page could otherwise learn which sessions exist and take observer places.
    if not origin_allowed and headers.get(b"sec-fetch-site", b"").lower() == b"cross-site":
        referer = headers.get(b"referer", b"").decode("latin-1")
        name = referer.partition("://")[2].partition("/")[0] if "://" in referer else ""
        if not (name and _is_local_name(_host_name(name))):
            return "requests from another site's web page are refused (its browser says Sec-Fetch-Site: cross-site)"
    return ""


def _host_name(authority: str) -> str:
    """The name or address of ``host[:port]`` (``[v6]:port`` too)."""
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    name, _, port = authority.rpartition(":")
    return name if name and port.isdigit() else authority


def _is_local_name(name: str) -> bool:
    name = name.lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def create_app(npcs: NPCs, token: str | None = None, previous_crash: PreviousCrash | None = None,
               shut_down: Callable[[str], None] | None = None, shutdown_seconds: float = 0.0) -> RequestGuard:
    """The app to serve: the API behind the token check and the body limit. ``previous_crash``: how the
    server before this one crashed (``GET /v1/health`` tells it). ``shut_down(why)`` stops the server
    (``POST /v1/shutdown``; None: refused, as on a server without a token)."""
    return RequestGuard(build_api(npcs, previous_crash, shut_down, shutdown_seconds), token, npcs.limits.max_body)


def openapi_schema() -> dict[str, Any]:
    """The API's OpenAPI schema (``runtime.schemas`` writes it to resources/schemas/serve-openapi.json)."""
    return build_api(None).openapi()  # type: ignore[arg-type]  # the routes never run


def build_api(npcs: NPCs, previous_crash: PreviousCrash | None = None,
              shut_down: Callable[[str], None] | None = None, shutdown_seconds: float = 0.0) -> FastAPI:
    app = FastAPI(title="Parley Studio runtime server", version=API_VERSION, openapi_url=f"{PREFIX}/openapi.json",
                  docs_url=None, redoc_url=None,
                  description="Runs Parley Studio agents for a game: NPC sessions, turns streamed as Server-Sent "
                  "Events, tool calls answered by the client. See docs/serving.md.")
    app.state.npcs = npcs
    scenes = ServedScenes(npcs) if npcs is not None else None  # None: only the schema is wanted

    @app.exception_handler(ServeError)
    async def _serve_error(_request: Request, error: ServeError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(ServeError("bad_request", _invalid_message(request, error)))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "bad_request")
        return error_response(ServeError(code, str(error.detail)))

    @app.exception_handler(Exception)
    async def _internal(_request: Request, error: Exception) -> JSONResponse:
        log.error("a request failed", exc_info=error)
        return error_response(ServeError("internal", f"the server failed ({type(error).__name__}); its log says more"))

    openai_door.register(app, npcs)

    @app.get(f"{PREFIX}/health", response_model=Health, responses=ERRORS)
    async def health() -> Health:
        return Health(backend=npcs.backend.label, sessions=len(npcs.sessions), store=npcs.store.label,
                      not_restored=npcs.not_restored, previous_crash=previous_crash)

    @app.get(f"{PREFIX}/health/live", response_model=Live, responses=ERRORS)
    async def live() -> Live:
        """The process answers (a liveness probe: restart it when this fails)."""
        return Live()

    @app.get(f"{PREFIX}/health/ready", response_model=Ready, responses=ERRORS)
    async def ready() -> Response:
        """The server takes turns: its sessions are back from the store and it is not shutting down
        (a readiness probe: send no players here while this answers 503)."""
        if npcs.closing:
            return error_response(ServeError("shutting_down", "the server is shutting down: its turns are ending"))
        return JSONResponse(Ready(sessions=len(npcs.sessions), store=npcs.store.label).model_dump())

    @app.post(f"{PREFIX}/shutdown", response_model=ShuttingDown, status_code=202, responses={403: {"model": ErrorOut},
                                                                                            **ERRORS})
    async def shutdown() -> ShuttingDown:
        """Stop the server, as SIGTERM does (for a game that cannot send a signal: on Windows, say).
        Running turns are cancelled (each session stays as it was before its turn), tool waits end,
        observers' streams close, and the process exits within ``seconds``. Needs the server's token:
        a server started without one refuses it (403 forbidden), since any program on the computer
        could send it."""
        if shut_down is None:
            raise ServeError("forbidden", "this server has no token, so it cannot be stopped by a request: start it "
                             "with a token (PARLEY_SERVE_TOKEN) and send that, or use --exit-with-parent or SIGTERM")
        shut_down("POST /v1/shutdown")
        return ShuttingDown(seconds=shutdown_seconds)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus' text format (runtime/serve/metrics.py says what is counted)."""
        return Response(npcs.metrics.text(), media_type=METRICS_CONTENT_TYPE)

    @app.get(f"{PREFIX}/assets", response_model=Assets, responses=ERRORS)
    async def assets() -> Assets:
        return Assets(assets=[AssetOut(path=name, name=path.stem) for name, path in npcs.assets()])

    @app.post(f"{PREFIX}/sessions", response_model=SessionOut, status_code=201, responses=ERRORS)
    async def create_session(body: NewSession) -> SessionOut:
        return npcs.create(body.asset, body.variables, body.id).out()

    @app.get(f"{PREFIX}/sessions", response_model=Sessions, responses=ERRORS)
    async def list_sessions() -> Sessions:
        return Sessions(sessions=[npc.out() for npc in list(npcs.sessions.values())])

    @app.get(f"{PREFIX}/sessions/{{session_id}}", response_model=SessionOut, responses=ERRORS)
    async def get_session(session_id: str) -> SessionOut:
        return npcs.get(session_id).out()

    @app.delete(f"{PREFIX}/sessions/{{session_id}}", status_code=204, responses=ERRORS)
    async def delete_session(session_id: str) -> Response:
        npcs.delete(session_id)
        return Response(status_code=204)

    @app.get(f"{PREFIX}/sessions/{{session_id}}/history", responses=ERRORS)
    async def export_history(session_id: str) -> dict[str, Any]:
        return npcs.export_history(session_id)

    @app.put(f"{PREFIX}/sessions/{{session_id}}/history", response_model=SessionOut, responses=ERRORS)
    async def import_history(session_id: str, request: Request) -> SessionOut:
        try:
            raw = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ServeError("bad_history", f"the body is not JSON: {exc}") from None
        except RecursionError:
            raise ServeError("bad_history", "the body is not a history: JSON nested too deeply") from None
        return npcs.import_history(session_id, raw).out()

    @app.patch(f"{PREFIX}/sessions/{{session_id}}/variables", response_model=SessionOut, responses=ERRORS)
    async def set_variables(session_id: str, body: VariablesIn) -> SessionOut:
        return npcs.set_variables(session_id, body.variables).out()

    @app.patch(f"{PREFIX}/sessions/{{session_id}}/params", response_model=SessionOut, responses=ERRORS)
    async def change_params(session_id: str, body: ParamsIn) -> SessionOut:
        return npcs.change_params(session_id, body.nodes).out()

    @app.post(f"{PREFIX}/sessions/{{session_id}}/rewind", response_model=SessionOut, responses=ERRORS)
    async def rewind(session_id: str, body: RewindIn) -> SessionOut:
        return npcs.rewind(session_id, body.turns).out()

    @app.post(f"{PREFIX}/sessions/{{session_id}}/turns", responses={**SSE, **ERRORS})
    async def turn(session_id: str, body: TurnIn) -> StreamingResponse:
        return _events(npcs, npcs.turn(session_id, body.line, body.instructions, body.mock_tools,
                                       cancel_on_disconnect=body.cancel_on_disconnect))

    @app.post(f"{PREFIX}/sessions/{{session_id}}/regenerate", responses={**SSE, **ERRORS})
    async def regenerate(session_id: str, body: RegenerateIn) -> StreamingResponse:
        return _events(npcs, npcs.turn(session_id, "", body.instructions, body.mock_tools, body.turn,
                                       body.cancel_on_disconnect))

    @app.get(f"{PREFIX}/sessions/{{session_id}}/runs/{{run}}/events", responses={**SSE, **ERRORS})
    async def resume(session_id: str, run: str, request: Request, after: int | None = None) -> StreamingResponse:
        """The rest of a turn's events, for a client whose stream dropped: give the id of the last event
        it got as the Last-Event-ID header (``RUN.N``; or ``?after=N``). The turn runs on whether or not
        anyone reads it. Each turn's events are kept until the session's next turn begins."""
        seen = after if after is not None else _seen(request.headers.get("last-event-id", ""), run)
        found = npcs.resume(session_id, run)
        if isinstance(found, Item):  # finished on a server that stopped since: the store kept its end
            kept = npcs.get(session_id).last_run or {}
            number = int(str(kept.get("id", "0")).rpartition(".")[2] or 0)
            frames = [_frame(found.kind, found.data, kept.get("id"))] if number > seen else []
            return StreamingResponse(iter(frames), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-store"})
        return _events(npcs, found, seen, resumed=True)

    @app.post(f"{PREFIX}/sessions/{{session_id}}/cancel", response_model=CancelOut, responses=ERRORS)
    async def cancel(session_id: str) -> CancelOut:
        return CancelOut(cancelled=npcs.cancel(session_id))

    @app.post(f"{PREFIX}/sessions/{{session_id}}/tool_results", status_code=204, responses=ERRORS)
    async def tool_result(session_id: str, body: ToolResultIn) -> Response:
        npcs.tool_result(session_id, body.call_id, body.result)
        return Response(status_code=204)

    @app.get(f"{PREFIX}/sessions/{{session_id}}/turns", response_model=TurnLines, responses=ERRORS)
    async def turns(session_id: str) -> TurnLines:
        npc = npcs.get(session_id)
        tree = npc.agent.tree
        from runtime.agent import turn_reply

        return TurnLines(turns=[TurnLine(turn_id=tid, index=i, line=tree.nodes[tid].turn.player,
                                         reply=turn_reply(npc.agent.asset, tree.nodes[tid].turn))
                                for i, tid in enumerate(tree.path())])

    @app.get(f"{PREFIX}/sessions/{{session_id}}/turns/{{turn_id}}", response_model=TurnRecord, responses=ERRORS)
    async def turn_detail(session_id: str, turn_id: int) -> TurnRecord:
        """The turn's record: its diagnostics and prompts (null and {}) only for turns this server ran
        and still keeps."""
        npc = npcs.get(session_id)
        tree = npc.agent.tree
        if turn_id not in tree.nodes:
            raise ServeError("unknown_turn", f"session {session_id!r} has no turn {turn_id}")
        from runtime.agent import turn_reply

        node = tree.nodes[turn_id]
        line, reply = node.turn.player, turn_reply(npc.agent.asset, node.turn)  # as the tree has them now
        record = npc.details.get(turn_id)
        if record is not None:
            return dataclasses.replace(record, line=line, reply=reply)
        return TurnRecord(turn_id, len(tree.path(turn_id)) - 1, line, reply)

    register_scenes(app, npcs, scenes)  # type: ignore[arg-type]  # None only for the schema

    @app.get(f"{PREFIX}/sessions/{{session_id}}/events", responses={**SSE, **ERRORS})
    async def watch(session_id: str) -> StreamingResponse:
        queue = npcs.watch(session_id)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield _frame("watching", {"session": session_id})  # subscribed: turns from now on are seen
                while True:
                    try:
                        item = await asyncio.wait_for(queue.get(), KEEP_ALIVE_SECONDS)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    if item is None:
                        return
                    yield _frame(item.kind, item.data)
            finally:
                npcs.unwatch(session_id, queue)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    return app


def register_scenes(app: FastAPI, npcs: NPCs, scenes: ServedScenes) -> None:
    """The scene routes: several NPCs in one conversation (runtime/serve/scenes.py)."""

    @app.post(f"{PREFIX}/scenes", response_model=SceneOut, status_code=201, responses=ERRORS)
    async def create_scene(body: NewScene) -> SceneOut:
        """Make a scene from a scene file (*.scene.json) in the served folders; each of its NPCs runs its own
        asset. Scenes live in memory only: a restart loses them."""
        return scenes.create(body.scene, body.id).out()

    @app.get(f"{PREFIX}/scenes", response_model=Scenes, responses=ERRORS)
    async def list_scenes() -> Scenes:
        return Scenes(scenes=[held.out() for held in list(scenes.scenes.values())])

    @app.get(f"{PREFIX}/scenes/{{scene_id}}", response_model=SceneOut, responses=ERRORS)
    async def get_scene(scene_id: str) -> SceneOut:
        return scenes.get(scene_id).out()

    @app.delete(f"{PREFIX}/scenes/{{scene_id}}", status_code=204, responses=ERRORS)
    async def delete_scene(scene_id: str) -> Response:
        scenes.delete(scene_id)
        return Response(status_code=204)

    @app.post(f"{PREFIX}/scenes/{{scene_id}}/lines", responses={**SCENE_SSE, **ERRORS})
    async def scene_line(scene_id: str, body: SceneLineIn) -> StreamingResponse:
        """The player says a line (null: nothing, and the NPCs carry on), and the NPCs the director picks
        answer: one round, streamed. A line while a round runs is busy."""
        return _events(npcs, scenes.say(scene_id, body.line, body.to, body.whisper, body.mock_tools))

    @app.post(f"{PREFIX}/scenes/{{scene_id}}/tool_results", status_code=204, responses=ERRORS)
    async def scene_tool_result(scene_id: str, body: ToolResultIn) -> Response:
        scenes.tool_result(scene_id, body.call_id, body.result)
        return Response(status_code=204)

    @app.post(f"{PREFIX}/scenes/{{scene_id}}/join", response_model=SceneOut, responses=ERRORS)
    async def join(scene_id: str, body: SceneNpcIn) -> SceneOut:
        """The NPC comes into the scene (it hears what was said before only if the scene file says so)."""
        return scenes.join(scene_id, body.npc).out()

    @app.post(f"{PREFIX}/scenes/{{scene_id}}/leave", response_model=SceneOut, responses=ERRORS)
    async def leave(scene_id: str, body: SceneNpcIn) -> SceneOut:
        """The NPC leaves: it hears nothing and says nothing until it joins again."""
        return scenes.leave(scene_id, body.npc).out()

    @app.post(f"{PREFIX}/scenes/{{scene_id}}/rewind", response_model=SceneOut, responses=ERRORS)
    async def rewind_scene(scene_id: str, body: SceneRewindIn) -> SceneOut:
        """Keep the first `rounds` rounds: every NPC's conversation, what it heard and who was there are as
        they were after them."""
        return scenes.rewind(scene_id, body.rounds).out()

    @app.post(f"{PREFIX}/scenes/{{scene_id}}/cancel", response_model=CancelOut, responses=ERRORS)
    async def cancel_scene(scene_id: str) -> CancelOut:
        return CancelOut(cancelled=scenes.cancel(scene_id))

    @app.get(f"{PREFIX}/scenes/{{scene_id}}/transcript", response_model=Transcript, responses=ERRORS)
    async def transcript(scene_id: str) -> Transcript:
        """Every line said, with who heard it; during a round, as the last finished round left it."""
        return Transcript(lines=scenes.get(scene_id).transcript())


def _invalid_message(request: Request, error: RequestValidationError) -> str:
    """What is wrong with a request, in words: where in the body, and what was expected."""
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        at = first.get("loc", ("body", 0))[-1]
        return f"the body is not JSON: {detail} (character {at})"
    content_type = request.headers.get("content-type", "")
    if first.get("loc") == ("body",) and "json" not in content_type:
        return (f"the body must be a JSON object sent as Content-Type: application/json (it came as "
                f"{content_type[:80] or 'no content type'})")
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))


def _frame(kind: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


def _seen(last_event_id: str, run: str) -> int:
    """How many of run ``run``'s events a client has, from its Last-Event-ID (``RUN.N``)."""
    head, _, number = last_event_id.strip().rpartition(".")
    if not last_event_id.strip():
        return 0
    if head != run or not number.isdigit():
        raise ServeError("bad_request", f"Last-Event-ID: {last_event_id[:80]!r} is not an event of run {run[:40]!r} "
                         "(ids are RUN.N)")
    return int(number)


def _events(npcs: NPCs, stream: Stream, after: int = 0, resumed: bool = False) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        finished = False
        number = after
        try:
            async for got in stream.follow(after, KEEP_ALIVE_SECONDS):
                if got is None:
                    yield b": keep-alive\n\n"
                    continue
                number, item = got
                # The client may close as soon as it has the turn's last event: that is not a disconnect
                # mid-turn (it was logged as one, for the finished turn, whenever the close came first).
                finished = item.kind in ("turn_finished", "turn_failed")
                yield _frame(item.kind, item.data, stream.event_id(number))
            finished = True
        finally:
            if not finished:
                about = {"session": stream.session, "turn": stream.turn}
                if stream.cancel_on_disconnect and not resumed:
                    log.info("the client disconnected mid-turn (run %s, after event %d): the turn is cancelled, as it "
                             "asked (cancel_on_disconnect)", stream.run, number, extra=about)
                    npcs.stop(stream.running)
                else:
                    log.info("the client disconnected mid-turn (run %s, after event %d): the turn goes on, to be "
                             "resumed from Last-Event-ID %s", stream.run, number, stream.event_id(number), extra=about)

    # The run in the answer's head: a client whose stream breaks before its first event arrives (a
    # browser drops the last bytes of a chunked body cut short) still knows what to resume.
    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", RUN_HEADER: stream.run})
