"""The NPC sessions a server runs: one ``Agent`` each, all on one backend (one load of the weights),
their turns on worker threads, each turn's events handed to the event loop as they happen.

A session runs one turn at a time; anything that changes it (variables, parameters, history, rewind)
is refused with ``busy`` while a turn runs. A line said while a turn runs follows the asset's
``double_text`` (queue, reject, latest_wins, interrupt). A turn that fails or is cancelled leaves the
session exactly as it was (``Agent.run_turn`` rolls back), and its stream ends with ``turn_failed``.

Every turn is a *run* with an id of its own; its events are kept until the session's next run
begins, so a client whose connection dropped reconnects and gets the rest (``Stream.follow``). A
dropped connection cancels the turn only when the client asked for that (``cancel_on_disconnect``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.agent import Agent, StructuralChange, TurnCancelled, TurnResult, noting_nodes
from runtime.asset.behaviours import problems as behaviour_problems
from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.asset.validation import validate_asset
from runtime.backends.base import Backend
from runtime.crashes import CrashWatch, turn_note
from runtime.dialogue.dialog_file import history_from_dict, history_to_dict
from runtime.dialogue.history import Entry, Reply
from runtime.events import Event, Token, TurnFinished
from runtime.problems import InputError, Problem
from runtime.serve.logs import about_turn
from runtime.serve.metrics import Metrics
from runtime.serve.protocol import CALL_ID, SESSION_ID, SESSION_ID_RULE, ServeError, SessionOut, event_data
from runtime.serve.store import NoStore, SessionStore, StoreConflict, StoredSession, StoreError
from runtime.session.failures import CANCELLED_MESSAGE, Failure, ToolTimeout, failure_of
from runtime.session.record import TurnRecord
from runtime.session.session import Session

if TYPE_CHECKING:
    from runtime.serve.scenes import ServedScenes

log = logging.getLogger("parley.serve")

# Per session: the diagnostics and prompts of its latest turns, for an attached editor (which reads
# each as it finishes). A record holds every node's whole prompt, so keeping 64 grew a many-NPC soak
# every round.
KEPT_TURN_DETAILS = 8
WATCH_QUEUE = 4096  # events an observer may fall behind by before it is dropped
MAX_QUEUED = 8  # lines a session may hold waiting behind its running turn (double_text: queue)
CUT = "…"  # ends a reply the player spoke over (double_text: interrupt)


# The longest ``--tool-timeout``: a day. A wait has to end for the turn's worker to come back, and
# Python's waits refuse infinity (OverflowError) where NaN would end every wait at once.
MAX_TOOL_TIMEOUT_S = 86_400.0


@dataclass
class Limits:
    max_body: int = 1 << 20  # bytes of one request
    max_line: int = 4000  # characters of a player line (and of instructions)
    max_sessions: int = 1000
    max_stream_events: int = 20_000  # events of one turn's stream
    tool_timeout: float = 30.0  # seconds a turn waits for the client's tool result (at most MAX_TOOL_TIMEOUT_S)
    max_watchers: int = 16  # observers of one session


@dataclass
class Item:
    """One event of a turn's stream: ``kind`` is the SSE event's name."""

    kind: str
    data: dict[str, Any]


class Stream:
    """One run's events, from the worker thread to the event loop, all kept (up to ``limit``) so that
    any number of readers follow it from any point: the request that started the turn, and clients
    that reconnect after their connection dropped. Event ``n`` (from 1) has the SSE id ``RUN.n``.
    The worker never blocks on a slow client: past ``limit`` events the turn is cancelled and the
    stream ends with stream_limit."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int, on_item: Callable[[Item], None], line: str,
                 cancel_on_disconnect: bool = False, session: str = "") -> None:
        self.loop = loop
        self.session = session  # whose turn: named in the log
        self.turn: int | None = None  # its index, once it begins
        self.run = secrets.token_hex(8)
        self.line = line  # the player's line, handed back by turn_failed
        self.cancel_on_disconnect = cancel_on_disconnect
        self.items: list[Item] = []  # delivered (the loop's thread only)
        self.ended = False
        self.limit = limit
        self.count = 0  # put
        self.sent = 0  # put and not dropped: the last one's number
        self.overflowed = False
        self.running = RunningTurn()  # the turn whose events these are (it may wait in the queue first)
        self._on_item = on_item
        self._more = asyncio.Event()

    def event_id(self, number: int) -> str:
        return f"{self.run}.{number}"

    def put(self, item: Item, last: bool = False) -> None:  # one thread at a time: the loop's, then the turn's
        self.count += 1
        if self.count > self.limit and not last:
            self.overflowed = True
            return
        self.sent += 1
        self.loop.call_soon_threadsafe(self._deliver, item)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._end)

    def _deliver(self, item: Item) -> None:  # the loop
        self.items.append(item)
        self._on_item(item)
        self._wake()

    def _end(self) -> None:  # the loop
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        self._more.set()
        self._more = asyncio.Event()

    async def follow(self, after: int, keep_alive: float) -> AsyncIterator[tuple[int, Item] | None]:
        """Its events after the ``after``-th, each with its number, as they come, until the last; None
        when ``keep_alive`` seconds pass with nothing new (a keep-alive comment's turn)."""
        seen = after
        while True:
            while seen < len(self.items):
                seen += 1
                yield seen, self.items[seen - 1]
            if self.ended:
                return
            more = self._more
            try:
                await asyncio.wait_for(more.wait(), keep_alive)
            except TimeoutError:
                yield None


@dataclass
class Job:
    """A turn asked for: it runs at once, or waits behind the running one (double_text: queue)."""

    stream: Stream
    line: str
    instructions: str
    mock_tools: bool
    regenerate: int | None


@dataclass
class RunningTurn:
    cancel: threading.Event = field(default_factory=threading.Event)
    calls: dict[str, tuple[threading.Event, list[str]]] = field(default_factory=dict)  # call id -> (answered, result)
    lock: threading.Lock = field(default_factory=threading.Lock)
    spoken_over: str = ""  # why the player's next line stopped it: superseded or interrupted (double_text)
    shutdown: bool = False  # stopped because the server is shutting down
    kept: bool = False  # the turn is kept (``keep``): a cancel from now on comes too late

    def keep(self) -> bool:
        """The agent's last question before it keeps the turn (``Agent.run_turn``'s commit): False when
        it was cancelled; else no cancel takes it back from now on."""
        with self.lock:
            if self.cancel.is_set():
                return False
            self.kept = True
            return True


class NPC:
    """One session: an agent, the turn it is running (if any), who watches it, and its latest turns' details."""

    def __init__(self, session_id: str, asset_path: str, session: Session) -> None:
        self.id = session_id
        self.asset_path = asset_path
        self.session = session
        self.running: RunningTurn | None = None
        self.queued: deque[Job] = deque()  # lines waiting behind the running turn
        self.stream: Stream | None = None  # the latest run's events: kept until the next run begins
        self.watchers: set[asyncio.Queue[Item | None]] = set()
        self.details: OrderedDict[int, TurnRecord] = OrderedDict()
        self.used = time.monotonic()  # when a request last asked for it
        self.revision = 0  # the store's revision of the session as this server last wrote or read it
        self.last_run: dict[str, Any] | None = None  # the final event of its latest turn stream, as stored
        # The history as last saved: what GET history answers while a turn runs (the last finished state)
        self.saved: dict[str, Any] | None = None

    @property
    def agent(self) -> Agent:
        return self.session.agent

    def out(self) -> SessionOut:
        return SessionOut(id=self.id, asset=self.asset_path, asset_name=self.agent.asset.name,
                          turns=len(self.agent.history.turns), busy=self.running is not None,
                          variables=dict(self.agent.variables), backend=self.agent.backend.label)

    def notify(self, item: Item) -> None:  # the loop
        for queue in list(self.watchers):
            if queue.qsize() >= WATCH_QUEUE:
                self.watchers.discard(queue)  # fallen too far behind: its stream ends
                queue.put_nowait(None)
            else:
                queue.put_nowait(item)


class NPCs:
    """Every session of one server. Methods named ``*_now`` run on the event loop and never block;
    ``turn`` starts a turn on a worker thread."""

    def __init__(self, backend: Backend, asset_dirs: list[Path], limits: Limits, workers: int = 8,
                 crash_watch: CrashWatch | None = None, store: SessionStore | None = None) -> None:
        self.backend = backend
        # Every session is written here after each change, a turn before its turn_finished is sent
        self.store: SessionStore = store if store is not None else NoStore()
        self.metrics = Metrics(lambda: len(self.sessions), backend,
                               lambda: sum(len(npc.queued) for npc in list(self.sessions.values())))
        # Notes the turns in flight, and which node each runs: a native crash's report then names them.
        self.crash_watch = crash_watch
        self.asset_dirs = [d.resolve() for d in asset_dirs]
        self.limits = limits
        self.sessions: dict[str, NPC] = {}
        self._lock = threading.Lock()
        # Each turn has a thread of its own (one per session at most), and ``workers`` of them compute at
        # once: a turn waiting for its client's tool result gives its place up, so clients that never
        # answer cannot starve the other sessions.
        self._computing = threading.BoundedSemaphore(workers)
        self._threads: set[threading.Thread] = set()
        self._ids = itertools.count(1)
        # What the store holds but could not be served again (its asset gone or changed): kept there
        self.not_restored: dict[str, str] = {}
        self._assets: dict[Path, tuple[tuple[int, int], Asset]] = {}  # path -> (its version, the checked asset)
        self._listed: tuple[tuple[int, ...], list[tuple[str, Path]]] | None = None  # folders' versions, their assets
        self.closing = False  # shutting down: /v1/health/ready answers 503
        self.deadline: float | None = None  # when a shutdown must be over (time.monotonic)
        # The server's scenes (runtime/serve/scenes.py), which register here: their rounds run on this
        # server's workers, stop with its turns, and their NPCs count against --max-sessions.
        self.scenes: ServedScenes | None = None

    def held(self) -> int:
        """What counts against ``max_sessions``: every session, and every NPC of every scene."""
        return len(self.sessions) + (self.scenes.npc_count() if self.scenes is not None else 0)

    def close(self, seconds: float = 30.0) -> bool:
        """Stop every turn and wait for their threads, up to ``seconds`` in all or until the
        shutdown's ``deadline``. False: some still run."""
        self.closing = True
        with self._lock:
            for npc in list(self.sessions.values()):
                self._stop_all(npc, "cancelled")
            if self.scenes is not None:
                self.scenes.stop_all(shutdown=False)
            threads = list(self._threads)
        deadline = self.deadline if self.deadline is not None else time.monotonic() + seconds
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0))
        return not any(thread.is_alive() for thread in threads)

    def stop_everything(self) -> int:
        """The server is shutting down (on the event loop): no new turns; every running turn is
        cancelled (its session stays as it was before it, and is saved as such), every waiting line
        dropped, every tool wait ended, and every observer's stream closed. Returns how many turns ran."""
        self.closing = True
        stopped = 0
        with self._lock:
            for npc in list(self.sessions.values()):
                if npc.running is not None:
                    npc.running.shutdown = True
                    stopped += 1
                    log.info("session %s: its turn is cancelled: the server is shutting down", npc.id,
                             extra={"session": npc.id, "turn": npc.stream.turn if npc.stream else None})
                self._stop_all(npc, "cancelled")
            if self.scenes is not None:
                stopped += self.scenes.stop_all(shutdown=True)
        for npc in list(self.sessions.values()):
            for queue in list(npc.watchers):
                queue.put_nowait(None)  # its observer's stream ends
            npc.watchers.clear()
        return stopped

    # --- assets -------------------------------------------------------------------------------

    def assets(self) -> list[tuple[str, Path]]:
        """Every asset the folders hold (name, path): listed again only when a folder changed (a file
        added, removed or renamed changes its modification time; what create loads is checked apart)."""
        try:
            version = tuple(folder.stat().st_mtime_ns for folder in self.asset_dirs)
        except OSError:
            version = None
        if version is not None and self._listed is not None and self._listed[0] == version:
            return self._listed[1]
        found = self._list_assets()
        self._listed = (version, found) if version is not None else None
        return found

    def _list_assets(self) -> list[tuple[str, Path]]:
        found = []
        for folder in self.asset_dirs:
            for path in sorted(folder.glob("*.json")):
                if path.is_file() and path.resolve().is_relative_to(folder):  # what resolve_asset would load
                    found.append((path.name if len(self.asset_dirs) == 1 else f"{folder.name}/{path.name}", path))
        return found

    def resolve_asset(self, name: str, field: str = "asset") -> Path:
        """``name`` inside one of the asset folders (never outside one, whatever ``..`` or links it holds);
        ``field``: the request's field that named it (in the error)."""
        if not name or "\x00" in name or len(name) > 512:
            raise ServeError("bad_request", f"{field}: give the file's path inside one of the server's asset folders")
        for folder in self.asset_dirs:
            candidates = [folder / name]
            if len(self.asset_dirs) > 1 and "/" in name:
                head, _, rest = name.partition("/")
                if head == folder.name:
                    candidates.append(folder / rest)
            for candidate in candidates:
                try:
                    path = candidate.resolve()
                except (OSError, RuntimeError, ValueError):
                    continue
                if path.is_relative_to(folder) and path.suffix == ".json" and path.is_file():
                    return path
        raise ServeError("unknown_asset", f"{field} {name!r}: no such .json file in the served folders (GET "
                         "/v1/assets lists the agents)")

    # --- sessions -----------------------------------------------------------------------------

    def create(self, asset: str, variables: dict[str, Any], session_id: str | None) -> NPC:
        if session_id is not None and not SESSION_ID.fullmatch(session_id):
            raise ServeError("bad_request", f"id: {SESSION_ID_RULE}")
        path = self.resolve_asset(asset)
        loaded = self.checked_asset(path, asset)
        unknown = sorted(set(variables) - set(loaded.variables))
        if unknown:
            raise ServeError("bad_request", f"variables: the asset declares no variable {unknown[0]!r} "
                             f"(it has: {', '.join(loaded.variables) or 'none'})")
        with self._lock:
            self._make_room()
            if self.held() >= self.limits.max_sessions:
                raise ServeError("limit_reached", f"the server holds {self.limits.max_sessions} sessions (a scene's "
                                 "NPCs count one each), its limit (--max-sessions); delete one first")
            if session_id is None:
                session_id = f"npc-{next(self._ids)}-{secrets.token_hex(3)}"
            if session_id in self.sessions:
                raise ServeError("exists", f"a session {session_id!r} exists already")
            session = Session(loaded, self.backend, path.parent, session_id=session_id, variables=variables)
            npc = self.sessions[session_id] = NPC(session_id, str(asset), session)
        try:
            self.persist(npc)
        except ServeError:
            with self._lock:
                self.sessions.pop(session_id, None)
            raise
        log.info("session %s: %s", session_id, asset, extra={"session": session_id})
        return npc

    def checked_asset(self, path: Path, name: str) -> Asset:
        """The asset at ``path``, loaded and validated, read again only when the file changed (its size or
        modification time): a game that creates many NPCs of one asset pays for reading and checking it
        once. Sessions share the object: an agent never changes its asset, it replaces it (``change_params``)."""
        try:
            stat = path.stat()
        except OSError as exc:
            raise ServeError("unknown_asset", f"asset {name!r}: {exc.strerror or exc}") from None
        version = (stat.st_mtime_ns, stat.st_size)
        cached = self._assets.get(path)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            loaded = load_asset(path)
        except InputError as exc:
            raise ServeError("bad_asset", f"asset {name!r} cannot be loaded", exc.problems) from None
        # Its behaviours from the served folders only (before anything reads them: an outside file's
        # keys would show in the problems), however a path reaches out (``..``, a link).
        outside = behaviour_problems(loaded, path.parent, name, within=self.asset_dirs)
        if outside:
            raise ServeError("bad_asset", f"asset {name!r}: {outside[0].message}", outside)
        errors = [p for p in validate_asset(loaded, str(path), asset_dir=path.parent) if p.severity == "error"]
        if errors:
            raise ServeError("bad_asset", f"asset {name!r} has {len(errors)} error(s)", errors)
        self._assets[path] = (version, loaded)
        return loaded

    def persist(self, npc: NPC, last_run: dict[str, Any] | None = None) -> None:
        """Write the session to the store (what it holds now), over the revision this server last saw;
        ``last_run`` (the final event of its turn stream) is stored with it, None keeping the stored one.
        Raises ServeError ``store_conflict`` when another server changed it meanwhile, else ``store_error``."""
        try:
            start = time.perf_counter()
            history = history_to_dict(npc.agent.export_dialog())
            npc.revision = self.store.save(StoredSession(npc.id, npc.asset_path, history,
                                                         revision=npc.revision, last_run=last_run))
            npc.saved = history
            if last_run is not None:
                npc.last_run = last_run
            if not isinstance(self.store, NoStore):
                self.metrics.store_write.observe(time.perf_counter() - start)
        except StoreConflict as exc:
            log.warning("session %s: %s", npc.id, exc)
            raise ServeError("store_conflict", f"the session could not be saved: {exc}") from None
        except StoreError as exc:
            log.error("session %s: %s", npc.id, exc)
            raise ServeError("store_error", f"the session could not be saved: {exc}") from None

    def restore(self) -> int:
        """Serve again every session the store holds (at start): each continues where it stopped. A
        session that cannot be (its asset gone or changed so its history no longer fits) is logged
        at ERROR with why, listed in ``not_restored``, and left in the store. Returns how many came back.
        A shared store's sessions are not loaded here (every replica would hold all of them): ``get``
        loads each as it is asked for."""
        if self.store.shared:
            log.info("sessions are read from %s as they are asked for", self.store.label)
            return 0
        count = 0
        for stored in self.store.load():
            npc = self._served_again(stored)
            if npc is not None:
                self.sessions[stored.id] = npc
                count += 1
        if count or self.not_restored:
            log.info("%d session(s) back from %s", count, self.store.label)
        return count

    def _served_again(self, stored: StoredSession) -> NPC | None:
        """The session ``stored`` holds, as it stopped; None if it cannot be served (its asset gone or
        changed so its history no longer fits), which is logged at ERROR and listed in ``not_restored``."""
        try:
            if stored.history is None:
                raise InputError([Problem("error", "the stored history is not JSON", stored.id)])
            path = self.resolve_asset(stored.asset)
            source = f"session {stored.id} in {self.store.label}"
            saved = history_from_dict(stored.history, source)
            session = Session(load_asset(path), self.backend, path.parent, session_id=stored.id)
            session.agent.import_dialog(saved, source)
        except (InputError, ServeError) as exc:
            why = "; ".join(str(p) for p in exc.problems[:3]) if isinstance(exc, InputError) else exc.message
            self.not_restored[stored.id] = why
            log.error("session %s (%s) is in the store but cannot be served again: %s", stored.id, stored.asset, why)
            return None
        self.not_restored.pop(stored.id, None)
        npc = NPC(stored.id, stored.asset, session)
        npc.revision, npc.last_run, npc.saved = stored.revision, stored.last_run, stored.history
        return npc

    def get(self, session_id: str) -> NPC:
        npc = self.sessions.get(session_id)
        if self.store.shared:
            npc = self._as_stored(session_id, npc)
        if npc is None:
            raise ServeError("unknown_session", f"no session {session_id[:80]!r} (GET /v1/sessions lists them)")
        npc.used = time.monotonic()
        return npc

    def _make_room(self) -> None:
        """With a shared store, the sessions in memory are a cache of it: past ``max_sessions`` the
        least recently used idle one nobody watches leaves memory (it stays in the store, and is read
        again when asked for). Called with the lock, or on the event loop."""
        if not self.store.shared:
            return
        while self.held() >= self.limits.max_sessions:
            idle = [npc for npc in self.sessions.values() if npc.running is None and not npc.watchers]
            if not idle:
                return
            oldest = min(idle, key=lambda npc: npc.used)
            del self.sessions[oldest.id]
            self.release_caches(oldest.id)
            log.info("session %s left memory (it stays in %s)", oldest.id, self.store.label,
                     extra={"session": oldest.id})

    def _as_stored(self, session_id: str, npc: NPC | None) -> NPC | None:
        """With a shared store, the session as the store has it now: another replica may have made it,
        moved it on (it was served there while this one was away) or deleted it. One indexed SELECT
        when nothing changed; the whole session is read only when its revision moved."""
        if npc is not None and npc.running is not None:
            return npc  # its own turn is writing it (a write over another's would be refused)
        if not SESSION_ID.fullmatch(session_id):
            return npc
        try:
            revision = self.store.revision_of(session_id)
            if npc is not None and revision == npc.revision:
                return npc
            stored = self.store.load_one(session_id) if revision is not None else None
        except StoreError as exc:
            log.error("session %s: %s", session_id, exc)
            raise ServeError("store_error", f"the session could not be read: {exc}") from None
        fresh = self._served_again(stored) if stored is not None else None
        if fresh is None and stored is not None:
            raise ServeError("unknown_session", f"session {session_id!r} is in {self.store.label} but cannot be "
                             f"served: {self.not_restored.get(session_id, '')}")
        # No self._lock: turn() holds it around this call, and sessions change only on the event loop
        if fresh is None:
            self.sessions.pop(session_id, None)  # deleted by another replica
        else:
            if npc is not None:
                fresh.watchers = npc.watchers  # observers here keep watching the session
            else:
                self._make_room()
            self.sessions[session_id] = fresh
        if fresh is not None:
            log.info("session %s: read from %s at revision %d", session_id, self.store.label, fresh.revision,
                     extra={"session": session_id})
        return fresh

    def idle(self, session_id: str) -> NPC:
        npc = self.get(session_id)
        if npc.running is not None:
            raise ServeError("busy", f"session {session_id!r} is running a turn; wait for it or cancel it")
        return npc

    def delete(self, session_id: str) -> None:
        npc = self.get(session_id)
        with self._lock:
            self.sessions.pop(session_id, None)
            self._stop_all(npc, "cancelled")
        for queue in list(npc.watchers):
            queue.put_nowait(None)
        npc.watchers.clear()
        try:
            self.store.delete(session_id)
        except StoreError as exc:
            log.error("session %s: %s", session_id, exc)
        self.release_caches(session_id)
        log.info("session %s deleted", session_id, extra={"session": session_id})

    def release_caches(self, session_id: str) -> None:
        """Free the session's node caches in the backend: the server names them "SESSION/NODE" (a
        scene's "scene:SCENE/NPC/NODE"). On a thread of its own: freeing a cache waits for the model,
        which another session's turn may be using for seconds, and the event loop must not wait (a
        DELETE held every request, health checks too, for 12.5 s)."""
        release = getattr(self.backend, "release", None)
        sessions = getattr(self.backend, "sessions", None)
        if not (callable(release) and callable(sessions)):
            return
        keys = [k for k in sessions() if k.startswith(f"{session_id}/")]
        if keys:
            self.start_thread(self._release, (release, keys), f"parley-release-{session_id}"[:64])

    def _release(self, release: Callable[[str], None], keys: list[str]) -> None:
        try:
            for key in keys:
                release(key)
        except Exception:  # a cache left is memory until the backend closes, not a failure anyone waits on
            log.warning("freeing the node caches %s failed", ", ".join(keys), exc_info=True)
        finally:
            self.thread_ends(lambda: None)

    def set_variables(self, session_id: str, variables: dict[str, Any]) -> NPC:
        npc = self.idle(session_id)
        unknown = sorted(set(variables) - set(npc.agent.asset.variables))
        if unknown:
            raise ServeError("bad_request", f"variables: the asset declares no variable {unknown[0]!r}")
        for name, value in variables.items():
            npc.agent.set_variable(name, value)
        self.persist(npc)
        return npc

    def change_params(self, session_id: str, nodes: dict[str, dict[str, Any]]) -> NPC:
        npc = self.idle(session_id)
        agent = npc.agent
        before = (agent.asset, dict(agent._nodes), dict(agent.system_prompts))
        try:
            for node_id, changes in nodes.items():
                agent.change_params(node_id, changes)
        except BaseException as exc:
            agent.asset, agent._nodes, agent.system_prompts = before[0], before[1], before[2]
            if isinstance(exc, KeyError):
                raise ServeError("unknown_node", str(exc.args[0])) from None
            if isinstance(exc, StructuralChange):
                raise ServeError("structural_change", str(exc),
                                 [Problem("error", str(exc), npc.asset_path, exc.node_id, exc.field)]) from None
            if isinstance(exc, ValueError):
                raise ServeError("bad_request", str(exc)) from None
            raise
        self.persist(npc)  # a changed system prompt is part of the dialog; sampling is not kept
        return npc

    def export_history(self, session_id: str) -> dict[str, Any]:
        """The session's history; while a turn runs, as it was when the last change finished (what a
        save wants: the running turn is not part of it until it finishes)."""
        npc = self.get(session_id)
        if npc.running is None:
            return history_to_dict(npc.agent.export_dialog())
        assert npc.saved is not None, "every session is saved before its first turn can run"
        return npc.saved

    def import_history(self, session_id: str, raw: Any) -> NPC:
        npc = self.idle(session_id)
        source = f"history for session {session_id}"
        try:
            npc.agent.import_dialog(history_from_dict(raw, source), source)
        except InputError as exc:
            raise ServeError("bad_history", "the history does not fit this session's asset", exc.problems) from None
        npc.details.clear()
        self.persist(npc)
        return npc

    def rewind(self, session_id: str, turns: int) -> NPC:
        npc = self.idle(session_id)
        try:
            npc.agent.rewind(turns)
        except IndexError as exc:
            raise ServeError("bad_request", str(exc)) from None
        self.persist(npc)
        return npc

    # --- turns --------------------------------------------------------------------------------

    def check_line(self, line: str, instructions: str) -> None:
        for name, text in (("line", line), ("instructions", instructions)):
            if len(text) > self.limits.max_line:
                raise ServeError("too_large", f"{name}: {len(text)} characters; the limit is {self.limits.max_line} "
                                 "(--max-line)")

    def turn(self, session_id: str, line: str, instructions: str, mock_tools: bool,
             regenerate: int | None = None, cancel_on_disconnect: bool = False) -> Stream:
        """Start a turn, or queue it behind the running one (the asset's ``double_text``); its events
        arrive on the returned stream, the last one turn_finished or turn_failed."""
        self.check_line(line, instructions)
        if self.closing:
            raise ServeError("shutting_down", "the server is shutting down: it takes no new turns")
        loop = asyncio.get_running_loop()
        with self._lock:
            npc = self.get(session_id)
            turns = len(npc.agent.history.turns)
            if npc.running is None and regenerate is not None and not 0 <= regenerate < turns:
                raise ServeError("unknown_turn", f"turn {regenerate}: the session has {turns} turns (they count "
                                 "from 0)")
            if npc.running is not None:
                self._spoken_over(npc, regenerate)
            if regenerate is not None and npc.running is None:
                line = npc.agent.history.turns[regenerate].player
            job = Job(Stream(loop, self.limits.max_stream_events, npc.notify, line, cancel_on_disconnect, npc.id),
                      line, instructions, mock_tools, regenerate)
            if npc.running is None:
                npc.running = job.stream.running
            else:
                npc.queued.append(job)
                job.stream.put(Item("turn_queued", {"session": npc.id, "line": line, "run": job.stream.run,
                                                    "position": len(npc.queued)}))
                return job.stream
        self._begin(npc, job)
        return job.stream

    def _spoken_over(self, npc: NPC, regenerate: int | None) -> None:
        """The player speaks while ``npc`` answers: refuse the line, or make way for it (called with the lock)."""
        policy = "reject" if regenerate is not None else npc.agent.asset.double_text
        if policy == "reject":
            raise ServeError("busy", f"session {npc.id!r} is running a turn; wait for it or cancel it (its asset's "
                             f"double_text is {npc.agent.asset.double_text})")
        if len(npc.queued) >= MAX_QUEUED:
            raise ServeError("busy", f"session {npc.id!r} has {MAX_QUEUED} lines waiting already, its limit")
        if policy in ("latest_wins", "interrupt"):
            self._drop_queued(npc, "superseded")
            assert npc.running is not None
            npc.running.spoken_over = "superseded" if policy == "latest_wins" else "interrupted"
            self.stop(npc.running)

    def _drop_queued(self, npc: NPC, code: str) -> None:
        """End every line waiting in ``npc``'s queue with turn_failed ``code``, unrun."""
        while npc.queued:
            job = npc.queued.popleft()
            self.stop(job.stream.running)
            message = CANCELLED_MESSAGE if code == "cancelled" else "the player spoke again before this line's turn began"
            job.stream.put(Item("turn_failed", {"line": job.line, "error": Failure(code, message).to_json()}), last=True)
            job.stream.close()

    def _stop_all(self, npc: NPC, code: str) -> bool:
        """Drop the lines waiting, and stop the running turn; whether one was stopped in time."""
        self._drop_queued(npc, code)
        return npc.running is not None and self.stop(npc.running)

    def _begin(self, npc: NPC, job: Job) -> None:
        """Run ``job`` on a thread of its own (``npc.running`` is already its turn)."""
        stream = job.stream
        npc.stream = stream  # the run before it can no longer be resumed
        index = job.regenerate if job.regenerate is not None else len(npc.agent.history.turns)
        stream.turn = index
        stream.put(Item("turn_started", {"session": npc.id, "turn": index, "line": job.line, "run": stream.run}))
        self.start_thread(self._run, (npc, job), f"parley-turn-{npc.id}")

    def start_thread(self, target: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        """Run ``target(*args)`` on a thread of its own, which ``close`` waits for; ``target`` ends by
        calling ``thread_ends``."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def thread_ends(self, leaving: Callable[[], None], *, still_running: bool = False) -> None:
        """The calling thread (of ``start_thread``) ends: ``leaving()`` runs with the lock held (what it
        leaves behind: its session or scene idle again). ``still_running``: the thread goes on with
        work nobody waits for (a scene's read-ahead), and calls this again when it ends."""
        with self._lock:
            leaving()
            if not still_running:
                self._threads.discard(threading.current_thread())

    def _run(self, npc: NPC, job: Job) -> None:
        stream, running, line, regenerate = job.stream, job.stream.running, job.line, job.regenerate
        started = time.perf_counter()
        first_token: list[float] = []
        about_turn(npc.id, regenerate if regenerate is not None else len(npc.agent.history.turns))
        heard: dict[str, list[str]] = {}  # node -> what the player has heard of its reply so far

        def on_event(event: Event) -> None:
            if isinstance(event, TurnFinished):
                return  # the stream's own turn_finished follows, with the turn's id and diagnostics
            if isinstance(event, Token) and not first_token:
                first_token.append(time.perf_counter() - started)
                self.metrics.first_token.observe(first_token[0])
            if isinstance(event, Token):
                heard.setdefault(event.node, []).append(event.text)
            stream.put(Item(event.kind, event_data(event)))
            if stream.overflowed:
                running.cancel.set()

        run = {"instructions": job.instructions, "on_event": on_event, "cancel": running.cancel,
               "tool_result": self.asking_the_game(stream, running), "mock_tools": job.mock_tools,
               "commit": running.keep}
        self.take_a_worker()
        noted = None
        if self.crash_watch is not None:
            index = regenerate if regenerate is not None else len(npc.agent.history.turns)
            of = f"session {npc.id} ({npc.asset_path})"
            noted = self.crash_watch.running(turn_note(index + 1, of))
            run["on_event"] = noting_nodes(npc.agent, noted, of, on_event)
        before = npc.agent.export_dialog() if not isinstance(self.store, NoStore) else None
        try:
            if regenerate is not None:
                result = npc.agent.regenerate(regenerate, **run)
            else:
                result = npc.agent.run_turn(line, **run)
            record = self._record(npc, line, result)
            last = Item("turn_finished", {"turn": record.index, **record.to_json()})
            # before the game hears of the turn: a turn it heard of is a stored turn
            self.persist(npc, self._last_run(stream, last, record))
        except ServeError as exc:  # the store refused it: the turn is taken back, as a failed turn is
            if before is not None:
                npc.agent.import_dialog(before)
            last = Item("turn_failed", {"line": line, "error": Failure(exc.code, exc.message).to_json()})
        except BaseException as exc:  # noqa: BLE001 - every failure ends the stream with a typed error, never a traceback
            last = Item("turn_failed", {"line": line, "error": self.failure(exc, stream)})
            if running.spoken_over == "interrupted" and regenerate is None and last.data["error"]["code"] == "cancelled":
                last = self._keep_cut(npc, line, heard, before)
        finally:
            if noted is not None:
                noted.done()
            self.give_the_worker_back()
            with self._lock:
                # idle before the client hears the turn ended (its next request is not refused), or
                # busy with the next line in the queue
                following = npc.queued.popleft() if npc.queued and npc.id in self.sessions else None
                npc.running = following.stream.running if following is not None else None
                self._threads.discard(threading.current_thread())
        seconds = time.perf_counter() - started
        if last.kind == "turn_finished":
            self.metrics.turns.inc()
            self.metrics.turn_seconds.observe(seconds)
            log.info("turn finished in %.0f ms", seconds * 1000)
        else:
            error = last.data["error"]
            self.metrics.failures.labels(error["code"]).inc()
            asked = error["code"] in ("cancelled", "superseded", "interrupted")  # what a player or the game asked for
            log.log(logging.INFO if asked else logging.WARNING, "turn failed (%s) in %.0f ms: %s", error["code"],
                    seconds * 1000, error["message"])
        stream.put(last, last=True)
        stream.close()
        if following is not None:
            self._begin(npc, following)

    def take_a_worker(self) -> None:
        """Wait for one of the ``workers`` places (a turn's thread, before it computes)."""
        self.metrics.waiting.inc()
        self._computing.acquire()
        self.metrics.waiting.dec()
        self.metrics.running.inc()

    def try_a_worker(self) -> bool:
        """Take one of the ``workers`` places if one is free now (work that only saves time later: a
        scene's read-ahead never makes a turn wait for a place)."""
        if not self._computing.acquire(blocking=False):
            return False
        self.metrics.running.inc()
        return True

    def give_the_worker_back(self) -> None:
        self.metrics.running.dec()
        self._computing.release()

    def asking_the_game(self, stream: Stream, running: RunningTurn,
                        about: Callable[[], dict[str, Any]] = dict) -> Callable[[str, str, dict[str, Any]], str]:
        """The ``tool_result`` of a turn run on a worker: each call is sent to the client as
        ``tool_request`` (its data with ``about()``'s first: a scene's speaker) and waits up to
        ``--tool-timeout`` for its answer (``answer_call``), giving its worker place up meanwhile."""

        def tool_result(node: str, tool: str, arguments: dict[str, Any]) -> str:
            call_id = secrets.token_hex(8)
            answered, result = threading.Event(), []
            with running.lock:
                running.calls[call_id] = (answered, result)
            stream.put(Item("tool_request", {**about(), "node": node, "tool": tool, "arguments": arguments,
                                             "call_id": call_id}))
            self._computing.release()  # waiting for the client is not computing
            try:
                in_time = answered.wait(self.limits.tool_timeout)
            finally:
                self._computing.acquire()
            if not in_time:
                log.warning("the client did not answer tool call %s (%s, node %s) within %g s: the turn fails",
                            call_id, tool, node, self.limits.tool_timeout)
                raise ToolTimeout(f"the client did not answer the {tool!r} call within {self.limits.tool_timeout:g} s "
                                  "(--tool-timeout)", node)
            with running.lock:
                running.calls.pop(call_id, None)
            if running.cancel.is_set():
                raise TurnCancelled("the turn was cancelled", node)
            return result[0]

        return tool_result

    def _keep_cut(self, npc: NPC, line: str, heard: dict[str, list[str]], before: Any) -> Item:
        """The player spoke over the reply (double_text: interrupt): the line stays in the history
        with what was heard of the reply, cut off, and the stream ends with turn_failed ``interrupted``."""
        entries: list[Entry] = []
        for node_id, pieces in heard.items():
            node = npc.agent.asset.node(node_id) if node_id in npc.agent.asset.node_ids() else None
            text = "".join(pieces).strip()
            if node is not None and node.PLAYER_FACING and text:
                entries.append(Reply(node_id, text + CUT))
        npc.agent.keep_cut_turn(line, entries)
        message = ("the player spoke again: the line stays in the history, with what was said of the reply "
                   f"({sum(len(p) for pieces in heard.values() for p in pieces)} characters) cut off with {CUT!r}")
        try:
            self.persist(npc)
        except ServeError as exc:
            if before is not None:
                npc.agent.import_dialog(before)
            return Item("turn_failed", {"line": line, "error": Failure(exc.code, exc.message).to_json()})
        return Item("turn_failed", {"line": line, "error": Failure("interrupted", message).to_json()})

    @staticmethod
    def _last_run(stream: Stream, last: Item, record: TurnRecord) -> dict[str, Any]:
        """What the store keeps of a finished run, for a client that resumes it on another server: its
        turn_finished, with the record as ``GET turns/{id}`` gives a turn this server did not run, and
        what the game reacts to (the guard that fired, the game events reached)."""
        lean = TurnRecord(record.turn_id, record.index, record.line, record.reply, guard=record.guard,
                          game_events=list(record.game_events), tags=dict(record.tags))
        return {"run": stream.run, "id": stream.event_id(stream.sent + 1), "kind": last.kind,
                "data": {"turn": record.index, **lean.to_json()}}

    @staticmethod
    def failure(exc: BaseException, stream: Stream) -> dict[str, str]:
        if stream.running.shutdown and isinstance(exc, TurnCancelled):
            return Failure("cancelled", "the server is shutting down: the turn was cancelled and the session left as "
                           "it was before it; say the line again when it is back").to_json()
        if stream.running.spoken_over == "superseded" and isinstance(exc, TurnCancelled):
            return Failure("superseded", "the player spoke again: this turn and its line were dropped").to_json()
        if stream.overflowed:
            return Failure("stream_limit", f"the turn's stream passed {stream.limit} events (--max-stream-events) "
                           "and was stopped").to_json()
        failure = failure_of(exc)
        if failure.unexpected:
            log.error("a turn failed unexpectedly", exc_info=exc)
            failure = replace(failure, message=f"the turn failed: {type(exc).__name__}")  # no internals on the wire
        return failure.to_json()

    def _record(self, npc: NPC, line: str, result: TurnResult) -> TurnRecord:
        record = TurnRecord.of(line, result)
        npc.details[result.turn_id] = record
        while len(npc.details) > KEPT_TURN_DETAILS:
            npc.details.popitem(last=False)
        return record

    def cancel(self, session_id: str) -> bool:
        """Stop the running turn and every line waiting behind it. False: none was running."""
        npc = self.get(session_id)
        with self._lock:
            waiting = len(npc.queued)
            stopped = self._stop_all(npc, "cancelled")
        if stopped:
            log.info("session %s: the client cancelled the running turn%s", npc.id,
                     f" and {waiting} line(s) waiting behind it" if waiting else "",
                     extra={"session": npc.id, "turn": npc.stream.turn if npc.stream else None})
        return stopped

    def resume(self, session_id: str, run: str) -> Stream | Item:
        """The run ``run`` of a session, to follow again: its stream while this server keeps it, else
        its turn_finished as the store kept it (the run finished on a server that has stopped since)."""
        npc = self.get(session_id)
        for stream in [npc.stream, *(job.stream for job in npc.queued)]:
            if stream is not None and stream.run == run:
                return stream
        kept = npc.last_run
        if kept is not None and kept.get("run") == run:
            return Item(kept["kind"], kept["data"])
        raise ServeError("unknown_run", f"session {session_id!r} has no run {run[:40]!r} to resume: the server that "
                         "ran it stopped before the turn finished, or a later turn began since; a turn that did not "
                         "finish was not kept, so say its line again")

    @staticmethod
    def stop(running: RunningTurn) -> bool:
        """Stop the running turn; False when it came too late (the turn was kept already)."""
        with running.lock:
            if running.kept:
                return False
            running.cancel.set()
            for answered, _ in running.calls.values():
                answered.set()  # a turn waiting for a tool result stops waiting
        return True

    def tool_result(self, session_id: str, call_id: str, result: str) -> None:
        self.answer_call(self.get(session_id).running, call_id, result, f"session {session_id!r}")

    def answer_call(self, running: RunningTurn | None, call_id: str, result: str, where: str) -> None:
        """Hand the client's ``result`` to the tool call ``call_id`` its running turn waits for."""
        if len(result) > self.limits.max_body:
            raise ServeError("too_large", "result: longer than the request limit")
        call = None
        if running is not None and CALL_ID.fullmatch(call_id):
            with running.lock:
                call = running.calls.get(call_id)
        if call is None or call[0].is_set():
            raise ServeError("unknown_call", f"no tool call {call_id[:80]!r} is waiting in {where}")
        answered, slot = call
        slot.append(result)
        answered.set()

    def watch(self, session_id: str) -> asyncio.Queue[Item | None]:
        npc = self.get(session_id)
        if len(npc.watchers) >= self.limits.max_watchers:
            raise ServeError("limit_reached", f"session {session_id!r} has {self.limits.max_watchers} observers, "
                             "the limit")
        queue: asyncio.Queue[Item | None] = asyncio.Queue()
        npc.watchers.add(queue)
        return queue

    def unwatch(self, session_id: str, queue: asyncio.Queue[Item | None]) -> None:
        npc = self.sessions.get(session_id)
        if npc is not None:
            npc.watchers.discard(queue)
