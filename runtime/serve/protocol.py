"""The wire protocol of ``parley serve``, version 1: what each route takes and answers, the events a
turn streams, and the typed errors. Everything here is JSON; no answer ever holds a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, fields, is_dataclass
from typing import Annotated, Any, Literal, get_origin, get_type_hints

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from runtime.events import (
    Event,
    GameEventReached,
    Guarded,
    NodeEvent,
    NodeFinished,
    NodeStarted,
    ReplyTagged,
    Speak,
    Summarized,
    Token,
    ToolCalled,
    TurnWarning,
)
from runtime.names import SURROGATE
from runtime.session.failures import FAILURE_CODES
from runtime.session.record import TurnRecord

API_VERSION = "1"
PREFIX = "/v1"
# A session's or scene's id: a path segment every client can reach, so never "." or ".." (URLs
# resolve those away before a request is sent)
SESSION_ID = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9_.-]{1,64}")
SESSION_ID_RULE = "1 to 64 letters, digits, '_', '.' or '-', other than '.' and '..'"
CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

# code -> HTTP status. A client dispatches on the code, never on the message.
ERROR_STATUS: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "unknown_session": 404,
    "unknown_turn": 404,
    "unknown_call": 404,
    "unknown_node": 404,
    "unknown_asset": 404,
    "unknown_run": 404,
    "unknown_scene": 404,
    "unknown_npc": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "busy": 409,
    "structural_change": 409,
    "exists": 409,
    "store_conflict": 409,
    "too_large": 413,
    "turn_failed": 422,  # a turn answered whole (the OpenAI-compatible door) that failed: its message says why
    "bad_asset": 422,
    "bad_history": 422,
    "bad_scene": 422,
    "limit_reached": 429,
    "internal": 500,
    "store_error": 503,
    "shutting_down": 503,
}
# What ends a failed turn's stream (``turn_failed``'s code): the session's failure table.
TURN_FAILURES = tuple(FAILURE_CODES)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProblemOut(BaseModel):
    severity: str
    message: str
    file: str = ""
    node_id: str = ""
    field: str = ""
    line: int = 0
    column: int = 0


class ErrorBody(BaseModel):
    code: str = Field(description="What went wrong, for a program: " + ", ".join(ERROR_STATUS))
    message: str
    problems: list[ProblemOut] = Field(default_factory=list)


class ErrorOut(BaseModel):
    error: ErrorBody


class ServeError(Exception):
    """An error answered as ``ErrorOut`` with ``code``'s HTTP status."""

    def __init__(self, code: str, message: str, problems: list[Any] | None = None) -> None:
        assert code in ERROR_STATUS, code
        self.code, self.message = code, message
        self.problems = [p if isinstance(p, ProblemOut) else ProblemOut(**asdict(p)) for p in problems or []]
        super().__init__(f"{code}: {message}")

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

    def body(self) -> dict[str, Any]:
        return ErrorOut(error=ErrorBody(code=self.code, message=self.message, problems=self.problems)).model_dump()


# --- requests -----------------------------------------------------------------------------------

def whole_characters(text: str) -> str:
    """``text``, if it holds no lone surrogate (JSON's ``\\ud800`` reads as one): such a line could be
    neither written to the history nor sent back as UTF-8."""
    lone = SURROGATE.search(text)
    if lone is not None:
        raise ValueError(f"a lone surrogate (U+{ord(lone.group()):04X}) at character {lone.start()}: send text as "
                         "UTF-8, or a character outside the BMP as a whole \\u escape pair")
    return text


# What a player says, or a game writes, that goes into a conversation
Text = Annotated[str, AfterValidator(whole_characters)]


def _whole_variables(variables: dict[str, Any]) -> dict[str, Any]:
    """Variables whose names and texts hold no lone surrogate (a history could not be written with them,
    nor the session listed)."""
    for name, value in variables.items():
        try:
            whole_characters(name)
            if isinstance(value, str):
                whole_characters(value)
        except ValueError as exc:
            raise ValueError(f"{name.encode('utf-8', 'backslashreplace').decode()}: {exc}") from None
    return variables

# A finite number: NaN and infinities (which Python's json reads) would export a history its import refuses.
Variable = str | int | Annotated[float, Field(allow_inf_nan=False)] | bool


class NewSession(_Request):
    asset: str = Field(description="The asset's path relative to one of the server's --assets folders.")
    variables: dict[str, Variable] = Field(default_factory=dict, description="Agent variables to start with.")

    @field_validator("variables")
    @classmethod
    def _whole(cls, variables: dict[str, Any]) -> dict[str, Any]:
        return _whole_variables(variables)
    id: str | None = Field(None, description="The session's id (letters, digits, _ . -; up to 64); the server "
                           "makes one when it is left out.")


class TurnIn(_Request):
    line: Text = Field(description="What the player said.")
    instructions: Text = Field("", description="This turn's instructions ({{instructions}} in templates).")
    mock_tools: bool = Field(False, description="Answer tools that have a mock_result with it; by default the "
                             "client answers every tool call (tool_request events).")
    cancel_on_disconnect: bool = Field(False, description="Cancel the turn when this request's stream closes. By "
                                       "default the turn runs on, and a client that reconnects to GET /v1/sessions/"
                                       "{id}/runs/{run}/events with Last-Event-ID gets the rest of its events.")


class RegenerateIn(_Request):
    turn: int = Field(ge=0, description="The turn to run again (turns count from 0); later turns stay on the old branch.")
    instructions: Text = ""
    mock_tools: bool = False
    cancel_on_disconnect: bool = False


class ToolResultIn(_Request):
    call_id: str
    result: Text


class NewScene(_Request):
    scene: str = Field(description="The scene file's path (*.scene.json) relative to one of the server's --assets "
                       "folders; its NPCs' assets must be inside them too.")
    id: str | None = Field(None, description="The scene's id (letters, digits, _ . -; up to 64); the server makes "
                           "one when it is left out.")


class SceneLineIn(_Request):
    line: Text | None = Field(description="What the player says; null: nothing, and the NPCs carry on among "
                              "themselves.")
    to: str = Field("", description="The NPC (its id in the scene) the player speaks to: the director's "
                    "'addressed' rule picks it first. Empty: the director decides.")
    whisper: bool = Field(False, description="Only `to` hears the line.")
    mock_tools: bool = Field(False, description="Answer tools that have a mock_result with it; by default the "
                             "client answers every tool call (tool_request events).")


class SceneNpcIn(_Request):
    npc: str = Field(description="The NPC's id in the scene.")


class SceneRewindIn(_Request):
    rounds: int = Field(ge=0, description="How many rounds to keep (the rounds after them are taken back).")


class VariablesIn(_Request):
    variables: dict[str, Variable]

    @field_validator("variables")
    @classmethod
    def _whole(cls, variables: dict[str, Any]) -> dict[str, Any]:
        return _whole_variables(variables)


class ParamsIn(_Request):
    nodes: dict[str, dict[str, Any]] = Field(description="node id -> parameters to change: system_prompt, min_p, repeat_penalty, "
                                             "temperature, top_p, seed, max_tokens.")

    @field_validator("nodes")
    @classmethod
    def _whole_texts(cls, nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for node, changes in nodes.items():
            whole_characters(node)
            for name, value in changes.items():
                whole_characters(name)
                if isinstance(value, str):
                    try:
                        whole_characters(value)
                    except ValueError as exc:
                        raise ValueError(f"{node}.{name}: {exc}") from None
        return nodes


class RewindIn(_Request):
    turns: int = Field(ge=0, description="How many turns of the current branch to keep.")


# --- answers ------------------------------------------------------------------------------------


class PreviousCrash(BaseModel):
    """How an earlier server on the same state folder ended when it did not shut down (its whole report,
    every thread's stack, is in this server's log)."""

    summary: str = Field(description="In a sentence: \"crashed (Segmentation fault) in llama.cpp (runtime/backends/"
                         "llama.py, line 696, in _decode) while node `reply` ran turn 3 of session npc-1 (chat.json) "
                         "on SmolLM2-135M-Instruct.Q4_1.gguf\".")
    signal: str = Field(description="The fatal signal as Python named it (\"Segmentation fault\"); empty when the "
                        "server ended without one (killed).")
    where: str = Field(description="The crashing thread's innermost Python frame; empty when not known.")
    running: list[str] = Field(description="What ran then: one entry per turn in flight, naming its node and model.")
    when: str = Field(description="When it crashed, in UTC (ISO 8601).")
    pid: int = Field(description="The crashed server's process id.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    api: str = API_VERSION
    backend: str
    sessions: int
    store: str = Field("none", description="Where sessions are kept across restarts (--store): none, "
                       "sqlite:PATH, or postgresql://USER@HOST:PORT/DB (never a password)")
    not_restored: dict[str, str] = Field(default_factory=dict, description="Sessions the store holds that this "
                                         "server could not serve again (id -> why): as it started, or, with a "
                                         "shared store, as one was asked for; they stay in the store.")
    previous_crash: PreviousCrash | None = Field(None, description="The latest crash of an earlier server on this "
                                                 "server's state folder (--state-dir), found as it started; null "
                                                 "when there was none.")


class Live(BaseModel):
    status: Literal["ok"] = "ok"


class ShuttingDown(BaseModel):
    status: Literal["shutting_down"] = "shutting_down"
    seconds: float = Field(description="The process is gone within this many seconds (its turns cancelled first)")


class Ready(BaseModel):
    status: Literal["ready"] = "ready"
    sessions: int
    store: str


class AssetOut(BaseModel):
    path: str
    name: str


class Assets(BaseModel):
    assets: list[AssetOut]


class SessionOut(BaseModel):
    id: str
    asset: str
    asset_name: str
    turns: int = Field(description="Turns on the current branch.")
    busy: bool = Field(description="A turn is running.")
    variables: dict[str, Variable]
    backend: str


class Sessions(BaseModel):
    sessions: list[SessionOut]


class CancelOut(BaseModel):
    cancelled: bool = Field(description="False: no turn was running.")


class TurnLine(BaseModel):
    turn_id: int
    index: int
    line: str
    reply: str


class TurnLines(BaseModel):
    turns: list[TurnLine]


class SceneNpcOut(BaseModel):
    id: str
    name: str
    present: bool = Field(description="In the scene now (it hears and may speak).")


class SceneOut(BaseModel):
    id: str
    scene: str = Field(description="The scene file, as it was named when the scene was made.")
    name: str = Field(description="The scene's name.")
    npcs: list[SceneNpcOut]
    rounds: int = Field(description="Rounds said (a round: the player's line and the NPC lines that follow it).")
    busy: bool = Field(description="A round is running.")


class Scenes(BaseModel):
    scenes: list[SceneOut]


class SceneLineOut(BaseModel):
    """One line said in a scene (a scene_line event's data)."""

    speaker: str = Field(description="'player' or an NPC's id.")
    name: str = Field(description="The speaker's display name.")
    text: str
    heard_by: list[str] = Field(description="The NPCs that heard it (there, and in earshot).")


class Transcript(BaseModel):
    lines: list[SceneLineOut]


class SpokenTurnOut(BaseModel):
    """An NPC's turn in a round: who, picked by which rule, and its turn's record in its own
    conversation (the one ``TurnRecord``: its line is what it heard, one 'Name: text' a line; its
    reply, path, guard, game events and tags), without diagnostics and prompts."""

    speaker: str
    rule: str = Field(description="The director's rule that picked it: addressed, about, round_robin or model.")
    record: TurnRecord


class RoundOut(BaseModel):
    """A finished round (the round_finished event's data)."""

    round: int = Field(description="Its index in the scene, from 0.")
    speakers: list[str] = Field(description="The NPCs that spoke, in order.")
    lines: list[SceneLineOut] = Field(description="Every line said in it, the player's first.")
    turns: list[SpokenTurnOut]


# --- events -------------------------------------------------------------------------------------

# A turn's stream names its run in this header too, so a client whose stream breaks before the first
# event reaches it can still resume it (GET .../runs/RUN/events from the start).
RUN_HEADER = "Parley-Run"
KEEP_ALIVE_SECONDS = 15.0  # an SSE comment while a turn waits (a tool call), so proxies keep the stream open

# A client ignores a kind it does not know: a newer server may send more (guarded and game_event came later).
EVENT_KINDS = ("watching", "turn_queued", "turn_started", "node_started", "token", "speak", "tool_request", "tool_call", "summarized",
               "warning", "guarded", "game_event", "tag", "node_finished", "turn_finished", "turn_failed")


# A scene round's stream: round_started, then every line said (scene_line) and each speaking NPC's
# node events and tool requests (their data with `speaker`), and last round_finished or round_failed.
SCENE_EVENT_KINDS = ("round_started", "scene_line", "node_started", "token", "speak", "tool_request", "tool_call",
                     "summarized", "warning", "guarded", "game_event", "tag", "node_finished", "round_finished",
                     "round_failed")


def event_data(event: Event) -> dict[str, Any]:
    """A runtime event as an SSE event's data (its fields; ``kind`` is the SSE event's name)."""
    assert is_dataclass(event)
    return {f.name: getattr(event, f.name) for f in fields(event)}


# kind -> the runtime event a node sends as it runs (the turn's start and end are the server's own events)
NODE_EVENTS: dict[str, type[NodeEvent]] = {cls.kind: cls for cls in (NodeStarted, Token, Speak, ToolCalled, Summarized,
                                                                      TurnWarning, Guarded, GameEventReached,
                                                                      ReplyTagged, NodeFinished)}
_EMPTY: dict[type, Callable[[Any], Any]] = {str: str, int: int, bool: bool, dict: dict, list: list}


def event_from_data(kind: str, data: dict[str, Any]) -> NodeEvent | None:
    """The runtime event ``event_data`` made an SSE event of: its inverse, for a node's events (None for
    the server's own kinds: watching, turn_queued, turn_started, tool_request, turn_finished, turn_failed). A field
    the data lacks is empty (a server of another version); one that does not fit raises ValueError."""
    cls = NODE_EVENTS.get(kind)
    if cls is None:
        return None
    hints = get_type_hints(cls)
    values = {}
    for f in fields(cls):
        make = _EMPTY[get_origin(hints[f.name]) or hints[f.name]]
        try:
            values[f.name] = make(data[f.name]) if data.get(f.name) is not None else make()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a {kind} event's {f.name} is {data[f.name]!r}, not {make.__name__}") from exc
    return cls(**values)
