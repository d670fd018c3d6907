"""A scene running: several NPCs in one conversation, each with its own view of it.

Each NPC is a ``Session`` on its own asset, with its own history, budgets, summaries and KV caches.
What others say reaches an NPC only if it was there and in earshot. When the director picks an NPC
to speak, the lines it heard since it last spoke become its turn's line, one line per speaker:

    Player: Good evening, all!
    Tomas: Evening, friend. A song?

A chat template has only user and assistant roles: everything said by others is the user message,
each line attributed to its speaker by name, and the NPC's own replies are its assistant messages.
So an NPC's history is the scene as it heard it, and a line it did not hear never reaches its prompt.

A round is what follows one player line (or one "carry on" with no line): the player's line, then up
to ``director.max_npc_lines`` NPC lines. A round that fails (a node's error, a cancel) is taken back
whole: every NPC is as it was before it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.agent import TurnResult
from runtime.asset.file import load_asset
from runtime.backends.base import Backend
from runtime.events import Event
from runtime.nodes.running import TurnCancelled
from runtime.problems import Problem
from runtime.scene.director import RECENT_LINES, Pick, choose
from runtime.scene.model import PLAYER, SceneAsset, SceneError, load_scene
from runtime.session.session import Session

__all__ = ["PAUSE", "Scene", "SceneLine", "SceneRound", "SpokenTurn"]

# The line an NPC answers when the player says nothing and it heard nothing new (NPCs talking among
# themselves): a stage direction, not words anyone said.
PAUSE = "(a pause in the conversation)"


@dataclass(frozen=True)
class SceneLine:
    """One line said in the scene: by the player or an NPC, and who heard it."""

    speaker: str  # 'player' or an NPC's id
    name: str  # the speaker's display name
    text: str
    heard_by: tuple[str, ...]  # the NPCs that heard it (there, and in earshot)


@dataclass(frozen=True)
class SpokenTurn:
    """An NPC's turn: what it heard (its turn's line, attributed) and what it said."""

    npc: str
    heard: str
    result: TurnResult
    rule: str  # the director's rule that picked it


@dataclass
class SceneRound:
    player: SceneLine | None  # None: the player said nothing (the NPCs carried on)
    turns: list[SpokenTurn] = field(default_factory=list)
    to: str = ""  # the NPC the player spoke to
    whisper: bool = False

    @property
    def speakers(self) -> list[str]:
        return [t.npc for t in self.turns]


# (speaker, event): an NPC's runtime events while it speaks, and each SceneLine as it is said
SceneCallback = Callable[[str, "Event | SceneLine"], None]


@dataclass
class _Member:
    npc: str
    name: str
    session: Session
    present: bool
    pending: list[SceneLine] = field(default_factory=list)  # heard since it last spoke
    heard: list[SceneLine] = field(default_factory=list)  # every line it heard


@dataclass(frozen=True)
class _Mark:
    """The scene before a round: what a failed round or a rewind restores."""

    transcript: int
    turns: dict[str, int]
    pending: dict[str, list[SceneLine]]
    heard: dict[str, int]
    present: dict[str, bool]
    last_npc: str


class Scene:
    def __init__(self, asset: SceneAsset, backend: Backend, folder: str | Path, *, session_id: str = "scene",
                 source: str = "") -> None:
        """Raises ``SceneError`` naming the NPC whose asset cannot be loaded."""
        self.asset = asset
        self.backend = backend
        self.folder = Path(folder)
        self.session_id = session_id
        self.members: dict[str, _Member] = {}
        for index, npc in enumerate(asset.npcs):
            path = self.folder / npc.asset
            try:
                session = Session(load_asset(path), backend, path.resolve().parent, session_id=f"{session_id}/{npc.id}")
            except Exception as exc:  # AssetError, or a behaviour that cannot be read
                problems = getattr(exc, "problems", None) or [Problem("error", str(exc), str(path))]
                raise SceneError([Problem("error", f"NPC {npc.id!r}: its asset {npc.asset!r} does not load: "
                                          f"{problems[0].message}", source, field=f"npcs.{index}.asset")]) from exc
            self.members[npc.id] = _Member(npc.id, npc.name, session, npc.present)
        self.transcript: list[SceneLine] = []
        self.rounds: list[SceneRound] = []
        self._marks: list[_Mark] = []
        self._last_npc = ""

    @classmethod
    def open(cls, path: str | Path, backend: Backend, *, session_id: str = "scene") -> Scene:
        return cls(load_scene(path), backend, Path(path).resolve().parent, session_id=session_id, source=str(path))

    # --- who is there ---------------------------------------------------------------------------

    def present(self) -> list[str]:
        return [m.npc for m in self.members.values() if m.present]

    def member(self, npc: str) -> _Member:
        try:
            return self.members[npc]
        except KeyError:
            raise SceneError([Problem("error", f"the scene has no NPC {npc!r} (its NPCs: "
                                      f"{', '.join(self.members)})", "", field="npc")]) from None

    def join(self, npc: str) -> None:
        """``npc`` comes into the scene. It hears nothing said before, unless its ``hears_before_join``
        says so: then every line it would have heard, as if it had been there."""
        member = self.member(npc)
        if member.present:
            return
        member.present = True
        if self.asset.npc(npc).hears_before_join:
            missed = [line for line in self.transcript if self._hears(npc, line.speaker) and line not in member.heard]
            member.heard += missed
            member.pending += missed

    def leave(self, npc: str) -> None:
        """``npc`` leaves: it hears nothing more until it joins again."""
        self.member(npc).present = False

    def _hears(self, listener: str, speaker: str) -> bool:
        return self.asset.hears(listener, speaker)

    # --- talking ----------------------------------------------------------------------------------

    def say(self, line: str | None, *, to: str = "", whisper: bool = False, on_event: SceneCallback | None = None,
            cancel: threading.Event | None = None, tool_result: Any = None, mock_tools: bool = True,
            commit: Callable[[], bool] | None = None) -> SceneRound:
        """The player says ``line`` (None: says nothing, and the NPCs carry on among themselves); then
        the director picks up to ``max_npc_lines`` NPCs to speak, one after the other. ``to``: the NPC
        the player speaks to (the ``addressed`` rule picks it first); ``whisper``: only ``to`` hears
        it. ``mock_tools=False`` asks ``tool_result`` for every tool call, mocked or not (as
        ``Agent.run_turn``). Raises ``SceneError`` for an NPC that is not there, and what a turn
        raises (``TurnError``, ``TurnCancelled``, ...) with the scene as it was before the round. A
        cancel set before the round is kept cancels it, however late (``commit``: as for
        ``Agent.run_turn``)."""
        if to and not self.member(to).present:
            raise SceneError([Problem("error", f"{to!r} is not in the scene now", "", field="to")])
        if whisper and not to:
            raise SceneError([Problem("error", "a whisper needs the NPC it is whispered to", "", field="whisper")])
        mark = self._mark()
        round_ = SceneRound(None, to=to, whisper=whisper)
        try:
            last_text, last_speaker = "", PLAYER
            if line is not None:
                listeners = [to] if whisper else [n for n in self.present() if self._hears(n, PLAYER)]
                round_.player = self._said(PLAYER, self.asset.player_name, line, listeners, on_event)
                last_text = line
            for _ in range(self.asset.director.max_npc_lines):
                pick = self._next(last_text, last_speaker, to if last_speaker == PLAYER else "", line is None,
                                  round_)
                if not pick.npc:
                    break
                spoken = self._speak(pick, on_event, cancel, tool_result, mock_tools)
                round_.turns.append(spoken)
                last_text, last_speaker = spoken.result.reply, pick.npc
            if (cancel is not None and cancel.is_set()) or (commit is not None and not commit()):
                raise TurnCancelled("the round was cancelled")
        except BaseException:
            self._restore(mark)
            raise
        self._marks.append(mark)
        self.rounds.append(round_)
        return round_

    def _next(self, text: str, speaker: str, to: str, carrying_on: bool, round_: SceneRound) -> Pick:
        # Who may speak: there, and heard something since it last spoke (or, when the player said
        # nothing, anyone there for the first line).
        candidates = [n for n in self.present()
                      if self.members[n].pending or (carrying_on and not round_.turns)]
        return choose(self.asset, text, speaker, candidates, to=to, last_npc=self._last_npc,
                      transcript=self._recent, backend=self.backend, session_key=f"{self.session_id}/director")

    def _speak(self, pick: Pick, on_event: SceneCallback | None, cancel: threading.Event | None,
               tool_result: Any, mock_tools: bool = True) -> SpokenTurn:
        member = self.members[pick.npc]
        heard = self._heard(member) or PAUSE
        events = None if on_event is None else (lambda event, npc=pick.npc: on_event(npc, event))
        run: dict[str, Any] = {"on_event": events, "cancel": cancel, "mock_tools": mock_tools}
        if tool_result is not None:
            run["tool_result"] = tool_result
        result = member.session.turn(heard, **run)
        member.pending = []
        self._last_npc = pick.npc
        if result.reply:
            listeners = [n for n in self.present() if n != pick.npc and self._hears(n, pick.npc)]
            self._said(pick.npc, member.name, result.reply, listeners, on_event)
        return SpokenTurn(pick.npc, heard, result, pick.rule)

    def _said(self, speaker: str, name: str, text: str, listeners: list[str], on_event: SceneCallback | None
              ) -> SceneLine:
        line = SceneLine(speaker, name, text, tuple(listeners))
        self.transcript.append(line)
        for npc in listeners:
            self.members[npc].pending.append(line)
            self.members[npc].heard.append(line)
        if on_event is not None:
            on_event(speaker, line)
        return line

    def warm(self, cancel: threading.Event | None = None) -> dict[str, dict[str, int]]:
        """Read ahead after a round, while the player reads and types: each NPC there brings its
        caches up to its next prompt (``Agent.warm``), the lines it heard since it last spoke included.
        A branch of its graph that did not run for some rounds (its guard's warning, another reply
        node) would otherwise read all of them when it next runs. Returns the tokens read per NPC and
        node; stops once ``cancel`` is set (the player spoke: the round starts from where it got)."""
        read = {}
        for npc in self.present():
            if cancel is not None and cancel.is_set():
                break
            member = self.members[npc]
            read[npc] = member.session.warm(self._heard(member), cancel)
        return read

    @staticmethod
    def _heard(member: _Member) -> str:
        """What ``member`` heard since it last spoke, one line per speaker: its next turn's line."""
        return "\n".join(f"{line.name}: {line.text}" for line in member.pending)

    def _recent(self) -> str:
        return "\n".join(f"{line.name}: {line.text}" for line in self.transcript[-RECENT_LINES:])

    # --- going back ---------------------------------------------------------------------------------

    def _mark(self) -> _Mark:
        return _Mark(len(self.transcript), {n: len(m.session.agent.history.turns) for n, m in self.members.items()},
                     {n: list(m.pending) for n, m in self.members.items()},
                     {n: len(m.heard) for n, m in self.members.items()},
                     {n: m.present for n, m in self.members.items()}, self._last_npc)

    def _restore(self, mark: _Mark) -> None:
        del self.transcript[mark.transcript:]
        for npc, member in self.members.items():
            if len(member.session.agent.history.turns) > mark.turns[npc]:
                member.session.agent.rewind(mark.turns[npc])
            member.pending = list(mark.pending[npc])
            del member.heard[mark.heard[npc]:]
            member.present = mark.present[npc]
        self._last_npc = mark.last_npc

    def rewind(self, rounds: int = 1) -> None:
        """Take back the last ``rounds`` rounds: every NPC's history, caches' journals, what it heard
        and who was there are as they were before them."""
        if not 0 <= rounds <= len(self.rounds):
            raise SceneError([Problem("error", f"cannot take back {rounds} rounds: the scene has {len(self.rounds)}",
                                      "", field="rounds")])
        if rounds == 0:
            return
        mark = self._marks[-rounds]
        del self._marks[-rounds:]
        del self.rounds[-rounds:]
        self._restore(mark)

    def regenerate(self, **say: Any) -> SceneRound:
        """The last round again, from the same line (a new alternative of each NPC's turn is made by
        running it again; with the same seeds it comes out the same)."""
        if not self.rounds:
            raise SceneError([Problem("error", "no round to say again", "")])
        last = self.rounds[-1]
        self.rewind(1)
        return self.say(last.player.text if last.player else None, to=last.to, whisper=last.whisper, **say)
