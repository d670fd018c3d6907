"""Following a session of ``parley serve`` live in the editor (Backend > Attach to Server…).

``ServerAttach`` lives on the UI thread and follows one session of a running server. Its worker
(``SessionFollower``, on a ``ThreadJob``) subscribes to the session's watch stream
(``GET /v1/sessions/{id}/events``), then reads the session's history and the details of its turns,
and after each turn that finishes there, that turn's. The service shows them in the window's test
conversation's ``SessionView`` as a local turn is shown, through the view's own methods: the dialog
history, each turn as an ``InspectedTurn`` made from a runtime ``TurnResult``, and the running turn's
events as runtime events; so the Conversation dock, the Turn Inspector, Raw JSON and the canvas's path
marks show a followed turn with no second way in. Meanwhile the conversation is read-only (the window
sets the Conversation dock so), and the window's own conversation waits aside in the view
(``SessionView.put_aside``); Detach brings it back. The follower never touches the local conversation
itself: Take over asks it through the view's ``ConversationActions``, as the docks do.

Nothing here changes the session on the server: following only reads, Detach closes the stream, and
Take over copies the session's history into the local agent, to go on from any turn here.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from editor.session.record import InspectedTurn, inspected_turn
from editor.session.view import SessionView
from editor.threads.thread_job import ThreadJob
from editor.threads.thread_service import SHUTDOWN_WAIT_MS, ThreadService
from runtime.agent import TurnResult
from runtime.dialogue.dialog_file import history_from_dict
from runtime.dialogue.history import SavedDialog
from runtime.events import Event
from runtime.problems import InputError
from runtime.session.failures import Failure

if TYPE_CHECKING:
    from runtime.serve.client import ParleyClient, ServerEvent
    from runtime.serve.protocol import SessionOut
    from runtime.session.record import TurnRecord

log = logging.getLogger("parley.editor")

# Seconds a request may take to connect or between bytes (the watch stream waits on turns for ever)
REQUEST_TIMEOUT = 10.0
DEFAULT_ADDRESS = "http://127.0.0.1:8765"  # parley serve's own default


def server_address(text: str) -> str:
    """The server's base URL from what the designer typed ("127.0.0.1:8765" gets its http://).
    Raises ValueError saying what is wrong."""
    url = text.strip().rstrip("/")
    if not url:
        raise ValueError("Type the server's address, such as http://127.0.0.1:8765 "
                         "(what `parley serve` printed when it started).")
    if "://" not in url:
        url = f"http://{url}"
    import httpx  # here and below, not at the top: the window imports this module as it starts (0.1 s)

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ValueError(f"{text.strip()!r} is not a server address: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{text.strip()!r} is not a server address: use http://HOST:PORT, as `parley serve` "
                         "printed it.")
    if parsed.path.rstrip("/").endswith("/v1"):
        url = url[: url.rfind("/v1")]  # the routes' prefix is the client's to add
    return url


@dataclass(frozen=True)
class ServerAddress:
    """Where the server is, and the token it wants (never saved: see ``AttachDialog``)."""

    url: str
    token: str = field(default="", repr=False)

    def client(self, timeout: float = REQUEST_TIMEOUT) -> ParleyClient:
        from runtime.serve.client import ParleyClient

        return ParleyClient(self.url, self.token or None, timeout=timeout)


def via_label(url: str, backend: str) -> str:
    """How a followed session's turns say where they ran (the chat's "via ..." line, the Turn Inspector)."""
    return f"server {url} \u00b7 {backend}" if backend else f"server {url}"


def error_text(exc: BaseException, url: str) -> str:
    """A server's error in the designer's words, with what to do."""
    import httpx

    from runtime.serve.client import ParleyError

    if isinstance(exc, ParleyError):
        if exc.code == "unauthorized":
            return (f"{url} wants a token: type the one the server was started with (the variable named by its "
                    f"--token-env, PARLEY_SERVE_TOKEN by default). The server said: {exc.message}")
        if exc.code == "unavailable":
            return f"Nothing answers at {url}: is `parley serve` running there? ({exc.message})"
        if exc.code == "unknown_session":
            return f"The session is gone from {url} (the game ended it, or the server restarted)."
        return f"{url} answered {exc.code}: {exc.message}"
    if isinstance(exc, httpx.HTTPError):
        return f"Nothing answers at {url}: is `parley serve` running there? ({exc})"
    return f"{type(exc).__name__}: {exc}"


# --- from the server's records to the runtime's objects -----------------------------------------


def turn_result(record: TurnRecord, backend: str = "") -> TurnResult | None:
    """A turn the server ran, as the runtime's ``TurnResult`` (None when it kept no diagnostics: a turn
    imported there, one older than the server keeps, or an asset with diagnostics off)."""
    if record.diagnostics is None:
        return None
    return dataclasses.replace(record, backend=backend).result()


def runtime_event(event: ServerEvent) -> Event | None:
    """A watch stream's node event as the runtime's (what the Conversation dock shows as a turn runs);
    None for the kinds that are not one (turn_started, tool_request, turn_finished, ...)."""
    from runtime.serve.protocol import (
        event_from_data,  # not at the top: the window imports this module as it starts
    )

    try:
        return event_from_data(event.kind, event.data)
    except ValueError:
        log.warning("a %s event from the server did not fit: %r", event.kind, event.data)
        return None


@dataclass
class SessionRead:
    """What the follower read of a session: the session, its dialog history (None when it could not be
    read), the turns with diagnostics (in order), and what could not be read."""

    session: SessionOut
    saved: SavedDialog | None
    turns: list[TurnResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_session(client: ParleyClient, session_id: str, turn_ids: list[int] | None = None) -> SessionRead:
    """Read ``session_id``: its history and the details of ``turn_ids`` (None: every turn of the current
    branch). What cannot be read is noted, not raised, except the session itself (ParleyError)."""
    from runtime.serve.client import ParleyError

    session = client.session(session_id)
    notes: list[str] = []
    saved = None
    try:
        saved = history_from_dict(client.export_history(session_id), f"{session_id} (from {client.http.base_url})")
    except ParleyError as exc:
        notes.append(f"the history could not be read: {exc.message}")
    except InputError as exc:
        notes.append("the history did not fit: " + "; ".join(str(p) for p in exc.problems[:3]))
    if turn_ids is None:
        turn_ids = [t.turn_id for t in client.turns(session_id)]
    turns = []
    for turn_id in turn_ids:
        try:
            result = turn_result(client.turn_detail(session_id, turn_id), session.backend)
        except ParleyError as exc:
            notes.append(f"turn {turn_id}'s details could not be read: {exc.message}")
            continue
        except (ValueError, TypeError) as exc:
            notes.append(f"turn {turn_id}'s diagnostics did not fit: {str(exc).splitlines()[0]}")
            continue
        if result is not None:
            turns.append(result)
    return SessionRead(session, saved, turns, notes)


# --- the follower (on a thread job of its own) ---------------------------------------------------


class SessionFollower:
    """Reads one session's watch stream, on the thread of the job that calls ``follow``, until ``stop``
    (callable from any thread)."""

    def __init__(self, address: ServerAddress, session_id: str) -> None:
        self.address = address
        self.session_id = session_id
        self.client = address.client()
        self.watch = self.client.watch(session_id)
        self.stopping = threading.Event()

    def stop(self) -> None:
        """End the stream (its iterator ends at once); ``follow`` then returns."""
        self.stopping.set()
        self.watch.close()

    def follow(self, report: Callable[[tuple[str, object]], None]) -> str:
        """Follow the stream, reporting ("opened", SessionRead) once subscribed, with the session so
        far; ("event", ServerEvent) for each event; ("turn_read", SessionRead) after a turn finished
        (its turns: that one). Returns why it stopped ("" when stopped here)."""
        import httpx

        from runtime.serve.client import ParleyError

        reason = ""
        try:
            for event in self.watch:
                if self.stopping.is_set():
                    break
                if event.kind == "watching":
                    # subscribed first, read second: a turn that ends meanwhile is read twice, never missed
                    report(("opened", read_session(self.client, self.session_id)))
                elif event.kind == "turn_finished":
                    report(("event", event))
                    turn_id = event.data.get("turn_id")
                    ids = [int(turn_id)] if isinstance(turn_id, int) else []
                    report(("turn_read", read_session(self.client, self.session_id, ids)))
                else:
                    report(("event", event))
            if not self.stopping.is_set():
                reason = "the server ended the stream (it stopped, or the session was deleted)"
        except (ParleyError, httpx.HTTPError) as exc:
            if not self.stopping.is_set():
                reason = error_text(exc, self.address.url)
        except Exception as exc:  # following must end and say why, whatever broke
            log.exception("following %s failed", self.session_id)
            if not self.stopping.is_set():
                reason = f"{type(exc).__name__}: {exc}"
        finally:
            self.client.close()
        return reason


# --- the UI side -----------------------------------------------------------------------------------


class ServerAttach(ThreadService):
    """The window's following of a session on ``parley serve`` (one at a time). Every signal here is
    emitted on the UI thread."""

    changed = Signal()  # following started or stopped, or what it says (``status``, ``mismatch``) changed
    opened = Signal()  # the session's turns so far are shown
    turn_shown = Signal(object)  # InspectedTurn of a turn that finished on the server, once the docks have it
    ended = Signal(str)  # following stopped (detached, taken over, or the server went away): why
    taken_over = Signal()  # the session's history is the local conversation's now

    def __init__(self, view: SessionView, parent: QObject | None = None) -> None:
        super().__init__("parley-attach", parent)
        self.view = view
        self.document = view.actions.document
        self.address: ServerAddress | None = None
        self.session: SessionOut | None = None
        self.following = False  # the stream is open (False once the server went away; the view stays)
        self.status = ""  # what the attach panel says of the session
        self.mismatch = ""  # why the path marks are off: the open document is not the session's asset
        self.notes: list[str] = []  # what the latest read could not read
        self.follower: SessionFollower | None = None
        self.follow_job: ThreadJob | None = None  # the follower's ``follow``, while it runs
        self.request: ThreadJob | None = None  # Take over's export, while it runs
        self._generation = 0
        self._live_turn = False  # a turn_started was seen: its events go to the chat
        self._imported: SavedDialog | None = None  # Take over's history, until the local agent has it
        self._carried: tuple[dict[int, InspectedTurn], dict[int, str]] = ({}, {})
        self.document.reset.connect(self._document_replaced)  # after the conversation's own restart

    @property
    def attached(self) -> bool:
        return self.session is not None

    # --- following ------------------------------------------------------------------------------

    def attach(self, address: ServerAddress, session: SessionOut) -> str:
        """Follow ``session`` on the server at ``address``, in place of the window's own conversation
        (which comes back on Detach). Returns why it cannot ("" when it does)."""
        view = self.view
        if self.closed or view.actions.closed:
            return "The window is closing."
        if view.busy:
            return "A turn is running here: stop it or let it finish, then attach."
        if self.request is not None:
            return "Taking over is still under way."
        if self.attached:
            self.detach()
        view.actions.stop_replay()
        view.put_aside()
        self.address, self.session = address, session
        self.following, self.notes, self._live_turn = True, [], False
        self.mismatch = self._mismatch()
        self.status = f"Connecting to {address.url}\u2026"
        self._generation += 1
        # Each step carries the follower's generation, so what a stopped follower still sent is known.
        g = self._generation
        follower = SessionFollower(address, session.id)
        job = ThreadJob(lambda: follower.follow(job.report), name=self.thread_name, cancel=follower.stopping,
                        parent=self)
        job.yielded.connect(lambda step: self._step(g, step))
        job.finished.connect(lambda: self._ended(g, job.result or ""))
        self.follower, self.follow_job = follower, job
        view.announce()
        self.changed.emit()
        job.start()
        return ""

    def detach(self) -> None:
        """Stop following; the session on the server goes on untouched (only the stream is closed),
        and the window's own conversation is back."""
        if not self.attached:
            return
        self._stop_following()
        self._bring_back()
        self._forget("Detached: the session goes on on the server, untouched.")

    def draws_paths(self) -> bool:
        """Whether the canvas may mark a turn's path: not when a followed session runs another asset."""
        return not self.attached or not self.mismatch

    def _stop_following(self) -> None:
        self._generation += 1  # whatever the old follower still sent is stale now
        follower, job = self.follower, self.follow_job
        self.follower, self.follow_job, self.following = None, None, False
        if follower is not None:
            follower.stop()
        if job is not None:
            job.stop(SHUTDOWN_WAIT_MS)  # one that does not stop is left to end by itself

    def _bring_back(self) -> None:
        """The window's own conversation, as it was before attaching, in the docks again."""
        self.view.bring_back()

    def _forget(self, why: str) -> None:
        self.session = self.address = None
        self.status, self.mismatch, self.notes = "", "", []
        self._live_turn = False
        self.changed.emit()
        self.ended.emit(why)

    def _document_replaced(self) -> None:
        """Another asset was opened (the conversation restarted): the session is not this document's."""
        if self.attached:
            self._stop_following()
            self.view.drop_aside()  # the window's own conversation was restarted with the new asset
            self._forget("Detached: another asset was opened.")

    # --- what the follower read (UI thread) ------------------------------------------------------

    def _step(self, generation: int, step: tuple[str, object]) -> None:
        kind, value = step
        {"opened": self._opened, "event": self._event, "turn_read": self._turn_read}[kind](generation, value)

    def _opened(self, generation: int, read: SessionRead) -> None:
        if generation != self._generation:
            return
        self._show(read)
        self.opened.emit()

    def _turn_read(self, generation: int, read: SessionRead) -> None:
        if generation != self._generation:
            return
        records = self._show(read)
        if records:
            self.turn_shown.emit(records[-1])

    def _show(self, read: SessionRead) -> list[InspectedTurn]:
        """Put what was read into the conversation the docks show, as a local turn's would be."""
        shown = self.view
        self.session = read.session
        self.notes = read.notes
        label = via_label(self.address.url if self.address else "", read.session.backend)
        saved = read.saved if read.saved is not None else shown.saved
        for turn_id in saved.tree.nodes if saved.tree is not None else ():
            shown.mark_backend(turn_id, label)
        asset = self.document.asset
        records = [inspected_turn(result, asset) for result in read.turns]
        for record in records:
            shown.keep_record(record)
            shown.mark_backend(record.turn_id, label)
        self.mismatch = self._mismatch(saved)
        self._live_turn = False
        self.status = self._following_text()
        shown.show_history(saved, prune=False)
        if records:
            shown.finish_turn(records[-1])
        self.changed.emit()
        return records

    def _event(self, generation: int, event: ServerEvent) -> None:
        if generation != self._generation:
            return
        view, d = self.view, event.data
        if event.kind == "turn_started":
            self._live_turn = True
            number = d.get("turn")
            self.status = f"Turn {number + 1 if isinstance(number, int) else ''} is running on the server\u2026"
            view.begin_turn(str(d.get("line", "")))
            self.changed.emit()
        elif event.kind == "tool_request":
            self.status = (f"{d.get('node', '')} asks the game for {d.get('tool', '')}"
                           f"({', '.join(f'{k}={v!r}' for k, v in dict(d.get('arguments') or {}).items())})\u2026")
            self.changed.emit()
        elif event.kind == "turn_failed":
            self._live_turn = False
            error = Failure.from_json(d.get("error") or {})
            self.status = (f"A turn failed on the server ({error.code or '?'}: {error.message}); "
                           "the session is as it was before it.")
            view.show_history(view.saved, prune=False)  # the half-shown turn goes
            self.changed.emit()
        elif self._live_turn:
            shown = runtime_event(event)
            if shown is not None:
                view.show_event(shown)

    def _ended(self, generation: int, reason: str) -> None:
        if generation != self._generation:
            return
        if self.follow_job is not None:
            self.follow_job.deleteLater()  # its thread has stopped
        self.follower, self.follow_job, self.following = None, None, False
        if reason:
            self.status = f"Not following any more: {reason} What you see is the session as it was last read."
            self.changed.emit()

    def _following_text(self) -> str:
        session = self.session
        if session is None:
            return ""
        turns = f"{session.turns} turn{'s' if session.turns != 1 else ''}"
        busy = "; a turn is running" if session.busy else ""
        return f"Following live: {turns}{busy}. Read-only here: Take over to go on locally."

    def _mismatch(self, saved: SavedDialog | None = None) -> str:
        """Why the open document is not the session's asset ("" when it may be): the node ids the
        session's turns (``saved``: the dialog shown) name that the document lacks, or both the
        asset's name and file differ."""
        session, doc, view = self.session, self.document, self.view
        if session is None:
            return ""
        known = set(doc.asset.node_ids())
        named: set[str] = set()
        tree = (saved if saved is not None else view.saved).tree
        for node in tree.nodes.values() if tree is not None else ():
            named.update(entry.node for entry in node.turn.entries)
        for record in view.records.values():
            named.update(record.diagnostics.path)
            named.update(n.node for n in record.diagnostics.nodes)
        missing = sorted(named - known)
        file_name = Path(session.asset).name
        if missing:
            nodes = ", ".join(missing[:5]) + ("\u2026" if len(missing) > 5 else "")
            return (f"The open document is not this session's asset {file_name} (\u201c{session.asset_name}\u201d): "
                    f"it has no node {nodes}. Path marks are off; open {file_name} to see them.")
        open_name = Path(doc.path).name if doc.path else ""
        if session.asset_name != doc.asset.name and file_name != open_name:
            return (f"The session runs {file_name} (\u201c{session.asset_name}\u201d), not the open document "
                    f"(\u201c{doc.asset.name}\u201d). Path marks are off; open {file_name} to see them.")
        return ""

    # --- take over --------------------------------------------------------------------------------

    def take_over(self) -> str:
        """Copy the session's history (exported from the server now) into the local conversation, to
        go on, regenerate or replay from any turn here; following stops, the server's session is
        untouched. Returns why it cannot start ("" when it does: ``taken_over`` or ``changed`` follows)."""
        if not self.attached or self.address is None or self.session is None:
            return "Not attached to a session."
        if self.request is not None:
            return "Taking over is already under way."
        if self.mismatch:
            return f"Cannot take over into this document: {self.mismatch}"
        address, session_id = self.address, self.session.id

        def export() -> SavedDialog:
            with address.client() as client:
                return history_from_dict(client.export_history(session_id), f"{session_id} on {address.url}")

        job = self.request = ThreadJob(export, name="parley-server-request", exit_wait_ms=None, parent=self)
        job.finished.connect(lambda: self._exported(job.result, job.error))
        job.start()
        self.status = f"Copying the session's history from {address.url}\u2026"
        self.changed.emit()
        return ""

    def _exported(self, saved: object, error: object) -> None:
        request, self.request = self.request, None
        if request is not None:
            request.deleteLater()
        if not self.attached:
            return  # detached meanwhile
        if error is not None or not isinstance(saved, SavedDialog):
            problems = getattr(error, "problems", None)
            why = ("; ".join(str(p) for p in problems[:3]) if problems
                   else error_text(error, self.address.url if self.address else "") if isinstance(error, Exception)
                   else "no history")
            self.status = f"Could not take over: {why}. Still {'following' if self.following else 'attached'}."
            self.changed.emit()
            return
        view = self.view
        # Each turn's record and "via server" mark go with it: the local turns have the same ids.
        self._carried = (dict(view.records), dict(view.turn_backends))
        self._stop_following()
        self._bring_back()
        self._imported = saved
        view.history_changed.connect(self._local_history)
        view.history_rejected.connect(self._import_refused)
        if not view.actions.import_history(saved, f"session {self.session.id if self.session else ''}"):
            self._import_done()
            self._forget("Could not take over: a local turn is running.")
            return
        self._forget("Taken over: the session's turns are this window's conversation now; the session goes on "
                     "on the server, untouched.")
        self.taken_over.emit()

    def _local_history(self, saved: SavedDialog) -> None:
        """The local agent's history: once it is the imported one, give its turns their records back."""
        imported = self._imported
        if imported is None or saved.tree is None or imported.tree is None:
            return
        if set(saved.tree.nodes) != set(imported.tree.nodes) or saved.tree.current != imported.tree.current:
            return  # the agent made for the document first, before the import
        self._import_done()
        view = self.view
        records, marks = self._carried
        self._carried = ({}, {})
        for turn_id, record in records.items():
            if turn_id in saved.tree.nodes:
                view.keep_record(record)
        for turn_id, label in marks.items():
            if turn_id in saved.tree.nodes:
                view.mark_backend(turn_id, label)
        view.show_history(saved, prune=False)  # again, now with the records and the marks
        path = saved.tree.path()
        last = next((view.records[t] for t in reversed(path) if t in view.records), None)
        if last is not None:
            view.finish_turn(last)

    def _import_refused(self, message: str) -> None:
        self._import_done()
        self.ended.emit(f"The local agent refused the session's history: {message}")

    def _import_done(self) -> None:
        self._imported = None
        for signal, slot in ((self.view.history_changed, self._local_history),
                             (self.view.history_rejected, self._import_refused)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass  # not connected

    # --- shutting down ----------------------------------------------------------------------------

    def _cancel_work(self) -> None:
        self._generation += 1
        if self.follower is not None:
            self.follower.stop()  # its job then ends

    def _stop_jobs(self, timeout_ms: int) -> None:
        if self.follow_job is not None:
            self.follow_job.stop(timeout_ms)

    def _after_shutdown(self) -> None:
        self.follower, self.follow_job, self.following = None, None, False
        if self.request is not None:
            self.request.stop(None)  # each request ends within its timeout
            self.request = None
