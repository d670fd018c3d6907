"""The window's scene: the runtime's ``Scene`` on a worker thread, shown through a ``SceneView``.

The same machinery as the single-agent conversation (``editor.session.local``): ``SceneWorker`` lives
on its own ``QThread`` and owns the ``Scene`` (every NPC's ``Session`` and the backend), so every model
call happens on that one thread; ``SceneConversation`` lives on the UI thread, sends the worker requests
through queued signals and feeds what it reports to its ``view`` from the UI thread. After each change
the worker sends a copy of the whole scene (``SceneShown``), never the ``Scene`` itself.

A regenerate is a replay of the last round: the worker takes the rounds back, says their lines again
(with whom they were said to, whether whispered, and who was there at each round's start) and says of
each NPC line whether it came out the same. Edits to the NPC the canvas shows apply to its next turn,
as in the single-agent conversation (model and context size held back)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from editor.session.local import held_edits, preload_llama
from editor.session.record import inspected_turn
from editor.session.scene_view import (
    PLAYER_TURN,
    SceneNpcShown,
    SceneReplayReport,
    SceneShown,
    SceneView,
    ShownLine,
    ShownRound,
)
from editor.threads.thread_service import ThreadService
from runtime.agent import TurnCancelled, TurnError
from runtime.asset.model import Asset
from runtime.backends.base import Backend
from runtime.backends.http import Cancelled, cancel_scope
from runtime.events import NodeStarted, Token
from runtime.nodes import NODE_TYPES
from runtime.problems import BackendError, InputError
from runtime.scene.scene import Scene, SceneLine, SceneRound
from runtime.session.failures import Failure, failure_of

log = logging.getLogger("parley.editor")


def _streams(type_name: str) -> bool:
    """Whether a node's output is the NPC's reply (what the chat streams)."""
    entry = NODE_TYPES.get(type_name)
    return entry is not None and entry.model.STREAMS_TO_CHAT


class SceneWorker(QObject):
    """Owns the scene and its backend; every slot runs on the worker thread."""

    opened = Signal(object)  # SceneShown
    changed = Signal(object)  # SceneShown
    line_started = Signal(str, str)  # npc id, name
    token = Signal(str, str)  # npc id, text
    line_said = Signal(object)  # SceneLine
    round_done = Signal(object)  # SceneShown
    failed = Signal(object)  # Failure
    replayed = Signal(object, object)  # SceneReplayReport, SceneShown
    rejected = Signal(str)

    def __init__(self, closing: threading.Event) -> None:
        super().__init__()
        self._closing = closing
        self.make_backend: Callable[[], Backend] | None = None  # None: the embedded runtime
        self.backend: Backend | None = None
        self.scene: Scene | None = None
        self.path = ""
        # Per round (kept as the scene's rounds are): who was there at its start, the stage directions
        # before it, and after a regenerate or replay whether each NPC line came out the same.
        self._present_at: list[set[str]] = []
        self._notes_at: list[list[str]] = []
        self._notes_after: list[str] = []
        self._same: dict[tuple[int, int], bool] = {}
        # The read-ahead after a round (``Scene.warm``) runs until the next request: set to stop it.
        self.reading_ahead = threading.Event()

    # --- opening ------------------------------------------------------------------------------------

    @Slot(str, object)
    def open(self, path: str, make_backend: Callable[[], Backend] | None) -> None:
        """Open the scene at ``path`` on a backend made by ``make_backend`` (None: the embedded runtime;
        the backend of the last scene stays when it is made the same way)."""
        try:
            with cancel_scope(self._closing):
                folder = str(Path(path).resolve().parent)
                if self.backend is not None and make_backend is not self.make_backend:
                    self.backend.close()
                    self.backend = None
                self.make_backend = make_backend
                if self.backend is None:
                    self.backend = self._new_backend(folder)
                self.backend.set_asset_dir(folder)
                self.scene = Scene.open(path, self.backend, session_id="scene")
        except (InputError, BackendError, Cancelled) as exc:
            self.scene = None
            self.failed.emit(failure_of(exc))
            return
        self.path = str(Path(path).resolve())
        self._present_at, self._notes_at, self._notes_after, self._same = [], [], [], {}
        self.opened.emit(self._shown())

    def _new_backend(self, folder: str) -> Backend:
        if self.make_backend is not None:
            backend = self.make_backend()
        else:
            from runtime.backends.llama import LlamaBackend

            backend = LlamaBackend(folder)
        backend.set_asset_dir(folder)
        return backend

    @Slot(str, object, str)
    def use_asset(self, npc: str, asset: Asset, folder: str) -> None:
        """Run ``npc``'s next turns on ``asset`` (the canvas's edits), its conversation kept; the
        settings an agent cannot change (model, context size) stay as they were."""
        if self.scene is None or npc not in self.scene.members:
            return
        session = self.scene.members[npc].session
        kept, _held = held_edits(asset, session.agent.source_asset)
        try:
            session.use_asset(kept, folder or session.folder)
        except InputError as exc:
            self.rejected.emit(f"{self.scene.members[npc].name}'s graph cannot run: "
                               + "; ".join(p.message for p in exc.problems[:3]))

    # --- talking ------------------------------------------------------------------------------------

    def _on_event(self, speaker: str, event: object) -> None:
        if isinstance(event, SceneLine):
            self.line_said.emit(event)
        elif isinstance(event, NodeStarted) and _streams(event.type):
            self.line_started.emit(speaker, self.scene.members[speaker].name if self.scene else speaker)
        elif isinstance(event, Token):
            self.token.emit(speaker, event.text)

    @Slot(object, str, bool, object)
    def say(self, line: str | None, to: str, whisper: bool, cancel: threading.Event) -> None:
        if self._say(line, to, whisper, cancel) is None:
            return
        self.reading_ahead = threading.Event()  # before the view hears of it: its next request stops this one
        self.round_done.emit(self._shown())
        self._read_ahead(self.reading_ahead)

    def _read_ahead(self, stop: threading.Event) -> None:
        """While the designer reads and types: every NPC there reads ahead, so the branches of its
        graph that sat out the last rounds answer the next line without reading them (``Scene.warm``)."""
        scene = self.scene
        if scene is None:
            return
        try:
            with cancel_scope(stop):
                scene.warm(stop)
        except (BackendError, Cancelled) as exc:  # it only saves time: the next round reads what it lacks
            log.info("the scene's read-ahead stopped: %s", exc)

    def _say(self, line: str | None, to: str, whisper: bool, cancel: threading.Event) -> SceneRound | None:
        scene = self.scene
        if scene is None:
            self.failed.emit(Failure("turn_error", "no scene is open"))
            return None
        present = set(scene.present())
        try:
            with cancel_scope(cancel):
                round_ = scene.say(line, to=to, whisper=whisper, on_event=self._on_event, cancel=cancel)
        except (TurnError, BackendError, InputError, Cancelled) as exc:
            if cancel.is_set() and not isinstance(exc, TurnCancelled):
                exc = TurnCancelled("the round was cancelled")
            self.failed.emit(failure_of(exc))
            return None
        except Exception as exc:
            log.exception("a scene round failed")
            self.failed.emit(failure_of(exc))
            return None
        self._present_at.append(present)
        self._notes_at.append(self._notes_after)
        self._notes_after = []
        return round_

    @Slot(str, bool)
    def set_present(self, npc: str, present: bool) -> None:
        scene = self.scene
        if scene is None:
            return
        try:
            self._set_present(npc, present)
        except InputError as exc:
            self.rejected.emit("; ".join(p.message for p in exc.problems))
            return
        self.changed.emit(self._shown())

    def _set_present(self, npc: str, present: bool) -> None:
        scene = self.scene
        assert scene is not None
        member = scene.member(npc)
        if member.present == present:
            return
        if present:
            scene.join(npc)
        else:
            scene.leave(npc)
        self._notes_after.append(f"{member.name} {'joins' if present else 'leaves'} the scene.")

    @Slot(int)
    def rewind(self, rounds: int) -> None:
        scene = self.scene
        if scene is None:
            return
        try:
            self._rewind(rounds)
        except InputError as exc:
            self.rejected.emit("; ".join(p.message for p in exc.problems))
            return
        self.changed.emit(self._shown())

    def _rewind(self, rounds: int) -> None:
        scene = self.scene
        assert scene is not None
        scene.rewind(rounds)
        kept = len(scene.rounds)
        if rounds:
            # what was said and done after the kept rounds goes with them (their joins and leaves too:
            # the scene is as it was at the start of the first round taken back)
            self._notes_after = self._notes_at[kept] if kept < len(self._notes_at) else []
        del self._present_at[kept:], self._notes_at[kept:]
        self._same = {key: same for key, same in self._same.items() if key[0] < kept}

    @Slot(int, object)
    def replay(self, start: int, cancel: threading.Event) -> None:
        """Say rounds ``start``… again, as they were said (the line, to whom, whispered, who was there),
        and report per NPC line whether it came out the same."""
        scene = self.scene
        if scene is None or not 0 <= start < len(scene.rounds):
            self.rejected.emit("no round to say again")
            return
        plans = [(r.player.text if r.player is not None else None, r.to, r.whisper, self._present_at[i],
                  [(t.npc, t.result.reply) for t in r.turns])
                 for i, r in enumerate(scene.rounds[start:], start)]
        notes_after = self._notes_after
        self._rewind(len(scene.rounds) - start)
        self._notes_after = []
        self.changed.emit(self._shown())
        report = SceneReplayReport(start, len(plans))
        for line, to, whisper, present, before in plans:
            for npc in scene.members:
                self._set_present(npc, npc in present)
            round_ = self._say(line, to, whisper, cancel)
            if round_ is None:
                self.changed.emit(self._shown())
                return
            index = len(scene.rounds) - 1
            for turn, spoken in enumerate(round_.turns):
                same = turn < len(before) and before[turn] == (spoken.npc, spoken.result.reply)
                self._same[(index, turn)] = same
                report.same += same
                report.changed += not same
                if not same:
                    report.changed_lines.append(f"round {index + 1}, {scene.members[spoken.npc].name}")
            report.changed += max(len(before) - len(round_.turns), 0)  # an NPC that no longer spoke
            self.changed.emit(self._shown())
        self._notes_after = notes_after if start == len(scene.rounds) - 1 else []
        self.replayed.emit(report, self._shown())

    # --- what the view is sent ---------------------------------------------------------------------

    def _shown(self) -> SceneShown:
        scene = self.scene
        if scene is None:
            return SceneShown()
        asset = scene.asset
        npcs = tuple(SceneNpcShown(n.id, n.name, str((scene.folder / n.asset).resolve()), scene.members[n.id].present)
                     for n in asset.npcs)
        rounds = []
        said = iter(scene.transcript)  # the rounds' lines in order: the player's, then each NPC's that said something
        for index, r in enumerate(scene.rounds):
            lines = []
            if r.player is not None:
                line = next(said)
                lines.append(ShownLine(index, PLAYER_TURN, line.speaker, line.name, line.text, line.heard_by))
            for turn, spoken in enumerate(r.turns):
                member = scene.members[spoken.npc]
                heard_by = next(said).heard_by if spoken.result.reply else ()
                record = None
                if spoken.result.diagnostics is not None:
                    record = inspected_turn(spoken.result, member.session.agent.asset)
                    record.reproducibility = self._reproducibility()
                lines.append(ShownLine(index, turn, spoken.npc, member.name, spoken.result.reply, heard_by,
                                       spoken.rule, spoken.heard, record, self._same.get((index, turn))))
            notes = tuple(self._notes_at[index]) if index < len(self._notes_at) else ()
            rounds.append(ShownRound(index, tuple(lines), r.to, r.whisper, r.player is None, notes))
        repro = self._reproducibility()
        return SceneShown(self.path, asset.name, asset.player_name, npcs, tuple(rounds), tuple(self._notes_after),
                          repro.exact if repro is not None else True, self.backend.label if self.backend else "")

    def _reproducibility(self):
        if self.backend is None:
            return None
        try:
            return self.backend.reproducibility()
        except Exception:  # noqa: BLE001 - a plugin's or a server's answer: it promises nothing then
            return Backend.reproducibility(self.backend)

    @Slot()
    def stop(self) -> None:
        """Free the backend and end the thread's event loop (the last request it handles)."""
        if self.backend is not None:
            try:
                with cancel_scope(self._closing):
                    self.backend.close()
            except (BackendError, Cancelled, OSError) as exc:
                log.warning("closing the scene's backend failed: %s", exc)
            self.backend = None
        self.scene = None
        QThread.currentThread().quit()


class SceneConversation(ThreadService):
    """The window's scene (one per window, shared by its docks through ``view``). Lives on the UI
    thread; every signal the docks hear is emitted on the UI thread."""

    _open = Signal(str, object)
    _say = Signal(object, str, bool, object)
    _set_present = Signal(str, bool)
    _rewind = Signal(int)
    _replay = Signal(int, object)
    _use_asset = Signal(str, object, str)
    _stop_worker = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-scene", parent)
        self.view = SceneView(self, self)
        self._closing = threading.Event()
        self._cancel = threading.Event()
        self._synced: dict[str, Asset] = {}  # npc -> the graph its turns run, as last sent
        self.worker = SceneWorker(self._closing)
        self.thread: QThread = self._new_thread(self.worker)
        self._open.connect(self.worker.open)
        self._say.connect(self.worker.say)
        self._set_present.connect(self.worker.set_present)
        self._rewind.connect(self.worker.rewind)
        self._replay.connect(self.worker.replay)
        self._use_asset.connect(self.worker.use_asset)
        self._stop_worker.connect(self.worker.stop)
        self.worker.opened.connect(self._on_opened)
        self.worker.changed.connect(self._on_changed)
        self.worker.line_started.connect(self.view.line_started)
        self.worker.token.connect(self.view.token)
        self.worker.line_said.connect(self.view.line_said)
        self.worker.round_done.connect(self._on_round_done)
        self.worker.failed.connect(self._on_failed)
        self.worker.replayed.connect(self._on_replayed)
        self.worker.rejected.connect(self.view.rejected)
        # What the canvas shows, to send its edits before a round: (npc, the document's asset, its folder)
        self.canvas_graph: Callable[[], tuple[str, Asset, str] | None] = lambda: None
        # What a scene's backend is made with as it opens (its result None: the embedded runtime)
        self.backend_maker: Callable[[], Callable[[], Backend] | None] = lambda: None

    def open(self, path: str) -> bool:
        if self.closed or self.view.busy:
            return False
        maker = self.backend_maker()
        self.worker.reading_ahead.set()
        self._start(embedded=maker is None)
        self._synced = {}
        self.view.set_busy(True)
        self._open.emit(path, maker)
        return True

    def close_scene(self) -> None:
        """Leave the scene (the window opened an asset): the view shows none; the worker keeps its
        backend for the next scene."""
        if self.view.busy:
            self.stop()
        self.view.show_opened(SceneShown())

    # --- ``SceneActions`` -------------------------------------------------------------------------

    def say(self, line: str | None, to: str = "", whisper: bool = False) -> bool:
        if not self._ready():
            return False
        self._sync_canvas()
        self._cancel = threading.Event()
        self.view.set_busy(True)
        self.view.round_started.emit(line or "", to, whisper)
        self._say.emit(line, to, whisper, self._cancel)
        return True

    def join(self, npc: str) -> bool:
        return self._presence(npc, True)

    def leave(self, npc: str) -> bool:
        return self._presence(npc, False)

    def _presence(self, npc: str, present: bool) -> bool:
        if not self._ready():
            return False
        self._set_present.emit(npc, present)
        return True

    def rewind(self, rounds: int = 1) -> bool:
        if not self._ready() or not 0 < rounds <= len(self.view.shown.rounds):
            return False
        self._rewind.emit(rounds)
        return True

    def regenerate(self) -> bool:
        """The last round again, from the same line; each NPC line says whether it came out the same."""
        return self.replay(len(self.view.shown.rounds) - 1)

    def replay(self, start: int = 0) -> bool:
        """Rounds ``start``… again, as they were said; each NPC line says whether it came out the same."""
        if not self._ready() or not 0 <= start < len(self.view.shown.rounds):
            return False
        self._sync_canvas()
        self._cancel = threading.Event()
        self.view.set_busy(True)
        self._replay.emit(start, self._cancel)
        return True

    def stop(self) -> None:
        self._cancel.set()
        self.worker.reading_ahead.set()

    def _ready(self) -> bool:
        """Whether the scene takes a request now; if it does, the read-ahead stops for it."""
        if self.closed or self.view.busy or not self.view.is_open:
            return False
        self.worker.reading_ahead.set()
        return True

    def _sync_canvas(self) -> None:
        """Send the graph on the canvas (an NPC's, maybe edited) if it changed since its last round."""
        graph = self.canvas_graph()
        if graph is None:
            return
        npc, asset, folder = graph
        if self._synced.get(npc) == asset:
            return
        self._synced[npc] = snapshot = asset.model_copy(deep=True)
        self._use_asset.emit(npc, snapshot, folder)

    def note_canvas_graph(self, npc: str, asset: Asset) -> None:
        """The canvas now shows ``npc``'s graph as the scene runs it (just opened from its file)."""
        self._synced[npc] = asset.model_copy(deep=True)

    def _start(self, embedded: bool) -> None:
        if not self.thread.isRunning() and not self.thread.isFinished():
            if embedded:
                preload_llama()
            self.thread.start()

    # --- from the worker (UI thread) ----------------------------------------------------------------

    def _on_opened(self, shown: SceneShown) -> None:
        self.view.set_busy(False)
        self.view.show_opened(shown)

    def _on_changed(self, shown: SceneShown) -> None:
        if self.view.is_open:  # else the window left the scene while this was on its way
            self.view.show_scene(shown)

    def _on_round_done(self, shown: SceneShown) -> None:
        self.view.set_busy(False)
        if not self.view.is_open:
            return
        self.view.show_scene(shown)
        self.view.round_finished.emit(shown)
        self._select_last(shown)

    def _on_failed(self, failure: Failure) -> None:
        self.view.set_busy(False)
        self.view.failed.emit(failure)

    def _on_replayed(self, report: SceneReplayReport, shown: SceneShown) -> None:
        self.view.set_busy(False)
        if not self.view.is_open:
            return
        self.view.show_scene(shown)
        self.view.replayed.emit(report)
        self._select_last(shown)

    def _select_last(self, shown: SceneShown) -> None:
        spoken = [line for line in shown.lines if line.turn != PLAYER_TURN]
        if spoken:
            self.view.select_line(spoken[-1].key)

    # --- shutting down ------------------------------------------------------------------------------

    def _cancel_work(self) -> None:
        self._closing.set()
        self._cancel.set()
        self.worker.reading_ahead.set()

    def _end_thread(self) -> None:
        self._stop_worker.emit()

    def _after_shutdown(self) -> None:
        self.view.set_busy(False)

