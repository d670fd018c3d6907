"""What the docks observe of the conversation, and the one way it reaches them.

A ``SessionView`` holds the dialog (``saved``), the record of each turn (``records``: turn id ->
``InspectedTurn``), which backend ran each turn, the selected turn and whether a turn runs, and emits
the signals the docks follow. A source feeds it through its methods: the window's own conversation
(``editor.session.local.LiveConversation``, whose worker thread runs the runtime), or a session
followed on ``parley serve`` (``editor.session.follow.ServerAttach``), which puts the local state
aside while it follows (``put_aside``) and brings it back on Detach (``bring_back``).

The docks change the conversation through ``actions`` (``ConversationActions``), a narrow surface
the local conversation implements: they never see its thread, nor the follower. Every signal here is
emitted on the UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, Signal

from editor.session.record import InspectedTurn, SnapshotUse
from runtime.backends.base import Reproducibility
from runtime.dialogue.history import SavedDialog

if TYPE_CHECKING:
    from editor.model.document import Document
    from runtime.asset.model import Asset, VariableValue
    from runtime.backends.base import Backend


@dataclass
class Replay:
    """A replay under way: the recorded lines still to send (with the replies they had), and whether
    each sent turn's reply changed (turn id -> changed)."""

    start: int
    pending: list[tuple[str, str]]
    step: bool
    results: dict[int, bool] = field(default_factory=dict)
    sent: bool = False  # the running turn is the replay's (not, say, the edit it follows)
    total: int = 0

    def __post_init__(self) -> None:
        self.total = self.total or len(self.pending)

    @property
    def changed(self) -> int:
        return sum(self.results.values())


class ConversationActions(Protocol):
    """What the docks (and the follower's Take over) may ask of the conversation they show. The
    window's ``LiveConversation`` implements it; a call returns False when it cannot run now."""

    document: Document  # the document whose graph the conversation runs
    running_asset: Asset | None  # the asset the turns run on now (None before the first)
    closed: bool  # the window is closing: nothing runs any more

    @property
    def backend(self) -> Backend | None:
        """The backend the turns run on (None before the first turn): read its settings, never call it."""
        ...


    def say(self, line: str, instructions: str = "") -> bool: ...
    def regenerate(self, index: int, instructions: str = "") -> bool: ...
    def edit_line(self, index: int, line: str, instructions: str = "") -> bool: ...
    def edit_reply(self, index: int, entries: list) -> bool: ...
    def rewind(self, count: int) -> bool: ...
    def select_branch(self, turn_id: int) -> bool: ...
    def reroll_seeds(self) -> bool: ...
    def replay(self, start: int, step: bool = False) -> bool: ...
    def continue_with(self, start: int, pending: list[tuple[str, str]], step: bool = False) -> None: ...
    def replay_step(self) -> bool: ...
    def stop_replay(self) -> None: ...
    def stop(self) -> None: ...
    def answer_tool(self, result: str) -> None: ...
    def restart(self) -> None: ...
    def change_history(self, operation: Any) -> bool: ...
    def import_history(self, saved: SavedDialog, source: str) -> bool: ...
    def set_variables(self, values: dict[str, VariableValue]) -> bool: ...


@dataclass
class ViewState:
    """Everything a ``SessionView`` shows of one conversation (what ``put_aside`` keeps)."""

    saved: SavedDialog = field(default_factory=SavedDialog)
    records: dict[int, InspectedTurn] = field(default_factory=dict)  # turn id -> its record (every branch's)
    turn_backends: dict[int, str] = field(default_factory=dict)  # turn id -> the label of the backend that ran it
    turn_reproducibility: dict[int, Reproducibility] = field(default_factory=dict)  # turn id -> its promise
    selected_turn: int = -1


class SessionView(QObject):
    """The conversation as the docks see it (one per window)."""

    busy_changed = Signal(bool)
    loading = Signal(str, int, int, int)  # model file name, percent loaded, which model (from 1), of how many
    event = Signal(object)  # runtime.events event
    turn_started = Signal(str)  # the player's line
    turn_finished = Signal(object)  # InspectedTurn (None when the asset turns diagnostics off)
    turn_failed = Signal(object)  # Failure (runtime.session.failures)
    history_changed = Signal(object)  # SavedDialog
    history_rejected = Signal(str)
    tool_needed = Signal(str, str, object)  # node id, tool, arguments
    restart_offered = Signal(list)  # why the graph's edits need a new agent (empty: none held)
    turn_selected = Signal(int)  # the turn (its id in the conversation tree) the inspector and raw JSON show
    restarted = Signal()
    replay_changed = Signal()  # a replay started, moved on or ended (see ``replaying``)
    backend_failed = Signal(str)  # the backend picked could not be made (the previous one stays)
    snapshots_changed = Signal(object)  # SnapshotUse: after a turn on the embedded backend, or a budget change

    def __init__(self, actions: ConversationActions, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.actions = actions
        self.state = ViewState()
        self.busy = False
        self.replaying: Replay | None = None
        self.snapshot_use: SnapshotUse | None = None  # the embedded backend's snapshots, as last reported
        self._aside: ViewState | None = None

    # --- what the docks read ------------------------------------------------------------------------

    @property
    def saved(self) -> SavedDialog:
        return self.state.saved

    @property
    def records(self) -> dict[int, InspectedTurn]:
        return self.state.records

    @property
    def turn_backends(self) -> dict[int, str]:
        return self.state.turn_backends

    @property
    def turn_reproducibility(self) -> dict[int, Reproducibility]:
        return self.state.turn_reproducibility

    @property
    def selected_turn(self) -> int:
        return self.state.selected_turn

    def record(self, turn: int) -> InspectedTurn | None:
        """The record of the turn at position ``turn`` (from 0) of the current branch."""
        path = self.saved.tree.path() if self.saved.tree is not None else []
        return self.records.get(path[turn]) if 0 <= turn < len(path) else None

    def backend_of(self, turn_id: int) -> str:
        """The label of the backend that ran turn ``turn_id`` ("" for seeded or imported turns)."""
        return self.turn_backends.get(turn_id, "")

    def reproducibility_of(self, turn_id: int) -> Reproducibility | None:
        """What the backend that ran turn ``turn_id`` promised on a replay (None for seeded or imported
        turns): when it is not ``exact``, a reply that changed may be numerics, not the graph."""
        return self.turn_reproducibility.get(turn_id)

    # --- what a source feeds it ---------------------------------------------------------------------

    def show_history(self, saved: SavedDialog, prune: bool = True) -> None:
        """Show ``saved``; with ``prune``, forget what it knew of turns its tree no longer has (a new
        conversation, an import)."""
        self.state.saved = saved
        if prune:
            known = saved.tree.nodes if saved.tree is not None else {}
            for kept in (self.records, self.turn_backends, self.turn_reproducibility):
                for turn_id in [t for t in kept if t not in known]:
                    del kept[turn_id]
        self.history_changed.emit(saved)

    def keep_record(self, record: InspectedTurn) -> None:
        """Remember ``record`` (shown with the next ``show_history`` or ``finish_turn``)."""
        self.records[record.turn_id] = record

    def mark_backend(self, turn_id: int, label: str, reproducibility: Reproducibility | None = None) -> None:
        """Say which backend ran turn ``turn_id`` (and what it promised on a replay, when known)."""
        self.turn_backends[turn_id] = label
        if reproducibility is not None:
            self.turn_reproducibility[turn_id] = reproducibility

    def begin_turn(self, line: str) -> None:
        self.turn_started.emit(line)

    def show_event(self, event: object) -> None:
        self.event.emit(event)

    def finish_turn(self, record: InspectedTurn | None) -> None:
        """A turn finished: keep its record, tell the docks, and select it."""
        if record is not None:
            self.keep_record(record)
        self.turn_finished.emit(record)
        if record is not None:
            self.select_turn(record.turn_id)

    def select_turn(self, turn: int) -> None:
        if turn != self.state.selected_turn:
            self.state.selected_turn = turn
            self.turn_selected.emit(turn)

    def set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self.busy_changed.emit(busy)

    def show_replay(self, replay: Replay | None) -> None:
        """The replay under way (None: none), after it started, moved on or ended."""
        self.replaying = replay
        self.replay_changed.emit()

    def show_snapshots(self, use: SnapshotUse) -> None:
        self.snapshot_use = use
        self.snapshots_changed.emit(use)

    def start_anew(self, saved: SavedDialog | None = None) -> None:
        """A new conversation: no records, no backend marks, no selection; with ``saved``, that is its
        dialog now (the docks hear of it from ``restarted``; without, from the next ``show_history``)."""
        self.forget_records()
        self.state.selected_turn = -1
        if saved is not None:
            self.state.saved = saved

    def forget_records(self) -> None:
        """Before an import: its turns have no records here."""
        self.state.records.clear()
        self.state.turn_backends.clear()
        self.state.turn_reproducibility.clear()

    # --- another conversation in its place ----------------------------------------------------------

    @property
    def aside(self) -> ViewState | None:
        """The window's own conversation while another is shown in its place (None: none is)."""
        return self._aside

    def put_aside(self) -> None:
        """Keep what is shown aside and show an empty conversation (``announce`` tells the docks)."""
        self._aside, self.state = self.state, ViewState()

    def bring_back(self) -> None:
        """Show what ``put_aside`` kept again, exactly as it was, and tell the docks."""
        aside, self._aside = self._aside, None
        if aside is None:
            return
        self.state = aside
        self.announce()

    def drop_aside(self) -> None:
        """Forget what was put aside (the window's own conversation started anew meanwhile)."""
        self._aside = None

    def announce(self) -> None:
        """Tell the docks the whole state changed: the dialog, and the selected turn."""
        self.history_changed.emit(self.saved)
        self.turn_selected.emit(self.selected_turn)
