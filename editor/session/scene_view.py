"""What the docks observe of a scene (several NPCs in one conversation), and the one way it reaches them.

A ``SceneView`` holds what the scene looks like after its last change (``shown``: its NPCs, who is
there, and every line said with its speaker and, for an NPC's line, that NPC's turn record), which line
is selected and whether a round runs, and emits the signals the docks follow. Its source is the
window's ``editor.session.scene.SceneConversation``, whose worker thread runs the runtime's ``Scene``;
the docks change the scene through ``actions`` (``SceneActions``) and never see that thread. Every
signal here is emitted on the UI thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from PySide6.QtCore import QObject, Signal

from editor.session.record import InspectedTurn

# A line's key: (round, turn) with turn -1 for the player's line (both from 0)
LineKey = tuple[int, int]
PLAYER_TURN = -1


@dataclass(frozen=True)
class SceneNpcShown:
    """An NPC of the scene: its id, its display name, its asset file and whether it is there now."""

    id: str
    name: str
    asset_path: str
    present: bool


@dataclass(frozen=True)
class ShownLine:
    """A line of the scene as the Conversation dock shows it."""

    round: int  # from 0
    turn: int  # the NPC's turn in the round (from 0); PLAYER_TURN for the player's line
    speaker: str  # 'player' or an NPC's id
    name: str  # the speaker's display name
    text: str
    heard_by: tuple[str, ...]  # the NPCs that heard it
    rule: str = ""  # an NPC's line: the director's rule that picked it
    heard: str = ""  # an NPC's line: what it heard since it last spoke (its turn's line, one named line each)
    record: InspectedTurn | None = None  # an NPC's line: its turn as that NPC ran it (None: diagnostics off)
    same: bool | None = None  # after a regenerate or replay: whether this NPC said the same again (None: not asked)

    @property
    def key(self) -> LineKey:
        return (self.round, self.turn)


@dataclass(frozen=True)
class ShownRound:
    """A round: the player's line (or none: the NPCs carried on), whom it was said to, and the NPCs' lines;
    ``notes`` are the stage directions before it (who joined or left)."""

    index: int
    lines: tuple[ShownLine, ...]
    to: str = ""
    whisper: bool = False
    carried_on: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SceneShown:
    """The whole scene after its last change (a copy: the worker's ``Scene`` is never shared)."""

    path: str = ""  # the scene file ("" when no scene is open)
    name: str = ""
    player_name: str = "Player"
    npcs: tuple[SceneNpcShown, ...] = ()
    rounds: tuple[ShownRound, ...] = ()
    notes_after: tuple[str, ...] = ()  # stage directions since the last round
    exact: bool = True  # the backend promises the same reply again with the same graph and seed
    backend: str = ""  # the backend's label

    def npc(self, npc_id: str) -> SceneNpcShown | None:
        return next((n for n in self.npcs if n.id == npc_id), None)

    def name_of(self, speaker: str) -> str:
        npc = self.npc(speaker)
        return npc.name if npc is not None else self.player_name

    @property
    def lines(self) -> list[ShownLine]:
        return [line for r in self.rounds for line in r.lines]

    def line(self, key: LineKey) -> ShownLine | None:
        return next((line for line in self.lines if line.key == key), None)


class SceneActions(Protocol):
    """What the docks may ask of the scene they show; a call returns False when it cannot run now."""

    def say(self, line: str | None, to: str = "", whisper: bool = False) -> bool: ...
    def join(self, npc: str) -> bool: ...
    def leave(self, npc: str) -> bool: ...
    def rewind(self, rounds: int = 1) -> bool: ...
    def regenerate(self) -> bool: ...
    def replay(self, start: int = 0) -> bool: ...
    def stop(self) -> None: ...


@dataclass
class SceneReplayReport:
    """What a regenerate or replay found: per NPC line, whether it came out the same."""

    start: int  # the first round said again (from 0)
    rounds: int
    same: int = 0
    changed: int = 0
    changed_lines: list[str] = field(default_factory=list)  # "round 2, Tomas"


class SceneView(QObject):
    """The scene as the docks see it (one per window)."""

    opened = Signal(object)  # SceneShown: a scene was opened (or closed: a SceneShown without a path)
    changed = Signal(object)  # SceneShown: after a round, a join or leave, a rewind
    busy_changed = Signal(bool)
    round_started = Signal(str, str, bool)  # the player's line ("" when carrying on), to whom, whispered
    line_started = Signal(str, str)  # an NPC starts its reply: its id, its name
    token = Signal(str, str)  # an NPC's reply streaming: its id, the text
    line_said = Signal(object)  # runtime.scene.SceneLine, as it is said
    round_finished = Signal(object)  # SceneShown: a round said (not a replay's: ``replayed`` follows those)
    failed = Signal(object)  # Failure (runtime.session.failures): the round was taken back whole
    replayed = Signal(object)  # SceneReplayReport
    line_selected = Signal(object)  # LineKey: the line the Turn Inspector shows
    rejected = Signal(str)  # why a join, leave or rewind changed nothing

    def __init__(self, actions: SceneActions, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.actions = actions
        self.shown = SceneShown()
        self.busy = False
        self.selected: LineKey | None = None

    @property
    def is_open(self) -> bool:
        return bool(self.shown.path)

    # --- what a source feeds it ---------------------------------------------------------------------

    def show_opened(self, shown: SceneShown) -> None:
        self.shown, self.selected = shown, None
        self.opened.emit(shown)

    def show_scene(self, shown: SceneShown) -> None:
        self.shown = shown
        if self.selected is not None and shown.line(self.selected) is None:
            self.selected = None
        self.changed.emit(shown)

    def set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self.busy_changed.emit(busy)

    def select_line(self, key: LineKey | None) -> None:
        """Show ``key``'s line (an NPC's) in the Turn Inspector."""
        if key is not None and key != self.selected:
            self.selected = key
            self.line_selected.emit(key)
