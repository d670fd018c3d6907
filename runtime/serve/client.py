"""A small typed Python client of ``parley serve`` (httpx, and httpx-sse for the event streams).

    client = ParleyClient("http://127.0.0.1:8765")
    npc = client.create_session("tool_calling.json")
    outcome = client.turn(npc.id, "How many arrows are there?", tools=lambda call: "240")
    print(outcome.reply)

Every error the server answers is raised as ``ParleyError`` with its ``code`` (``unknown_session``,
``busy``, ...); a turn that fails raises ``TurnFailed`` (a ``ParleyError``) with the code its
``turn_failed`` event gave (``cancelled``, ``tool_timeout``, ...). One client may be used from
several threads: each turn's stream has a connection of its own.

A turn's stream that breaks (a dropped connection, a server behind a load balancer that died) is
resumed by itself: the client asks for the rest of the turn's events after the last one it got
(``Last-Event-ID``), a few times over a few seconds, and no event is given twice. What a failure to
reach the server is called (docs/serving.md, *Clients*, has the rule for all three clients):

- ``unavailable``: no connection could be made for the request (refused, no such host, connecting
  timed out), and nothing of it had been answered. Nothing reached the server; send it again later.
- ``server_gone``: the server had been answering (the turn's stream was open, or the request's
  connection was made) and went away, and reconnecting failed: every try to resume the turn got no
  answer at all. A turn raises ``TurnFailed`` with the player's line handed back (``TurnFailed.line``).
- ``turn_lost``: a server answers, but none has the turn (``unknown_run``: the one running it stopped
  before the turn finished), or a balancer answered 502/503/504. The line is handed back too.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import httpx
from httpx_sse import SSEError, connect_sse

from runtime.agent import TurnGuard
from runtime.diagnostics import TurnDiagnostics
from runtime.serve.protocol import (
    PREFIX,
    RUN_HEADER,
    AssetOut,
    Health,
    ProblemOut,
    RoundOut,
    SceneLineOut,
    SceneOut,
    SessionOut,
    SpokenTurnOut,
    TurnLine,
)
from runtime.session.failures import Failure
from runtime.session.record import HoldsRecord, TurnRecord

DEFAULT_TIMEOUT = 30.0  # seconds to connect and between bytes of an answer (a stream sends keep-alives)
RESUME_WAITS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0)  # seconds before each try to resume a broken stream
FINAL = ("turn_finished", "turn_failed")
# No connection was made, so nothing was sent: the server was never reached (``unavailable``). Any other
# transport error broke a connection that had been made (``server_gone`` once reconnecting fails too).
NOT_CONNECTED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
NO_ANSWER = ("unavailable", "server_gone")  # the codes of a request no server answered
RESENDABLE = ("GET", "PUT", "DELETE")  # sent twice, they do what they did once


class ParleyError(Exception):
    """An error the server answered, or none did: ``unavailable`` (never reached) or ``server_gone``
    (it went away while the request was under way)."""

    def __init__(self, code: str, message: str, status: int = 0, problems: list[ProblemOut] | None = None) -> None:
        self.code, self.message, self.status = code, message, status
        self.problems = problems or []
        super().__init__(f"{code}: {message}")


class TurnFailed(ParleyError):
    """A turn ended with ``turn_failed``; the session is as it was before it. ``node`` and ``field``
    name where it failed, when the server said."""

    def __init__(self, code: str, message: str, node: str = "", field: str = "", model: str = "",
                 line: str = "") -> None:
        super().__init__(code, message)
        self.node, self.field, self.model = node, field, model  # model: the name model_missing could not find
        self.line = line  # the player's line, handed back: the game may offer it again


class RoundFailed(TurnFailed):
    """A scene's round ended with ``round_failed``; the scene is as it was before it. ``speaker``: the
    NPC that was speaking ('' when none had begun); ``line``: the player's, '' when it said nothing."""

    def __init__(self, code: str, message: str, node: str = "", field: str = "", model: str = "",
                 line: str | None = None, speaker: str = "") -> None:
        super().__init__(code, message, node, field, model, line or "")
        self.speaker = speaker


@dataclass(frozen=True)
class ServerEvent:
    # turn_started, node_started, token, speak, tool_request, tool_call, summarized, guarded, game_event, ...;
    # a kind this client does not know (a newer server's) is passed on all the same
    kind: str
    data: dict[str, Any]

    @property
    def is_reply(self) -> bool:
        """A token or speak of the reply the player sees, not an inner node's (a Tool Call's JSON, a
        classifier's label): the only text a game shows as it streams."""
        return self.kind in ("token", "speak") and self.data.get("reply") is True

    @property
    def tags(self) -> dict[str, str]:
        """A ``speak`` event's tags: the reply's tags as this sentence is spoken, name -> value (its
        Generate and Speak node's own tag and the ``reply_tags`` earlier nodes wrote); ``{}`` for other
        kinds and from a server that sends none."""
        tags = self.data.get("tags") if self.kind == "speak" else None
        return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


@dataclass(frozen=True)
class ToolRequest:
    """A Tool Call node asks the game for a tool's result."""

    session: str
    node: str
    tool: str
    arguments: dict[str, Any]
    call_id: str
    speaker: str = ""  # in a scene: the NPC whose node asks (``session`` is then the scene's id)


@dataclass
class TurnEnd(HoldsRecord):
    """A finished turn: its record (what ``turn_finished`` says) and every event its stream sent."""

    record: TurnRecord
    events: list[ServerEvent] = field(default_factory=list)

    @property
    def turn(self) -> int:
        return self.record.index

    @property
    def turn_id(self) -> int:
        return self.record.turn_id

    @property
    def diagnostics(self) -> TurnDiagnostics | None:
        return self.record.diagnostics

    @property
    def guard(self) -> TurnGuard:
        """The first policy a Guard node found broken and the exit it took (``policy`` '' when none did);
        each guard that fired is also a ``guarded`` event."""
        return self.record.guard

    @property
    def game_events(self) -> list[str]:
        """The game events (the asset's ``game_events``) the turn reached, by name, in order."""
        return self.record.game_events

    @property
    def tags(self) -> dict[str, str]:
        """The reply's tags (a mood, a gesture): name -> value, the asset's ``reply_tags`` its nodes wrote
        and the tags its Generate and Speak nodes picked."""
        return self.record.tags


@dataclass
class RoundEnd:
    """A scene's finished round (what ``round_finished`` says) and every event its stream sent."""

    round: int
    speakers: list[str]  # the NPCs that spoke, in order
    lines: list[SceneLineOut]  # every line said, the player's first
    turns: list[SpokenTurnOut]  # each NPC's turn: what it heard, its reply, guard, game events, tags
    events: list[ServerEvent] = field(default_factory=list)


ToolFunction = Callable[[ToolRequest], str]
EventFunction = Callable[[ServerEvent], None]


class Watch:
    """An observer's stream of a session's events; iterate it, and ``close`` it (from any thread) to stop."""

    def __init__(self, client: ParleyClient, session_id: str) -> None:
        self._client = client
        self._session = session_id
        self._response: httpx.Response | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[ServerEvent]:
        with connect_sse(self._client.http, "GET", f"{PREFIX}/sessions/{self._session}/events",
                         timeout=httpx.Timeout(DEFAULT_TIMEOUT, read=None)) as source:
            _raise_for(source.response)
            with self._lock:
                self._response = source.response
            if self._closed.is_set():
                return
            try:
                for sse in source.iter_sse():
                    yield ServerEvent(sse.event, json.loads(sse.data) if sse.data else {})
            except (httpx.HTTPError, SSEError):
                if not self._closed.is_set():
                    raise
            except RuntimeError:  # the response was closed from another thread while read
                if not self._closed.is_set():
                    raise

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            response = self._response
        if response is not None:
            # Closing an httpx response does not wake a read blocked in another thread; shutting the
            # socket down does (the iterator then ends).
            network = response.extensions.get("network_stream")
            sock = network.get_extra_info("socket") if network is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class ParleyClient:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.BaseTransport | None = None, resume_waits: tuple[float, ...] = RESUME_WAITS) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)
        self.resume_waits = resume_waits  # () never resumes: a broken stream raises server_gone
        self.resumes = 0  # broken streams this client asked to resume (each try counts)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- plain requests -----------------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        reached = False
        for attempt in (1, 2):
            try:
                response = self.http.request(method, PREFIX + path, json=body)
                break
            except NOT_CONNECTED as exc:
                if not reached:
                    raise ParleyError("unavailable", f"could not connect to {self.http.base_url}: {exc}") from None
                raise ParleyError("server_gone", f"{method} {path}: its connection broke, and reconnecting to "
                                  f"{self.http.base_url} failed ({exc})") from None
            except httpx.HTTPError as exc:
                # The connection was made and broke before the answer. A GET, PUT or DELETE is sent once
                # more (the first may have gone out on a kept-alive connection the server had just closed);
                # whether a POST or PATCH was done is unknown, so it is never sent twice.
                reached = True
                if method not in RESENDABLE or attempt == 2:
                    raise ParleyError("server_gone", f"{method} {path}: the connection to {self.http.base_url} broke "
                                      f"before the answer ({exc or type(exc).__name__}); whether it was done is "
                                      "unknown") from None
        _raise_for(response)
        return response.json() if response.content else None

    def health(self) -> Health:
        return Health(**self._call("GET", "/health"))

    def shutdown(self) -> float:
        """Stop the server (a game that cannot send SIGTERM): its turns are cancelled, their sessions
        kept as before them; it exits within the seconds returned. Needs the server's token."""
        return float(self._call("POST", "/shutdown")["seconds"])

    def assets(self) -> list[AssetOut]:
        return [AssetOut(**a) for a in self._call("GET", "/assets")["assets"]]

    def create_session(self, asset: str, variables: dict[str, Any] | None = None, id: str | None = None) -> SessionOut:
        body: dict[str, Any] = {"asset": asset, "variables": variables or {}}
        if id is not None:
            body["id"] = id
        return SessionOut(**self._call("POST", "/sessions", body))

    def sessions(self) -> list[SessionOut]:
        return [SessionOut(**s) for s in self._call("GET", "/sessions")["sessions"]]

    def session(self, session_id: str) -> SessionOut:
        return SessionOut(**self._call("GET", f"/sessions/{session_id}"))

    def delete_session(self, session_id: str) -> None:
        self._call("DELETE", f"/sessions/{session_id}")

    def export_history(self, session_id: str) -> dict[str, Any]:
        """The session's dialog history, as ``parley chat --history-out`` writes it."""
        return self._call("GET", f"/sessions/{session_id}/history")

    def import_history(self, session_id: str, history: dict[str, Any]) -> SessionOut:
        return SessionOut(**self._call("PUT", f"/sessions/{session_id}/history", history))

    def set_variables(self, session_id: str, variables: dict[str, Any]) -> SessionOut:
        return SessionOut(**self._call("PATCH", f"/sessions/{session_id}/variables", {"variables": variables}))

    def change_params(self, session_id: str, nodes: dict[str, dict[str, Any]]) -> SessionOut:
        """Change nodes' system prompts and sampling (``{"reply": {"temperature": 0.3}}``)."""
        return SessionOut(**self._call("PATCH", f"/sessions/{session_id}/params", {"nodes": nodes}))

    def rewind(self, session_id: str, turns: int) -> SessionOut:
        return SessionOut(**self._call("POST", f"/sessions/{session_id}/rewind", {"turns": turns}))

    def cancel(self, session_id: str) -> bool:
        return bool(self._call("POST", f"/sessions/{session_id}/cancel")["cancelled"])

    def tool_result(self, session_id: str, call_id: str, result: str) -> None:
        self._call("POST", f"/sessions/{session_id}/tool_results", {"call_id": call_id, "result": result})

    def turns(self, session_id: str) -> list[TurnLine]:
        return [TurnLine(**t) for t in self._call("GET", f"/sessions/{session_id}/turns")["turns"]]

    def turn_detail(self, session_id: str, turn_id: int) -> TurnRecord:
        raw = self._call("GET", f"/sessions/{session_id}/turns/{turn_id}")
        try:
            return TurnRecord.from_json(raw)
        except ValueError as exc:
            raise ParleyError("bad_answer", f"turn {turn_id}'s record did not fit: {exc}") from None

    # --- turns --------------------------------------------------------------------------------

    def stream_turn(self, session_id: str, line: str, instructions: str = "", tools: ToolFunction | None = None,
                    mock_tools: bool = False, cancel_on_disconnect: bool = False) -> Iterator[ServerEvent]:
        """The turn's events as they come; tool requests are answered with ``tools`` when given.
        ``cancel_on_disconnect``: a broken stream cancels the turn (and is not resumed)."""
        body = {"line": line, "instructions": instructions, "mock_tools": mock_tools,
                "cancel_on_disconnect": cancel_on_disconnect}
        return self._stream(session_id, "turns", body, tools)

    def turn(self, session_id: str, line: str, instructions: str = "", tools: ToolFunction | None = None,
             on_event: EventFunction | None = None, mock_tools: bool = False,
             cancel_on_disconnect: bool = False) -> TurnEnd:
        """Run a turn to its end. Raises ``TurnFailed`` when it fails (the session is as it was, or,
        for ``interrupted``, has the line with the reply cut off)."""
        events = self.stream_turn(session_id, line, instructions, tools, mock_tools, cancel_on_disconnect)
        return _outcome(events, on_event)

    def regenerate(self, session_id: str, turn: int, tools: ToolFunction | None = None,
                   on_event: EventFunction | None = None, mock_tools: bool = False) -> TurnEnd:
        """Run turn ``turn`` again with its line: a new alternative; later turns stay on the old branch."""
        events = self._stream(session_id, "regenerate", {"turn": turn, "mock_tools": mock_tools}, tools)
        return _outcome(events, on_event)

    def watch(self, session_id: str) -> Watch:
        """Every event of every turn ``session_id`` runs from now on (an observer's view)."""
        return Watch(self, session_id)

    def _stream(self, session_id: str, route: str, body: dict[str, Any], tools: ToolFunction | None
                ) -> Iterator[ServerEvent]:
        line, run, last_id = str(body.get("line", "")), "", ""
        unanswered: tuple[str, str] | None = None  # a tool result the break kept from the server
        no_resume = bool(body.get("cancel_on_disconnect"))
        resumable = () if no_resume else self.resume_waits
        waits, progressed = iter(resumable), False
        reached = False  # a connection of this turn was made: the server had been there
        request: dict[str, Any] = {"method": "POST", "url": f"{PREFIX}/sessions/{session_id}/{route}", "json": body}
        while True:
            answered = False  # this try got an HTTP answer (which said no): a server is there
            try:
                with connect_sse(self.http, **request) as source:
                    reached = True
                    _raise_for(source.response)
                    run = run or source.response.headers.get(RUN_HEADER, "")  # known before any event arrives
                    if unanswered is not None:
                        self._answer(session_id, *unanswered)
                        unanswered = None
                    for sse in source.iter_sse():
                        last_id = sse.id or last_id
                        event = ServerEvent(sse.event, json.loads(sse.data) if sse.data else {})
                        progressed = True
                        run = str(event.data.get("run") or run) if event.kind in ("turn_queued", "turn_started") else run
                        line = str(event.data.get("line", line)) if event.kind == "turn_started" else line
                        yield event
                        if event.kind in FINAL:
                            return
                        if event.kind == "tool_request" and tools is not None:
                            d = event.data
                            result = str(tools(ToolRequest(session_id, d["node"], d["tool"], d["arguments"],
                                                           d["call_id"])))
                            unanswered = (d["call_id"], result)
                            self._answer(session_id, *unanswered)
                            unanswered = None
                broke = "the stream ended before the turn did"
            except httpx.HTTPError as exc:
                reached = reached or not isinstance(exc, NOT_CONNECTED)
                broke = str(exc) or type(exc).__name__
            except ParleyError as exc:
                if exc.code in NO_ANSWER:  # a tool result's POST reached no server: the stream breaks with it
                    broke = exc.message
                elif request["method"] == "POST" and exc.code == "http_error" and exc.status in (502, 503, 504):
                    # a balancer's answer: the server it chose died before the turn's stream began
                    raise TurnFailed("turn_lost", f"no server answered the turn (HTTP {exc.status} from the "
                                     "balancer in front): say the line again", line=line) from None
                elif request["method"] == "POST":
                    raise  # refused: the turn never began
                elif exc.code == "unknown_run":
                    raise TurnFailed("turn_lost", "the server running the turn stopped before the turn finished, so "
                                     "nothing of it was kept: say the line again", line=line) from None
                else:
                    answered, broke = True, exc.message
            if progressed:  # events came since the last break: its tries start again
                waits, progressed = iter(resumable), False
            wait = next(waits, None)
            if not run or wait is None:
                raise self._unresumed(session_id, line, run, broke, reached, answered, no_resume)
            time.sleep(wait)  # a moment for the server, or the balancer's next one, before asking again
            self.resumes += 1
            request = {"method": "GET", "url": f"{PREFIX}/sessions/{session_id}/runs/{run}/events",
                       "headers": {"Last-Event-ID": last_id} if last_id else {}}

    # --- scenes -------------------------------------------------------------------------------

    def create_scene(self, scene: str, id: str | None = None) -> SceneOut:
        """A scene from a scene file in the served folders (``scenes/tavern.scene.json``)."""
        body: dict[str, Any] = {"scene": scene}
        if id is not None:
            body["id"] = id
        return SceneOut(**self._call("POST", "/scenes", body))

    def scenes(self) -> list[SceneOut]:
        return [SceneOut(**s) for s in self._call("GET", "/scenes")["scenes"]]

    def scene(self, scene_id: str) -> SceneOut:
        return SceneOut(**self._call("GET", f"/scenes/{scene_id}"))

    def delete_scene(self, scene_id: str) -> None:
        self._call("DELETE", f"/scenes/{scene_id}")

    def join(self, scene_id: str, npc: str) -> SceneOut:
        return SceneOut(**self._call("POST", f"/scenes/{scene_id}/join", {"npc": npc}))

    def leave(self, scene_id: str, npc: str) -> SceneOut:
        return SceneOut(**self._call("POST", f"/scenes/{scene_id}/leave", {"npc": npc}))

    def rewind_scene(self, scene_id: str, rounds: int) -> SceneOut:
        """Keep the scene's first ``rounds`` rounds."""
        return SceneOut(**self._call("POST", f"/scenes/{scene_id}/rewind", {"rounds": rounds}))

    def cancel_scene(self, scene_id: str) -> bool:
        return bool(self._call("POST", f"/scenes/{scene_id}/cancel")["cancelled"])

    def scene_tool_result(self, scene_id: str, call_id: str, result: str) -> None:
        self._call("POST", f"/scenes/{scene_id}/tool_results", {"call_id": call_id, "result": result})

    def transcript(self, scene_id: str) -> list[SceneLineOut]:
        return [SceneLineOut(**line) for line in self._call("GET", f"/scenes/{scene_id}/transcript")["lines"]]

    def stream_scene_line(self, scene_id: str, line: str | None, to: str = "", whisper: bool = False,
                          tools: ToolFunction | None = None, mock_tools: bool = False) -> Iterator[ServerEvent]:
        """A round's events as they come; tool requests are answered with ``tools`` when given. The
        stream is not resumed when it breaks: the server cancels the round (``stream_ended``)."""
        body = {"line": line, "to": to, "whisper": whisper, "mock_tools": mock_tools}
        try:
            with connect_sse(self.http, "POST", f"{PREFIX}/scenes/{scene_id}/lines", json=body) as source:
                _raise_for(source.response)
                for sse in source.iter_sse():
                    event = ServerEvent(sse.event, json.loads(sse.data) if sse.data else {})
                    yield event
                    if event.kind in ("round_finished", "round_failed"):
                        return
                    if event.kind == "tool_request" and tools is not None:
                        d = event.data
                        result = str(tools(ToolRequest(scene_id, d["node"], d["tool"], d["arguments"], d["call_id"],
                                                       str(d.get("speaker", "")))))
                        try:
                            self.scene_tool_result(scene_id, d["call_id"], result)
                        except ParleyError as exc:
                            if exc.code != "unknown_call":  # the round stopped waiting meanwhile (cancelled)
                                raise
            broke = "the stream ended before the round did"
        except NOT_CONNECTED as exc:
            raise ParleyError("unavailable", f"could not connect to {self.http.base_url}: {exc}") from None
        except httpx.HTTPError as exc:
            broke = str(exc) or type(exc).__name__
        except ParleyError as exc:
            if exc.code not in NO_ANSWER:  # refused: the round never began
                raise
            broke = exc.message  # a tool result's POST reached no server
        try:
            self.scene(scene_id)  # is the server still there?
        except ParleyError as exc:
            if exc.code in NO_ANSWER:
                raise RoundFailed("server_gone", f"the server went away: the round's stream broke ({broke}), and "
                                  f"reconnecting failed ({exc.message}); say the line again when it is back",
                                  line=line) from None
        raise RoundFailed("stream_ended", f"the round's stream broke ({broke}), so the server cancelled the round: "
                          "say the line again", line=line)

    def scene_line(self, scene_id: str, line: str | None, to: str = "", whisper: bool = False,
                   tools: ToolFunction | None = None, on_event: EventFunction | None = None,
                   mock_tools: bool = False) -> RoundEnd:
        """The player says ``line`` in the scene (None: nothing, and the NPCs carry on), to ``to`` (an NPC's
        id, or '' for the director to pick), whispered to it when ``whisper``; runs the round to its end.
        Raises ``RoundFailed`` (a ``TurnFailed``) when it fails: the scene is then as it was."""
        seen: list[ServerEvent] = []
        for event in self.stream_scene_line(scene_id, line, to, whisper, tools, mock_tools):
            seen.append(event)
            if on_event is not None:
                on_event(event)
            if event.kind == "round_finished":
                try:
                    done = RoundOut(**event.data)
                except ValueError as exc:
                    raise ParleyError("bad_answer", f"round_finished did not fit: {exc}") from None
                return RoundEnd(done.round, done.speakers, done.lines, done.turns, seen)
            if event.kind == "round_failed":
                e = Failure.from_json(event.data["error"])
                raise RoundFailed(e.code, e.message, e.node, e.field, e.model, event.data.get("line"),
                                  str(event.data.get("speaker", "")))
        raise ParleyError("truncated", "the round's stream ended before round_finished or round_failed")

    def _unresumed(self, session_id: str, line: str, run: str, broke: str, reached: bool, answered: bool,
                   no_resume: bool) -> ParleyError:
        """Why a turn whose stream broke ends here (its tries used up, or nothing to resume)."""
        if not reached:
            return ParleyError("unavailable", f"could not connect to {self.http.base_url}: {broke}")
        if no_resume:  # cancel_on_disconnect: the server cancels the turn, as the stream asked
            return TurnFailed("stream_ended", f"the turn's stream broke ({broke}), so the server cancelled the turn: "
                              "say the line again", line=line)
        if not run:
            # It broke before an event named its run: nothing to resume, and the turn may run on unseen.
            # Asking the server to cancel it is the reconnect that tells a server that is gone.
            try:
                self.cancel(session_id)
            except ParleyError as exc:
                if exc.code in NO_ANSWER:
                    return _gone(f"the turn's stream broke ({broke}), and reconnecting failed ({exc.message})",
                                 line)
            return TurnFailed("stream_ended", f"the turn's stream broke before it named its run ({broke}), so it "
                              "was cancelled: say the line again", line=line)
        if answered:  # a server (a balancer's next one) answers, but no server gives the turn
            return TurnFailed("turn_lost", f"the turn's stream broke and could not be resumed ({broke}): say "
                              "the line again", line=line)
        return _gone(f"the turn's stream broke, and no try to resume it reached the server ({broke})", line)

    def _answer(self, session_id: str, call_id: str, result: str) -> None:
        try:
            self.tool_result(session_id, call_id, result)
        except ParleyError as exc:
            if exc.code != "unknown_call":  # the turn stopped waiting meanwhile (cancelled)
                raise


def _gone(why: str, line: str) -> TurnFailed:
    """A turn's ``server_gone``: the server was reached, then went away, and reconnecting failed."""
    return TurnFailed("server_gone", f"the server went away: {why}; say the line again when it is back", line=line)


def _outcome(events: Iterator[ServerEvent], on_event: EventFunction | None) -> TurnEnd:
    seen: list[ServerEvent] = []
    for event in events:
        seen.append(event)
        if on_event is not None:
            on_event(event)
        if event.kind == "turn_finished":
            try:
                return TurnEnd(TurnRecord.from_json(event.data), seen)
            except ValueError as exc:
                raise ParleyError("bad_answer", f"turn_finished did not fit: {exc}") from None
        if event.kind == "turn_failed":
            e = Failure.from_json(event.data["error"])
            raise TurnFailed(e.code, e.message, e.node, e.field, e.model, str(event.data.get("line", "")))
    raise ParleyError("truncated", "the turn's stream ended before turn_finished or turn_failed")


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    response.read()
    try:
        error = response.json()["error"]
        raise ParleyError(error["code"], error["message"], response.status_code,
                          [ProblemOut(**p) for p in error.get("problems", [])])
    except (ValueError, KeyError, TypeError):
        raise ParleyError("http_error", f"HTTP {response.status_code}: {response.text[:200]}",
                          response.status_code) from None
