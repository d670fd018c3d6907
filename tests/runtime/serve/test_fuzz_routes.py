"""``parley serve`` under fuzzing (issue 39): hypothesis sends random and hostile JSON to every route of
the server's own OpenAPI schema, and to the routes it leaves out of it (the OpenAI-compatible door,
``/metrics``), on the scripted backend. For every request:

- no 5xx, and every refusal is the typed JSON ``{"error": {"code", "message", "problems"}}`` with its
  code's status; every JSON answer is strict JSON (no NaN, no lone surrogate);
- no traceback in the server's log (``parley.serve``, uvicorn's and the root logger), and no thread
  that died of an exception;
- every event stream ends with its final event (``turn_finished``/``turn_failed``,
  ``round_finished``/``round_failed``, the door's ``[DONE]`` or error) within DEADLINE; an observer's
  stream, which never ends by design, starts with ``watching``;
- a refused request (4xx), or a turn or round that failed, leaves the sessions and the scene
  byte-identical (their GET answers, history and transcript included, before and after), and
  ``GET /v1/sessions`` and ``GET /v1/scenes`` still answer 200.

The routes come from the schema, so a new route is fuzzed without a change here; bodies come from
each route's request model, with hostile values (lone surrogates as raw ``\\ud83d`` escapes, control
characters, NaN and huge numbers, long strings, deep nesting, wrong types, extra and missing keys),
or are arbitrary JSON or garbage bytes. One server serves the module; its sessions and scene are made
again whenever a request deleted them. The profile is fixed (derandomized), to run in about a minute.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from runtime.agent import RUNTIME_PARAMETERS
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.app import build_api
from runtime.serve.protocol import ERROR_STATUS
from runtime.serve.server import running_server
from tests.runtime.serve.test_hostile_clients import DEADLINE, wait_for

ASSET_DIR = examples_dir()
# Examples of each route, by how its request is made: "ids" for a route that takes no body (its path's
# ids and query, known or hostile); for one that takes a body, "proper" (the route's model with hostile
# values, to ids that exist), "spoiled" (parts of other types, missing or extra, to hostile ids too) and
# "raw" (broken on the wire, any JSON, bytes that are not JSON, nothing)
EXAMPLES = {"ids": 25, "proper": 100, "spoiled": 40, "raw": 20}
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))

# What the harness keeps on the server between examples: two sessions (a plain chat, and one whose turn
# asks the game for a tool result) and a scene. Each is made again when a request deleted it.
SESSIONS = {"mira": "chat.json", "hilde": "tool_calling.json"}
SCENE, SCENE_FILE = "tavern", "scenes/tavern.scene.json"
MAX_TURNS = 6  # a session's turns before the harness rewinds it (its prompts would grow with every example)
MAX_EXTRA = 12  # sessions and scenes that requests made, before the harness deletes them

FINAL_KINDS = frozenset({"turn_finished", "turn_failed", "round_finished", "round_failed"})
FAILED_KINDS = frozenset({"turn_failed", "round_failed"})
OBSERVER_KIND = "watching"  # the first event of an observer's stream, which ends only with its session


# --- the routes: the served schema's, and the ones it leaves out ---------------------------------------

def _every_route_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """The OpenAPI schema as the server serves it, and one of every route, those left out of it too."""
    api = build_api(None)  # type: ignore[arg-type]  # the routes never run: only their schema is read
    served = api.openapi()
    shown = []
    for route in api.routes:
        if isinstance(route, APIRoute) and not route.include_in_schema:
            route = copy.copy(route)
            route.include_in_schema = True
        shown.append(route)
    return served, get_openapi(title=api.title, version=api.version, routes=shown)


SERVED_SCHEMA, SCHEMA = _every_route_schema()


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    params: tuple[tuple[str, str, dict[str, Any]], ...]  # (name, in, schema)
    body: dict[str, Any] | None  # the request body's JSON schema; None: the route takes none it declares

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMA["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _operations() -> list[Operation]:
    found = []
    for path, methods in SCHEMA["paths"].items():
        for method, op in methods.items():
            params = tuple((p["name"], p["in"], resolved(p.get("schema", {}))) for p in op.get("parameters", []))
            content = op.get("requestBody", {}).get("content", {})
            body = resolved(content["application/json"]["schema"]) if "application/json" in content else None
            found.append(Operation(method.upper(), path, params, body))
    return found


OPERATIONS = _operations()


def takes_body(op: Operation) -> bool:
    return op.body is not None or op.method in ("POST", "PUT", "PATCH")


def kinds(op: Operation) -> tuple[str, ...]:
    """How the route's requests are made: a route with a body model (or a PUT, of what its path's GET
    answers) gets proper, spoiled and raw bodies; a POST that declares none, raw ones and none."""
    if op.body is not None or op.method == "PUT":
        return ("proper", "spoiled", "raw")
    return ("ids", "raw") if takes_body(op) else ("ids",)


CASES = [(op, kind) for op in OPERATIONS for kind in kinds(op)]


# --- values: proper ones the server knows, and hostile ones ---------------------------------------------

class Raw(str):
    """JSON text sent as it is (what Python's json would refuse to write, or a stack too deep to write)."""


def dump(value: Any) -> str:
    """``value`` as JSON text: lone surrogates as ``\\ud83d`` escapes, NaN and infinities as Python's json
    writes them, ``Raw`` as it is."""
    if isinstance(value, Raw):
        return str(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else "Infinity" if value == math.inf else \
            "-Infinity" if value == -math.inf else repr(value)
    if isinstance(value, int | str):
        return json.dumps(value)  # ensure_ascii: a lone surrogate goes as its escape
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return "{" + ",".join(f"{json.dumps(str(k))}:{dump(v)}" for k, v in value.items()) + "}"


def _asset_names() -> dict[str, list[str]]:
    """Names a request may give that the served folder knows: variables and nodes of the sessions' assets."""
    variables, nodes = set(), set()
    for asset in SESSIONS.values():
        loaded = load_asset(ASSET_DIR / asset)
        variables |= set(loaded.variables)
        nodes |= {node.id for node in loaded.nodes}
    return {"variables": sorted(variables), "nodes": sorted(nodes)}


KNOWN = _asset_names()
ASSETS = sorted(p.name for p in ASSET_DIR.glob("*.json")) + [SCENE_FILE]
SCENE_NPCS = [npc["id"] for npc in json.loads((ASSET_DIR / SCENE_FILE).read_text(encoding="utf-8"))["npcs"]]

SURROGATES = ["\ud83d", "\udc00", "a\ud83d", "\ud83d\ud83d", "\U0001f600\ud83d", "\udfff\ud800"]
CONTROLS = ["\x00", "\x1b[2J\x1b[31m", "\r\n\r\n", "\u202e", "\ufeff", "\x7f\x08", "\u2028", "\t\v\f"]
ODD_TEXT = [
    "", " ", "..", ".", "../../../etc/passwd", "/etc/passwd", "..\\..\\win.ini", "%00", "%2e%2e%2f", "a/b",
    "C:\\x.json", "con", "null", "NaN", "{{player_name}}", "{{instructions}}", "<script>alert(1)</script>",
    "'; DROP TABLE sessions; --", "\U0001f600" * 50, "x" * 4000, "x" * 4001, "y" * 70_000, "z " * 600_000,
]
hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(SURROGATES + CONTROLS + ODD_TEXT),
    st.lists(st.one_of(st.characters(categories=["Cs"]), st.sampled_from(CONTROLS), st.characters()),
             min_size=1, max_size=12).map("".join),
)
huge_numbers = st.sampled_from([-1, 0, 1, 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 10**30, -(10**30)])
hostile_numbers = st.one_of(
    st.integers(-3, 30), huge_numbers, st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([Raw("1e999"), Raw("-1e999"), Raw("1" * 5000), Raw("-0"), Raw("1E400"), Raw("0.1e-400")]),
)
DEPTHS = [64, 1000, 100_000]
deep = st.sampled_from(DEPTHS).flatmap(lambda n: st.sampled_from([
    Raw("[" * n + "]" * n), Raw('{"a":' * n + "1" + "}" * n), Raw("[" * n + '"\\ud83d"' + "]" * n)]))
scalars = st.one_of(st.none(), st.booleans(), hostile_numbers, hostile_text)
any_json = st.one_of(
    st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                  st.dictionaries(hostile_text, inner, max_size=4)),
                 max_leaves=12),
    deep,
)


POOLS = {
    "asset": ASSETS, "model": ASSETS, "scene": [SCENE_FILE, *ASSETS], "user": [*SESSIONS, "fz-door"],
    "id": ["fz-1", "fz-2", "fz-3", *SESSIONS, SCENE, "a" * 64, "a" * 65],
    "npc": SCENE_NPCS, "to": SCENE_NPCS, "role": ["user", "user", "assistant", "system", "tool"],
    "type": ["text", "image_url"],
    "line": ["Good evening!", "How many arrows are there?", "Any rooms free?"],
    "text": ["Good evening!"], "content": ["Good evening!"], "result": ["240", ""], "instructions": ["", "Be brief."],
}


def known_text(name: str) -> st.SearchStrategy[str]:
    """What a field called ``name`` names on this server (an asset, a session, a node...) or says, as a
    game would send it, three times in four; a hostile text otherwise."""
    known = POOLS.get(name)
    if not known:
        return hostile_text
    return st.one_of(st.sampled_from(known), st.sampled_from(known), st.sampled_from(known), hostile_text)


def proper(schema: dict[str, Any], name: str, spoiled: bool) -> st.SearchStrategy[Any]:
    """A value of the schema's type, with hostile contents; ``spoiled``: its parts may be of other types."""
    schema = resolved(schema)
    if "anyOf" in schema or "oneOf" in schema:
        return st.one_of([value_of(s, name, spoiled) for s in schema.get("anyOf", schema.get("oneOf"))])
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        return body_of(schema, spoiled)
    if kind == "object":
        keys = {"variables": st.one_of(st.sampled_from(KNOWN["variables"]), hostile_text),
                "nodes": st.one_of(st.sampled_from(KNOWN["nodes"]), hostile_text)}.get(name, hostile_text)
        inner = schema.get("additionalProperties")
        values = value_of(inner, name, spoiled) if isinstance(inner, dict) and inner else (
            params_change() if name == "nodes" else any_json)
        return st.dictionaries(keys, values, min_size=1 if name in ("variables", "nodes") else 0, max_size=4)
    if kind == "array":
        return st.lists(value_of(schema.get("items", {}), name, spoiled), min_size=schema.get("minItems", 0),
                        max_size=4)
    if kind == "string":
        return known_text(name)
    if kind == "integer":
        small = st.integers(0, 3)
        return st.one_of(small, small, small, huge_numbers, hostile_numbers if spoiled else st.integers(-3, -1))
    if kind == "number":
        return hostile_numbers
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return any_json


def params_change() -> st.SearchStrategy[dict[str, Any]]:
    """One node's parameter changes (PATCH params): its runtime parameters, and fields it may not change."""
    names = st.sampled_from([*RUNTIME_PARAMETERS, "context_size", "model", "type", "exits", "id"])
    values = st.one_of(st.floats(0, 2), st.integers(-1, 4096), hostile_numbers, hostile_text, any_json)
    return st.dictionaries(st.one_of(names, hostile_text), values, min_size=1, max_size=3)


def value_of(schema: dict[str, Any], name: str = "", spoiled: bool = False) -> st.SearchStrategy[Any]:
    """A value of the schema's type; ``spoiled``: now and then another type, null, or deep nesting."""
    shaped = proper(schema, name, spoiled)
    return st.one_of(shaped, shaped, shaped, any_json) if spoiled else shaped


def body_of(schema: dict[str, Any], spoiled: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """An object of the model's fields (the required ones, some optional ones); ``spoiled``: now and then
    with a required one missing or a key the model does not have."""
    schema = resolved(schema)
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    # each optional field is there three times in four: a request that leaves most out tries little
    fields = [st.tuples(st.just(k), value_of(v, k, spoiled), st.just(True) if k in required else
                        st.sampled_from([True, True, True, False])) for k, v in props.items()]
    shaped = st.tuples(*fields).map(lambda got: {k: v for k, v, there in got if there})
    if not spoiled:
        return shaped

    def spoil(body: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        dropped = [st.just({k: v for k, v in body.items() if k != gone}) for gone in body]
        extra = st.tuples(hostile_text, any_json).map(lambda kv: {**body, kv[0]: kv[1]})
        return st.one_of(st.just(body), st.just(body), st.just(body), extra, *dropped)

    return shaped.flatmap(spoil)


# --- a request ------------------------------------------------------------------------------------------

CONTENT_TYPES = ["application/json", "application/json", "application/json", "application/json", None,
                 "text/plain", "application/json; charset=utf-16", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x"]


def garbled(text: bytes) -> st.SearchStrategy[bytes]:
    """``text`` broken on the wire: cut short, a byte in it changed, invalid UTF-8 or a BOM in it, UTF-16."""
    at = st.integers(0, max(len(text) - 1, 0))
    return st.one_of(
        at.map(lambda i: text[:i]),
        st.tuples(at, st.binary(min_size=1, max_size=3)).map(lambda t: text[:t[0]] + t[1] + text[t[0] + 1:]),
        at.map(lambda i: text[:i] + b"\xff\xfe\xed\xa0\xbd" + text[i:]),
        st.just(b"\xef\xbb\xbf" + text),
        st.just(text.decode("utf-8", "replace").encode("utf-16")),
    )


@dataclass
class Request:
    method: str
    path: str
    body: bytes | None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        shown = self.body[:300] if self.body is not None else b""
        more = f" (+{len(self.body) - 300} bytes)" if self.body is not None and len(self.body) > 300 else ""
        return f"{self.method} {self.path[:300]} {self.headers} {shown!r}{more}"


def segment(value: Any) -> str:
    """``value`` as one path segment, percent-escaped (a lone surrogate as its UTF-8 bytes would be)."""
    return quote(str(value).encode("utf-8", "surrogatepass"), safe="")


HOSTILE_IDS = ["..", ".", "nope", "a" * 65, "a" * 5000, "%00", "\x00", "\ud83d", "\U0001f600", "a/b", " ", "-1",
               "\u202e", "NaN", "9" * 40]


def path_value(name: str, schema: dict[str, Any], world: World, hostile_too: bool) -> st.SearchStrategy[Any]:
    """A path or query parameter: what names something on the server now, or (``hostile_too``) a hostile one."""
    # a URL's path is at most 64 KiB (httpx's limit, and the server's for a request's head)
    hostile = st.one_of(st.sampled_from(HOSTILE_IDS), hostile_text.filter(lambda s: 0 < len(s) < 5000),
                        hostile_numbers.map(dump))
    if name == "session_id":
        known = st.sampled_from(sorted(SESSIONS))
    elif name == "scene_id":
        known = st.just(SCENE)
    elif name == "run":
        known = st.sampled_from(sorted(world.runs) or ["0" * 16])
    elif schema.get("type") == "integer" or any(s.get("type") == "integer" for s in schema.get("anyOf", [])):
        known = st.integers(-1, MAX_TURNS + 2)
    else:
        known = known_text(name)
    return st.one_of(known, known, hostile) if hostile_too else known


def request_for(op: Operation, kind: str, world: World, data: st.DataObject) -> Request:
    path, query = op.path, []
    for name, where, schema in op.params:
        value = data.draw(path_value(name, schema, world, hostile_too=kind != "proper"), label=name)
        if where == "path":
            path = path.replace("{" + name + "}", segment(value))
        elif where == "query" and data.draw(st.booleans(), label=f"send {name}"):
            query.append(f"{quote(name)}={segment(value)}")
    if query:
        path += "?" + "&".join(query)
    headers: dict[str, str] = {}
    if any(name == "run" for name, _, _ in op.params) and data.draw(st.booleans(), label="Last-Event-ID"):
        run = path.split("/runs/")[1].split("/")[0]
        headers["last-event-id"] = data.draw(st.one_of(
            st.integers(-2, 40).map(lambda n: f"{run}.{n}"), st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                                     max_size=40)), label="last-event-id")
    body = None
    if takes_body(op) and kind != "ids":
        if kind == "raw":
            kind = data.draw(st.sampled_from(RAW_BODIES), label="raw body")
        body = data.draw(body_for(op, world, kind), label="body")
        content_type = "application/json" if kind == "proper" else \
            data.draw(st.sampled_from(CONTENT_TYPES), label="content-type")
        if content_type:
            headers["content-type"] = content_type
    return Request(op.method, path, body, headers)


RAW_BODIES = ["garbled", "json", "bytes", "empty"]


def body_for(op: Operation, world: World, kind: str) -> st.SearchStrategy[bytes]:
    if op.body is not None:
        shaped = body_of(op.body, spoiled=kind == "spoiled")
    elif op.method == "PUT" and op.path in world.exported:
        # a body the route declares no model for, on a path a GET answers (a history): what GET gave, changed
        exports = world.exported[op.path]
        shaped = st.sampled_from(sorted(exports)).flatmap(lambda sid: mutated(exports[sid], kind == "spoiled"))
    else:
        shaped = any_json
    encoded = shaped.map(lambda body: dump(body).encode())
    return {"proper": encoded, "spoiled": encoded, "garbled": encoded.flatmap(garbled),
            "json": any_json.map(lambda v: dump(v).encode()), "bytes": st.binary(max_size=300),
            "empty": st.just(b"")}[kind]


def mutated(document: Any, spoiled: bool) -> st.SearchStrategy[Any]:
    """``document`` (an exported history) with one of its values, anywhere in it, replaced (by one of
    another type too when ``spoiled``) or removed."""
    places: list[tuple[Any, ...]] = []

    def walk(node: Any, at: tuple[Any, ...]) -> None:
        places.append(at)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, (*at, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, (*at, i))

    walk(document, ())

    def change(at: tuple[Any, ...], value: Any, remove: bool) -> Any:
        copied = copy.deepcopy(document)
        if not at:
            return value
        parent = copied
        for key in at[:-1]:
            parent = parent[key]
        if remove:
            del parent[at[-1]]
        else:
            parent[at[-1]] = value
        return copied

    values = st.one_of(scalars, any_json, hostile_text) if spoiled else st.one_of(hostile_text, hostile_numbers)
    return st.one_of(st.just(document), st.builds(change, st.sampled_from(places), values, st.booleans()))


# --- the server and what it logs ------------------------------------------------------------------------

class LogWatch(logging.Handler):
    """Every record the server logs with a traceback (``exc_info``, or "Traceback" in its text), and every
    thread that died of an exception."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.tracebacks: list[str] = []
        self.lock_ = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info or record.exc_text or record.stack_info or "Traceback" in text:
            with self.lock_:
                self.tracebacks.append(f"{record.name} {record.levelname}: {self.format(record)}")

    def thread_died(self, args: threading.ExceptHookArgs) -> None:
        with self.lock_:
            self.tracebacks.append(f"thread {args.thread.name if args.thread else '?'} died: {args.exc_type.__name__}: "
                                   f"{args.exc_value}")

    def take(self) -> list[str]:
        with self.lock_:
            taken, self.tracebacks = self.tracebacks, []
        return taken


WATCHED_LOGGERS = ("", "parley.serve", "uvicorn", "uvicorn.error", "asyncio")


@dataclass
class World:
    """The fuzzed server, the harness's client, and what it knows of the server's state."""

    url: str
    http: httpx.Client
    logs: LogWatch
    runs: set[str] = field(default_factory=set)  # runs of turns the harness saw (resume targets)
    run_lengths: dict[str, int] = field(default_factory=dict)  # run -> the number of its final event
    answered: set[Any] = field(default_factory=set)  # tool calls the harness answered
    exported: dict[str, dict[str, Any]] = field(default_factory=dict)  # history path -> session -> its export


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    logs = LogWatch()
    loggers = [logging.getLogger(name) for name in WATCHED_LOGGERS]
    for logger in loggers:
        logger.addHandler(logs)
    serve_log = logging.getLogger("parley.serve")
    level = serve_log.level
    serve_log.setLevel(logging.INFO)  # what the server logs at INFO reaches the watch too
    hook = threading.excepthook
    threading.excepthook = logs.thread_died
    backend = ScriptedBackend()
    try:
        with running_server(backend, [ASSET_DIR], header_seconds=DEADLINE * 10, body_seconds=DEADLINE * 10) as url, \
                httpx.Client(base_url=url, timeout=DEADLINE) as http:
            yield World(url, http, logs)
        assert not logs.take(), "the server logged a traceback as it stopped"
    finally:
        threading.excepthook = hook
        serve_log.setLevel(level)
        for logger in loggers:
            logger.removeHandler(logs)
        backend.close()


def get(world: World, path: str) -> httpx.Response:
    answer = world.http.get(path)
    assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text[:500]}"
    return answer


def ready(world: World) -> None:
    """The sessions and the scene the harness fuzzes, as it left them or made again, not too long, and
    not too many others beside them."""
    held = {s["id"]: s for s in get(world, "/v1/sessions").json()["sessions"]}
    for sid in [sid for sid in SESSIONS if held.get(sid, {}).get("busy")]:
        world.http.post(f"/v1/sessions/{sid}/cancel")  # left running by an example that stopped mid-stream
        wait_for(lambda sid=sid: not get(world, f"/v1/sessions/{sid}").json()["busy"], f"{sid}'s turn to end")
    for sid, asset in SESSIONS.items():
        if sid not in held:
            made = world.http.post("/v1/sessions", json={"asset": asset, "id": sid})
            assert made.status_code == 201, made.text
        elif held[sid]["turns"] > MAX_TURNS:
            assert world.http.post(f"/v1/sessions/{sid}/rewind", json={"turns": 1}).status_code == 200
    others = [sid for sid in held if sid not in SESSIONS]
    for sid in others if len(others) > MAX_EXTRA else []:
        assert world.http.delete(f"/v1/sessions/{segment(sid)}").status_code == 204
    scenes = {s["id"]: s for s in get(world, "/v1/scenes").json()["scenes"]}
    if SCENE not in scenes:
        made = world.http.post("/v1/scenes", json={"scene": SCENE_FILE, "id": SCENE})
        assert made.status_code == 201, made.text
    elif scenes[SCENE]["rounds"] > MAX_TURNS:
        assert world.http.post(f"/v1/scenes/{SCENE}/rewind", json={"rounds": 1}).status_code == 200
    for other in [s for s in scenes if s != SCENE]:
        assert world.http.delete(f"/v1/scenes/{segment(other)}").status_code == 204
    for sid in SESSIONS:
        path = f"/v1/sessions/{sid}/history"
        world.exported.setdefault("/v1/sessions/{session_id}/history", {})[sid] = get(world, path).json()


def snapshot(world: World) -> dict[str, bytes]:
    """What a refused request must leave as it was: each session (its history too) and the scene."""
    paths = [p for sid in SESSIONS for p in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/history",
                                             f"/v1/sessions/{sid}/turns")]
    paths += [f"/v1/scenes/{SCENE}", f"/v1/scenes/{SCENE}/transcript"]
    taken = {}
    for path in paths:
        answer = world.http.get(path)
        taken[path] = answer.content if answer.status_code == 200 else f"{answer.status_code}".encode()
    return taken


# --- the invariants -------------------------------------------------------------------------------------

def strict_json(text: bytes, what: str) -> Any:
    """``text`` as JSON that any client reads: UTF-8 with no lone surrogate, and no NaN or Infinity."""
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{what}: {constant} in a JSON answer, which a JavaScript client cannot read")

    try:
        return json.loads(text.decode("utf-8"), parse_constant=refuse)
    except (UnicodeDecodeError, ValueError) as exc:
        raise AssertionError(f"{what}: not JSON ({exc}): {text[:300]!r}") from None


def check_error(answer: httpx.Response, body: bytes, what: str) -> str:
    """A refusal: the typed JSON error of its status. Returns its code."""
    assert answer.headers.get("content-type", "").startswith("application/json"), f"{what}: {body[:300]!r}"
    assert b"Traceback" not in body and b'File "' not in body, f"{what}: {body[:500]!r}"
    error = strict_json(body, what)
    assert isinstance(error, dict) and set(error) == {"error"}, f"{what}: {body[:300]!r}"
    fields = error["error"]
    assert set(fields) >= {"code", "message", "problems"}, f"{what}: {fields}"
    assert isinstance(fields["message"], str) and fields["message"], f"{what}: {fields}"
    assert isinstance(fields["problems"], list), f"{what}: {fields}"
    assert ERROR_STATUS.get(fields["code"]) == answer.status_code, f"{what}: {answer.status_code} with {fields}"
    return fields["code"]


@dataclass
class Frame:
    event: str
    data: str
    id: str


def sse_lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """An event stream's lines as the server ends them, at LF (an optional CR before it too), and not at
    U+2028 and the other breaks ``str.splitlines``, and so httpx's ``iter_lines``, splits at: JSON leaves
    them raw, and the SSE standard reads them as text."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r").decode("utf-8")
    if pending:
        yield pending.decode("utf-8")


def frames(lines: Iterator[str]) -> Iterator[Frame]:
    event, data, event_id = "", [], ""
    for line in lines:
        if line == "":
            if data or event:
                yield Frame(event, "\n".join(data), event_id)
            event, data, event_id = "", [], ""
        elif line.startswith(":"):
            continue  # a keep-alive
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value
    if data or event:
        yield Frame(event, "\n".join(data), event_id)


def door_error(frame: Frame) -> bool:
    """The OpenAI door's stream (no event names) ends a failed turn with ``data: {"error": ...}``."""
    if frame.event or not frame.data.startswith("{"):
        return False
    payload = json.loads(frame.data)
    return isinstance(payload, dict) and "error" in payload


def final(frame: Frame) -> bool:
    if frame.event:
        return frame.event in FINAL_KINDS
    return frame.data == "[DONE]" or door_error(frame)


def failed(frame: Frame) -> bool:
    return frame.event in FAILED_KINDS or door_error(frame)


def tool_route(path: str) -> str:
    """Where the game answers a tool request of the stream at ``path``: its session's or scene's tool_results."""
    parts = path.split("?")[0].split("/")
    return "/".join(parts[:4]) + "/tool_results"  # /v1/sessions/ID or /v1/scenes/ID


def answer_tool(world: World, path: str, data: dict[str, Any], draw: st.DataObject) -> None:
    """Answer a tool request as a hostile game would first (its answer checked as any request's), then
    properly if that was refused: the stream must still end."""
    if data.get("call_id") in world.answered:
        return  # a resumed stream's replay of a call answered before
    world.answered.add(data.get("call_id"))
    route = tool_route(path)
    hostile = draw.draw(st.one_of(known_text("result").map(lambda r: {"call_id": data.get("call_id"), "result": r}),
                                  body_of({"type": "object", "properties": {"call_id": {"type": "string"},
                                                                           "result": {"type": "string"}},
                                           "required": ["call_id", "result"]}, spoiled=True),
                                  any_json), label="tool result")
    answer = world.http.post(route, content=dump(hostile).encode(), headers={"content-type": "application/json"})
    what = f"POST {route} {dump(hostile)[:200]}"
    assert answer.status_code < 500, f"{what}: {answer.status_code} {answer.text[:500]}"
    if answer.status_code >= 400:
        check_error(answer, answer.content, what)
        proper_answer = world.http.post(route, json={"call_id": data.get("call_id"), "result": "240"})
        assert proper_answer.status_code == 204, f"{route}: {proper_answer.status_code} {proper_answer.text[:300]}"


def read_stream(world: World, request: Request, answer: httpx.Response, draw: st.DataObject) -> list[Frame]:
    """The stream's events to its last (tool requests answered on the way), within DEADLINE; an
    observer's stream only to its first event."""
    got: list[Frame] = []
    deadline = time.monotonic() + DEADLINE
    for frame in frames(sse_lines(answer.iter_raw())):
        got.append(frame)
        assert time.monotonic() < deadline, f"{request}: the stream ran past {DEADLINE:g} s: {got[-5:]}"
        if len(got) == 1 and frame.event == OBSERVER_KIND:
            return got  # an observer's stream ends only with its session: it started, which is all to see
        if frame.data and frame.data != "[DONE]":
            payload = strict_json(frame.data.encode("utf-8", "surrogatepass"), f"{request}: event {frame.event}")
            if frame.event == "tool_request":
                answer_tool(world, request.path, payload, draw)
            if frame.event == "turn_started" and isinstance(payload, dict) and payload.get("run"):
                world.runs.add(str(payload["run"]))
        if final(frame):
            if frame.id.rpartition(".")[0]:
                world.run_lengths[frame.id.rpartition(".")[0]] = int(frame.id.rpartition(".")[2])
            break
    return got


def resumed_after_its_end(request: Request, got: list[Frame], world: World) -> bool:
    """An empty resume of a run whose final event the client says it has had: nothing more to send."""
    if got or "/runs/" not in request.path:
        return False
    run = request.path.split("/runs/")[1].split("/")[0]
    after = re.search(r"[?&]after=(\d+)", request.path)
    last = request.headers.get("last-event-id", "")
    seen = int(after.group(1)) if after else int(last.rpartition(".")[2]) if last.rpartition(".")[2].isdigit() else 0
    return run in world.run_lengths and seen >= world.run_lengths[run]


def send(world: World, request: Request, draw: st.DataObject) -> tuple[int, bool]:
    """Send ``request`` and check what comes back. Returns its status and whether it failed (refused, or a
    stream that ended with a failure)."""
    what = str(request)
    with world.http.stream(request.method, request.path, content=request.body, headers=request.headers) as answer:
        status = answer.status_code
        assert status < 500, f"{what}: {status} {answer.read()[:1000]!r}"
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            assert status == 200, what
            try:
                got = read_stream(world, request, answer, draw)
            except BaseException:
                # the example ends here (a failure, or hypothesis stopping it for drawing too much): its
                # turn must not hold the session busy for the examples after it
                world.http.post(tool_route(request.path).replace("/tool_results", "/cancel"))
                raise
            if got and got[0].event == OBSERVER_KIND:
                return status, False
            assert (got and final(got[-1])) or resumed_after_its_end(request, got, world), \
                f"{what}: a stream without a final event: {[(f.event, f.data[:100]) for f in got[-5:]]}"
            return status, failed(got[-1]) if got else False
        body = answer.read()
    if status >= 400:
        check_error(answer, body, what)
        return status, True
    if answer.headers.get("content-type", "").startswith("application/json"):
        strict_json(body, what)
    return status, False


def assert_no_tracebacks(world: World, what: str) -> None:
    seen = world.logs.take()
    assert not seen, f"{what}: the server logged a traceback:\n" + "\n".join(seen)[:6000]


# --- the tests ------------------------------------------------------------------------------------------

def test_the_fuzzed_routes_are_every_route_the_server_serves(world: World) -> None:
    """The schema the harness reads is the one the server serves, and it fuzzes every route of it (and
    the routes left out of it, which a game calls all the same)."""
    served = get(world, "/v1/openapi.json").json()
    assert served == json.loads(json.dumps(SERVED_SCHEMA))
    fuzzed = {(op.method, op.path) for op in OPERATIONS}
    assert {(m.upper(), p) for p, methods in served["paths"].items() for m in methods} < fuzzed
    assert {("POST", "/v1/chat/completions"), ("GET", "/metrics")} <= fuzzed


@pytest.mark.parametrize(("op", "kind"), CASES, ids=[f"{op} {kind}" for op, kind in CASES])
def test_a_route_under_random_and_hostile_json(world: World, op: Operation, kind: str) -> None:
    @settings(FUZZ, max_examples=EXAMPLES[kind])
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        assert_no_tracebacks(world, "before the example")
        ready(world)
        request = request_for(op, kind, world, data)
        note(str(request))
        before = snapshot(world)
        status, refused = send(world, request, data)
        assert_no_tracebacks(world, str(request))
        get(world, "/v1/sessions")  # no session poisons the list
        get(world, "/v1/scenes")
        if refused:
            after = snapshot(world)
            changed = [path for path in before if before[path] != after[path]]
            assert not changed, f"{request}: refused ({status}), yet it changed {changed}: " + "; ".join(
                f"{before[p][:300]!r} -> {after[p][:300]!r}" for p in changed)
        assert_no_tracebacks(world, f"after {request}")

    example()
