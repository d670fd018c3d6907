"""The window's own conversation: the embedded runtime on a worker thread, shown through a ``SessionView``.

``RuntimeWorker`` lives on its own ``QThread`` and owns the runtime ``Session`` (its ``Agent`` and
backend: the embedded ``LlamaBackend``, or a server the designer picked in the backend picker): every
model call happens on that one thread, so a context is never touched from two. Switching the backend
keeps the conversation; the next turn runs on the new one. ``LiveConversation`` lives on the UI
thread; it sends the worker requests through queued signals and feeds what the worker reports to its
``view`` from the UI thread, so widgets (and pytest-qt's ``waitSignal``) only ever see signals from
the UI thread. It is the ``ConversationActions`` the docks call; they see it only as that.

Edits to the graph between turns apply to the next turn: the agent is rebuilt from
the document's asset and keeps its history. Context size and model are fixed for an
agent's lifetime (dialog-history-and-context-window.md), so edits to them are held
back, and the conversation offers a restart that applies them.

Closing the window cancels the running turn and every request the worker makes (to a server:
``runtime.backends.http.cancel_scope`` around each of its calls), so the thread ends at once even
on a server that never answers.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from editor.session.record import InspectedTurn, SnapshotUse, inspected_turn, snapshot_use
from editor.session.view import Replay, SessionView
from editor.threads.thread_service import ThreadService
from runtime.agent import Agent, TurnCancelled, TurnError, TurnResult, noting_nodes, turn_reply
from runtime.asset.model import Asset, ModelParams, VariableValue
from runtime.backends.base import Backend, Reproducibility
from runtime.backends.http import Cancelled, cancel_scope
from runtime.crashes import CrashWatch, Running, turn_note
from runtime.dialogue.dialog_file import save_history
from runtime.dialogue.history import SavedDialog
from runtime.models.memory import MIB
from runtime.problems import AssetError, BackendError, InputError
from runtime.session.failures import Failure, failure_of
from runtime.session.session import Session

log = logging.getLogger("parley.editor")


def preload_llama() -> None:
    """Import llama.cpp's bindings on the UI thread, once: importing them (numpy, ctypes, loading the
    shared libraries) holds the GIL for ~110 ms, which froze the UI when it happened on the worker at
    the first turn. parley-studio calls this once its window is up (not while it starts: 0.1 s of
    every launch), and a conversation before its worker starts. A broken install is reported when a
    conversation starts."""
    try:
        import runtime.backends.llama  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:  # pragma: no cover - depends on the install
        log.warning("llama.cpp bindings could not be loaded yet: %s", exc)


# Settings an agent cannot change once created (every ModelParams node has them): a change needs a new agent.
FIXED_NODE_FIELDS = tuple(ModelParams.model_fields)
FIXED_AGENT_FIELDS = ("default_model",)

HistoryOperation = Callable[[Agent], None]
# Runs one turn on the agent (say, regenerate, edit a line) with the worker's run arguments
# (instructions, on_event, cancel, tool_result).
TurnOperation = Callable[[Agent, dict[str, Any]], TurnResult]

# The model-loading bar moves at most this often (seconds): smooth to the eye, and cheap
LOADING_UPDATE_S = 0.02


# --- the worker (its own thread) -------------------------------------------------------------


class RuntimeWorker(QObject):
    """Owns the agent and the backend; every method runs on the worker thread."""

    loading = Signal(str, int, int, int)  # model file name, percent loaded, which model (from 1), of how many
    event = Signal(object)  # a runtime.events event, as it happens
    turn_finished = Signal(object)  # InspectedTurn
    turn_failed = Signal(object)  # Failure (runtime.session.failures)
    history_changed = Signal(object)  # SavedDialog: a copy of the agent's dialog
    history_rejected = Signal(str)  # why a history operation changed nothing
    tool_needed = Signal(str, str, object)  # node id, tool name, arguments
    # a finished turn's id, the label of the backend that ran it, and its Reproducibility
    turn_backend = Signal(int, str, object)
    snapshots_used = Signal(object)  # SnapshotUse, after a turn or a budget change (the embedded backend's)
    backend_failed = Signal(str)  # the backend picked could not be made; the previous one stays

    def __init__(self, answers: queue.Queue, make_backend: Callable[[], Backend] | None = None,
                 closing: threading.Event | None = None, crash_watch: CrashWatch | None = None) -> None:
        super().__init__()
        self._answers = answers
        # Notes each turn while it runs, and which node it is at: a native crash's report then names them.
        self._crash_watch = crash_watch
        # Set when the window closes: it ends any server request of the calls between turns.
        self._closing = closing or threading.Event()
        self._make_backend = make_backend
        self._asset_dir = ""
        self.backend: Backend | None = None
        self.session: Session | None = None
        # Why the asset last sent cannot run (a behaviour file it runs cannot be read): every turn
        # fails saying so until an asset that can run is sent. The agent before it stays.
        self.refused = ""
        # The RAM (MiB) the embedded backend's cache snapshots may take (None: the backend's default).
        # Set from the UI thread only before the thread starts; then through set_snapshot_budget.
        self.snapshot_mib: int | None = None

    @property
    def agent(self) -> Agent | None:
        """The conversation's agent (None before the first asset, and after stop)."""
        return self.session.agent if self.session is not None else None

    def _backend(self, asset_dir: str) -> Backend:
        if self.backend is None:
            if self._make_backend is not None:
                self.backend = self._make_backend()
                self._apply_snapshot_budget()
            else:
                from runtime.backends.llama import LlamaBackend

                budget = {} if self.snapshot_mib is None else {"snapshot_mib": self.snapshot_mib}
                self.backend = LlamaBackend(asset_dir or None, **budget)
        self.backend.set_asset_dir(asset_dir or None)  # model names resolve next to the asset
        return self.backend

    def _apply_snapshot_budget(self) -> None:
        snapshots = getattr(self.backend, "snapshots", None)
        if snapshots is not None and self.snapshot_mib is not None:
            snapshots.set_budget(self.snapshot_mib * MIB)

    @Slot(int)
    def set_snapshot_budget(self, mib: int) -> None:
        """Let the embedded backend's cache snapshots take ``mib`` MiB from now on (0: none; the
        oldest go at once when they take more), and report what they hold (``snapshots_used``)."""
        self.snapshot_mib = max(int(mib), 0)
        self._apply_snapshot_budget()
        use = snapshot_use(self.backend)
        if use is not None:
            self.snapshots_used.emit(use)

    def _reproducibility(self, backend: Backend) -> Reproducibility:
        """What ``backend`` promises on a replay; a backend whose answer fails promises nothing."""
        try:
            return backend.reproducibility()
        except Exception as exc:  # noqa: BLE001 - a plugin's or a server's: the turn itself succeeded
            log.warning("%s could not say whether it is reproducible: %s", backend.label, exc)
            return Backend.reproducibility(backend)

    @Slot(object, str, bool)
    def use_asset(self, asset: Asset, asset_dir: str, restart: bool) -> None:
        """Build the agent for ``asset``; keep the history unless ``restart``."""
        try:
            with cancel_scope(self._closing):
                self._use_asset(asset, asset_dir, restart)
        except (BackendError, Cancelled) as exc:
            self.turn_failed.emit(failure_of(exc))
        except AssetError as exc:  # a behaviour it runs is missing or broken (the Problems dock lists it)
            self.refused = "The graph cannot run: " + "; ".join(p.message for p in exc.problems[:3])

    def _use_asset(self, asset: Asset, asset_dir: str, restart: bool) -> None:
        self._asset_dir = asset_dir
        backend = self._backend(asset_dir)
        if self.session is None or restart:
            self.session = Session(asset, backend, asset_dir or None)
        else:
            self.session.use_asset(asset, asset_dir or None, backend=backend)
        self.refused = ""
        agent = self.session.agent
        self.history_changed.emit(agent.export_dialog())

    @Slot(object)
    def use_backend(self, make_backend: Callable[[], Backend] | None) -> None:
        """Run the next turns on a backend made by ``make_backend`` (None: the embedded runtime). The
        agent keeps its conversation; the old backend is closed (its models and caches freed). If the
        new one cannot be made, the old one stays and ``backend_failed`` says why."""
        with cancel_scope(self._closing):
            self._use_backend(make_backend)

    def _use_backend(self, make_backend: Callable[[], Backend] | None) -> None:
        old_maker, old = self._make_backend, self.backend
        self._make_backend = make_backend
        if old is None:
            return  # made at the first turn
        self.backend = None
        try:
            backend = self._backend(self._asset_dir)
        except (BackendError, Cancelled) as exc:
            self._make_backend, self.backend = old_maker, old
            self.backend_failed.emit(str(exc))
            return
        old.close()
        if self.session is not None:
            self.session.use_backend(backend)

    def _load_models(self, asset: Asset, cancel: threading.Event, loading: Callable[[str], None]) -> None:
        """Load every model the asset uses that is not loaded yet, reporting each one's progress
        in whole percent (weights load once per file); ``loading`` is told each model's name first.
        A cancel stops the load."""
        backend = self.backend
        assert backend is not None
        names = list(dict.fromkeys(asset.model_for(n) for n in asset.nodes if n.uses_model() and asset.model_for(n)))
        loaded = set(backend.loaded_models())
        wanted = []
        for name in names:
            try:
                path = backend.model_path(name)
            except BackendError:
                path = None  # the turn reports the missing file with where it looked
            if path is None or path not in loaded:
                wanted.append(name)
        for number, name in enumerate(wanted, 1):
            loading(name)
            try:
                backend.load_model(name, self._loading_report(Path(name).name, number, len(wanted)), cancel)
            except BackendError:
                if cancel.is_set():
                    raise TurnCancelled("the turn was cancelled while its model loaded") from None
                raise

    def _loading_report(self, model: str, number: int, count: int) -> Callable[[float], None]:
        """A progress callback that emits ``loading`` in whole percents, starting at 0 now (before
        llama.cpp's first report it reads the file's metadata and vocabulary) and ending at 100.

        llama.cpp reports once per tensor, often hundreds within a millisecond, and every bar
        update repaints at once on the UI thread: so at most one update per LOADING_UPDATE_S."""
        last = {"percent": 0, "at": float("-inf")}  # llama.cpp's first real step always shows
        self.loading.emit(model, 0, number, count)

        def report(fraction: float) -> None:
            percent = int(fraction * 100)
            now = time.monotonic()
            if percent > last["percent"] and (percent == 100 or now - last["at"] >= LOADING_UPDATE_S):
                last.update(percent=percent, at=now)
                self.loading.emit(model, percent, number, count)

        return report

    @Slot(object, str, object, str)
    def run_turn(self, go: TurnOperation, instructions: str, cancel: threading.Event, of: str = "") -> None:
        """Run a turn (``go``) of the conversation ``of`` names ("chat.json"); the crash watch notes it."""
        agent = self.agent
        if self.refused or agent is None:
            self.turn_failed.emit(Failure("turn_error", self.refused or "no agent: open or build a graph first"))
            return
        watch = self._crash_watch
        with watch.running(turn_note(len(agent.history.turns) + 1, of)) if watch else nullcontext() as noted:
            self._run_turn(agent, go, instructions, cancel, of, noted)

    def _run_turn(self, agent: Agent, go: TurnOperation, instructions: str, cancel: threading.Event, of: str,
                  noted: Running | None) -> None:
        on_event = self.event.emit if noted is None else noting_nodes(agent, noted, of, self.event.emit)

        def loading(model: str) -> None:
            if noted is not None:
                noted.say(turn_note(len(agent.history.turns) + 1, of, model=model))

        def ask_designer(node_id: str, tool: str, arguments: dict[str, Any]) -> str:
            self.tool_needed.emit(node_id, tool, arguments)
            while True:
                if cancel.is_set():
                    raise TurnCancelled("the turn was cancelled while waiting for a tool result", node_id)
                try:
                    answer = self._answers.get(timeout=0.05)
                except queue.Empty:
                    continue
                if answer is None:
                    raise TurnCancelled("the turn was cancelled while waiting for a tool result", node_id)
                return str(answer)

        try:
            # Every server request of the turn ends on Stop, not only the generation's: loading
            # (the server's /props), the token counts of the prompt budget, the templates.
            with cancel_scope(cancel):
                self._load_models(agent.asset, cancel, loading)
                if cancel.is_set():
                    raise TurnCancelled("the turn was cancelled")
                result = go(agent, {"instructions": instructions, "on_event": on_event, "cancel": cancel,
                                    "tool_result": ask_designer})
                # Read here, on this thread, while the backend that ran the turn is the agent's.
                reproducibility = self._reproducibility(agent.backend)
                snapshots = snapshot_use(agent.backend)
        except (TurnError, BackendError, InputError, Cancelled) as exc:
            if cancel.is_set() and not isinstance(exc, TurnCancelled):
                # a request that Stop ended surfaces as a failed node or backend: it was the Stop
                exc = TurnCancelled("the turn was cancelled")
            self.turn_failed.emit(failure_of(exc))
            return
        except Exception as exc:
            log.exception("turn failed")
            self.turn_failed.emit(failure_of(exc))
            return
        # Which backend ran it, then the history, so the chat view has both when the turn's record arrives.
        self.turn_backend.emit(result.turn_id, result.backend, reproducibility)
        if snapshots is not None:
            self.snapshots_used.emit(snapshots)
        self.history_changed.emit(agent.export_dialog())
        record = None
        if result.diagnostics is not None:
            record = self._record(agent, result)
            record.reproducibility, record.snapshots = reproducibility, snapshots
        self.turn_finished.emit(record)

    @staticmethod
    def _record(agent: Agent, result: TurnResult) -> InspectedTurn:
        return inspected_turn(result, agent.asset)

    @Slot(object)
    def change_history(self, operation: HistoryOperation) -> None:
        if self.agent is None:
            self.history_rejected.emit("no agent yet")
            return
        try:
            with cancel_scope(self._closing):
                operation(self.agent)
        except (InputError, ValueError, KeyError, IndexError, BackendError, Cancelled) as exc:
            self.history_rejected.emit(str(exc))
            return
        self.history_changed.emit(self.agent.export_dialog())

    @Slot()
    def stop(self) -> None:
        """Free the backend and end the thread's event loop (the last request it handles)."""
        if self.backend is not None:
            try:
                with cancel_scope(self._closing):
                    self.backend.close()
            except (BackendError, Cancelled, OSError) as exc:  # the thread must end all the same
                log.warning("closing the backend failed: %s", exc)
            self.backend = None
        self.session = None
        thread = QThread.currentThread()
        thread.quit()


# --- the UI side ---------------------------------------------------------------------------


def held_edits(document_asset: Asset, running: Asset) -> tuple[Asset, list[str]]:
    """The asset the next turn runs: the document's, with the settings an agent cannot change
    (model, context size) kept as ``running`` has them. Returns it and a line per held edit."""
    reasons: list[str] = []
    agent_changes: dict[str, Any] = {}
    for name in FIXED_AGENT_FIELDS:
        old, new = getattr(running, name), getattr(document_asset, name)
        if old != new:
            agent_changes[name] = old
            reasons.append(f"the agent's {name.replace('_', ' ')} changed ({old or 'none'} \u2192 {new or 'none'})")
    before = {n.id: n for n in running.nodes}
    nodes = []
    for node in document_asset.nodes:
        old_node = before.get(node.id)
        changes = {}
        if isinstance(node, ModelParams) and isinstance(old_node, ModelParams) and old_node.type_name == node.type_name:
            for name in FIXED_NODE_FIELDS:
                if getattr(node, name) != getattr(old_node, name):
                    changes[name] = getattr(old_node, name)
                    label = name.replace("_", " ")
                    reasons.append(f"{label} of node {node.id!r} changed "
                                   f"({getattr(old_node, name) or 'default'} \u2192 {getattr(node, name) or 'default'})")
        nodes.append(node.model_copy(update=changes) if changes else node)
    return document_asset.model_copy(update={**agent_changes, "nodes": nodes}), reasons


def _view_part(name: str) -> property:
    return property(lambda self: getattr(self.view, name), doc=f"The view's ``{name}`` (``SessionView``).")


class LiveConversation(ThreadService):
    """The window's test conversation with the document's graph (one per window, shared by its
    docks). Lives on the UI thread; every signal here is emitted on the UI thread."""

    # The view's signals and state, read through the conversation too (the window, the app, the tests):
    # one of each, in the view.
    busy_changed = _view_part("busy_changed")
    loading = _view_part("loading")
    event = _view_part("event")
    turn_started = _view_part("turn_started")
    turn_finished = _view_part("turn_finished")
    turn_failed = _view_part("turn_failed")
    history_changed = _view_part("history_changed")
    history_rejected = _view_part("history_rejected")
    tool_needed = _view_part("tool_needed")
    restart_offered = _view_part("restart_offered")
    turn_selected = _view_part("turn_selected")
    restarted = _view_part("restarted")
    replay_changed = _view_part("replay_changed")
    backend_failed = _view_part("backend_failed")
    snapshots_changed = _view_part("snapshots_changed")
    saved = _view_part("saved")
    records = _view_part("records")
    turn_backends = _view_part("turn_backends")
    turn_reproducibility = _view_part("turn_reproducibility")
    selected_turn = _view_part("selected_turn")
    busy = _view_part("busy")
    replaying = _view_part("replaying")
    snapshot_use = _view_part("snapshot_use")
    record = _view_part("record")
    backend_of = _view_part("backend_of")
    reproducibility_of = _view_part("reproducibility_of")
    select_turn = _view_part("select_turn")

    # to the worker (queued)
    _use_asset = Signal(object, str, bool)
    _run_turn = Signal(object, str, object, str)
    _change_history = Signal(object)
    _use_backend = Signal(object)
    _set_snapshot_budget = Signal(int)
    _stop_worker = Signal()

    def __init__(self, document, parent: QObject | None = None,
                 make_backend: Callable[[], Backend] | None = None, crash_watch: CrashWatch | None = None) -> None:
        super().__init__("parley-runtime", parent)
        self.document = document
        self.view = SessionView(self, self)  # what the docks see of it (and of a followed session)
        self.running_asset: Asset | None = None
        self.held: list[str] = []
        self._synced_asset: Asset | None = None
        self._cancel = threading.Event()
        self._answers: queue.Queue = queue.Queue()
        self._closing = threading.Event()

        # The thread starts on first use, so a window nobody talks in costs nothing.
        self.worker = RuntimeWorker(self._answers, make_backend, self._closing, crash_watch)
        self.thread: QThread = self._new_thread(self.worker)
        self._use_asset.connect(self.worker.use_asset)
        self._run_turn.connect(self.worker.run_turn)
        self._change_history.connect(self.worker.change_history)
        self._use_backend.connect(self.worker.use_backend)
        self._set_snapshot_budget.connect(self.worker.set_snapshot_budget)
        self._stop_worker.connect(self.worker.stop)
        # Worker -> here: queued, so these slots run on the UI thread and re-emit from it.
        self.worker.loading.connect(self._on_loading)
        self.worker.event.connect(self._on_event)
        self.worker.turn_finished.connect(self._on_finished)
        self.worker.turn_failed.connect(self._on_failed)
        self.worker.history_changed.connect(self._on_history)
        self.worker.history_rejected.connect(self._on_rejected)
        self.worker.tool_needed.connect(self._on_tool_needed)
        self.worker.turn_backend.connect(self._on_turn_backend)
        self.worker.backend_failed.connect(self._on_backend_failed)
        self.worker.snapshots_used.connect(self._on_snapshots_used)

        document.reset.connect(self.restart)
        # Bound methods, not lambdas: Qt drops a connection when its receiver is destroyed.
        document.undo_stack.indexChanged.connect(self._document_edited)

    @property
    def backend(self) -> Backend | None:
        """The backend the turns run on (None before the first turn): read its settings, never call it
        (it belongs to the worker thread)."""
        return self.worker.backend

    # --- talking ----------------------------------------------------------------------------

    def say(self, line: str, instructions: str = "") -> bool:
        """Run a turn for ``line``; False when a turn is already running or the window closed."""
        return self._run(line, lambda agent, run: agent.run_turn(line, **run), instructions)

    def regenerate(self, index: int, instructions: str = "") -> bool:
        """Run turn ``index`` (from 0) again: a new alternative; the turns after it stay on the old branch."""
        line = self.saved.history.turns[index].player
        return self._run(line, lambda agent, run: agent.regenerate(index, **run), instructions)

    def edit_line(self, index: int, line: str, instructions: str = "") -> bool:
        """Say ``line`` instead at turn ``index``: a new, edited alternative of that turn."""
        return self._run(line, lambda agent, run: agent.edit_player_line(index, line, **run), instructions)

    def _run(self, line: str, go: TurnOperation, instructions: str) -> bool:
        if self.busy or self.closed:
            return False
        self._start()
        self._sync_asset()
        self._cancel = threading.Event()
        self.view.set_busy(True)
        self.view.begin_turn(line)
        path = self.document.path
        self._run_turn.emit(go, instructions, self._cancel, Path(path).name if path else "an untitled asset")
        return True

    def use_backend(self, make_backend: Callable[[], Backend] | None) -> bool:
        """Run the next turns on a backend made by ``make_backend`` (None: the embedded runtime). The
        conversation so far stays; a running turn finishes on the backend it started on."""
        if self.closed:
            return False
        if self.thread.isRunning():
            self._use_backend.emit(make_backend)  # queued after any running turn
        else:
            self.worker._make_backend = make_backend  # the thread has not started: nothing runs there yet
        return True

    def set_snapshot_budget(self, mib: int) -> bool:
        """Let the embedded backend's cache snapshots take ``mib`` MiB (0: none) from now on: the
        backend made next, and the one running now once the running turn is done."""
        if self.closed:
            return False
        if self.thread.isRunning():
            self._set_snapshot_budget.emit(int(mib))  # queued after any running turn
        else:
            self.worker.snapshot_mib = max(int(mib), 0)  # the thread has not started: no backend yet
        return True

    # --- branches ---------------------------------------------------------------------------

    def rewind(self, count: int) -> bool:
        """Go back to before turn ``count`` (from 0), exactly as the conversation was then."""
        self.stop_replay()
        return self.change_history(lambda agent: agent.rewind(count))

    def select_branch(self, turn_id: int) -> bool:
        """Follow the branch through turn ``turn_id`` (an alternative, or a turn of another branch)."""
        return self.change_history(lambda agent: agent.select_turn(turn_id))

    def edit_reply(self, index: int, entries: list) -> bool:
        """Replace what the nodes wrote at turn ``index`` with the designer's own (an edited alternative)."""
        return self.change_history(lambda agent: agent.edit_reply(index, entries))

    def reroll_seeds(self) -> bool:
        """Change every fixed seed at once: the same graph then writes other (reproducible) replies."""
        salt = random.randrange(1, 2**31)
        return self.change_history(lambda agent: agent.reroll_seeds(salt))

    def replay(self, start: int, step: bool = False) -> bool:
        """Send the current branch's player lines again from turn ``start`` (from 0) with the graph as
        it is now, after rewinding to before it (earlier turns generate nothing). All at once, or one
        per ``replay_step`` when ``step``. Each replayed turn's record says whether its reply changed."""
        tree = self.saved.tree
        if self.busy or tree is None or not 0 <= start < len(self.saved.history.turns):
            return False
        asset = self.running_asset or self.document.asset
        pending = [(node.turn.player, turn_reply(asset, node.turn))
                   for node in (tree.nodes[i] for i in tree.path()[start:])]
        if not self.rewind(start):
            return False
        self.continue_with(start, pending, step)
        return True

    def continue_with(self, start: int, pending: list[tuple[str, str]], step: bool = False) -> None:
        """Replay ``pending`` (lines and the replies they had) as turns ``start``… once the running turn
        (an edit) has finished, or now."""
        self.view.show_replay(Replay(start, list(pending), step))
        if not step and not self.busy:
            self.replay_step()

    def replay_step(self) -> bool:
        """Send the next line of the replay."""
        replay = self.replaying
        if replay is None or not replay.pending or self.busy:
            return False
        line, _old = replay.pending[0]
        replay.sent = self.say(line)
        return replay.sent

    def stop_replay(self) -> None:
        if self.replaying is not None:
            self.view.show_replay(None)

    def stop(self) -> None:
        """Cancel the running turn (generation stops at the next token or prompt chunk)."""
        self._cancel.set()
        self._answers.put(None)

    def answer_tool(self, result: str) -> None:
        """The designer's result for the tool call the worker is waiting on."""
        self._answers.put(result)

    def restart(self) -> None:
        """A new conversation on the document's graph as it is now (held edits applied)."""
        if self.closed:
            return
        if self.busy:
            self.stop()
        self.view.start_anew()
        self.held = []
        self.stop_replay()
        if self.thread.isRunning():
            self._sync_asset(restart=True)
        else:
            self.running_asset = self._synced_asset = None
            self.view.start_anew(SavedDialog())
        self.view.restart_offered.emit([])
        self.view.restarted.emit()

    def files_changed(self) -> None:
        """Files the asset reads changed on disk (a behaviour): the next turn builds its agent from them
        anew, with the conversation kept, even when the asset itself is unchanged."""
        self._synced_asset = None

    def _document_edited(self, *_index: int) -> None:
        if self.closed or self.running_asset is None:
            return
        _asset, reasons = held_edits(self.document.asset, self.running_asset)
        if reasons != self.held:
            self.held = reasons
            self.view.restart_offered.emit(list(reasons))

    def _sync_asset(self, restart: bool = False) -> None:
        """Send the document's graph to the worker if it changed since the last turn."""
        current = self.document.asset
        if not restart and self._synced_asset is not None and current == self._synced_asset:
            return
        snapshot = current.model_copy(deep=True)
        if restart or self.running_asset is None:
            asset, reasons = snapshot, []
            restart = True
        else:
            asset, reasons = held_edits(snapshot, self.running_asset)
        self._synced_asset = snapshot
        self.running_asset = asset
        if reasons != self.held:
            self.held = reasons
            self.view.restart_offered.emit(list(reasons))
        asset_dir = str(self.document.asset_dir) if self.document.asset_dir else ""
        self._use_asset.emit(asset, asset_dir, restart)

    def _start(self) -> None:
        if not self.thread.isRunning() and not self.thread.isFinished():
            preload_llama()  # here on the UI thread, not on the worker as it makes the backend
            self.thread.start()

    # --- history ----------------------------------------------------------------------------

    def change_history(self, operation: HistoryOperation) -> bool:
        """Run ``operation`` on the agent (between turns). The result arrives as
        ``history_changed``, or ``history_rejected`` with the reason."""
        if self.busy or self.closed:
            return False
        self._start()
        self._sync_asset()
        self._change_history.emit(operation)
        return True

    def import_history(self, saved: SavedDialog, source: str) -> bool:
        self.view.forget_records()
        self.stop_replay()
        return self.change_history(lambda agent: agent.import_dialog(saved, source))

    def export_history(self, path: str) -> None:
        """Write the conversation as a ``parley-dialog`` file. Raises OSError."""
        save_history(self.saved, path)

    def set_variables(self, values: dict[str, VariableValue]) -> bool:
        def apply(agent: Agent) -> None:
            for name, value in values.items():
                agent.set_variable(name, value)

        return self.change_history(apply)

    # --- from the worker (UI thread) ------------------------------------------------------------

    def _on_loading(self, model: str, percent: int, number: int, count: int) -> None:
        self.view.loading.emit(model, percent, number, count)

    def _on_event(self, event: object) -> None:
        self.view.show_event(event)

    def _on_finished(self, record: InspectedTurn | None) -> None:
        replay = self.replaying
        if replay is not None and replay.sent and replay.pending:
            replay.sent = False
            _line, old = replay.pending.pop(0)
            if record is not None:
                record.replaced = old
                replay.results[record.turn_id] = bool(record.changed)
        if record is not None:
            self.view.keep_record(record)  # before busy_changed, as the docks read it then
        self.view.set_busy(False)
        self.view.finish_turn(record)
        if replay is not None:
            self.view.show_replay(self.replaying)  # moved on (or ended, if a slot stopped it meanwhile)
            if replay.pending and not replay.step:
                self.replay_step()

    def _on_failed(self, failure: Failure) -> None:
        self.view.set_busy(False)
        self.stop_replay()  # a failed or stopped turn ends the replay; the lines not sent are not lost
        self.view.turn_failed.emit(failure)

    def _on_history(self, saved: SavedDialog) -> None:
        self.view.show_history(saved)  # records of turns the tree no longer has go

    def _on_rejected(self, message: str) -> None:
        self.view.history_rejected.emit(message)

    def _on_tool_needed(self, node_id: str, tool: str, arguments: object) -> None:
        self.view.tool_needed.emit(node_id, tool, arguments)

    def _on_turn_backend(self, turn_id: int, label: str, reproducibility: Reproducibility) -> None:
        self.view.mark_backend(turn_id, label, reproducibility)

    def _on_snapshots_used(self, use: SnapshotUse) -> None:
        self.view.show_snapshots(use)

    def _on_backend_failed(self, message: str) -> None:
        self.view.backend_failed.emit(message)

    # --- shutting down ----------------------------------------------------------------------

    def _cancel_work(self) -> None:
        self._closing.set()
        self._cancel.set()
        self._answers.put(None)

    def _end_thread(self) -> None:
        self._stop_worker.emit()  # queued after any running turn, which the cancel ends quickly

    def _after_shutdown(self) -> None:
        self.view.set_busy(False)
