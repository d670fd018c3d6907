"""A finished turn, as every view keeps it: one record and one JSON form.

``TurnRecord.to_json`` is the wire form (``parley serve``'s turn details and ``turn_finished``, the
turns the editor follows) and the file form (kept test runs); ``from_json`` reads it back, and the
OpenAPI schema of ``parley serve`` is generated from the same class. A view that needs more (a
suite's checks, a simulated player's steering) holds a record and adds only that."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from pydantic import TypeAdapter

from runtime.agent import TurnGuard, TurnResult
from runtime.diagnostics import TurnDiagnostics
from runtime.nodes.running import RecordedPrompt

__all__ = ["TurnRecord"]


@dataclass
class TurnRecord:
    """What one turn said and did. ``diagnostics`` is None, and ``prompts`` empty, for a turn whose
    run is not known here (imported with a history, or with diagnostics off)."""

    turn_id: int  # its id in the conversation tree
    index: int  # its place in the conversation, from 0
    line: str  # what the player said
    reply: str
    path: list[str] = field(default_factory=list)  # the nodes it ran, in order
    diagnostics: TurnDiagnostics | None = None
    prompts: dict[str, RecordedPrompt] = field(default_factory=dict)  # node id -> its prompt, told apart by part
    backend: str = ""  # what ran its model calls (``Backend.label``)
    # What a game reacts to, kept whether or not the asset has diagnostics on
    guard: TurnGuard = field(default_factory=TurnGuard)  # the first policy a Guard found broken ('' when none)
    game_events: list[str] = field(default_factory=list)  # the marked game events it reached, in order
    # The reply's tags, name -> value: the asset's reply_tags its nodes wrote, a Generate and Speak node's tag
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, line: str, result: TurnResult) -> TurnRecord:
        """The record of a turn the agent just ran on ``line``."""
        return cls(result.turn_id, result.turn, line, result.reply, list(result.path), result.diagnostics,
                   dict(result.prompts), result.backend, result.guard, list(result.game_events), dict(result.tags))

    def without_details(self) -> TurnRecord:
        """The record less its diagnostics and prompts (most of its memory): what it said and where it went."""
        return replace(self, diagnostics=None, prompts={})

    def result(self) -> TurnResult:
        """The record as the runtime's ``TurnResult`` (what the Turn Inspector and replays read)."""
        return TurnResult(self.index, self.reply, list(self.path), {}, self.diagnostics, dict(self.prompts),
                          self.turn_id, self.backend, guard=self.guard, game_events=list(self.game_events),
                          tags=dict(self.tags))

    def to_json(self) -> dict[str, Any]:
        return _adapter().dump_python(self, mode="json")

    @classmethod
    def from_json(cls, raw: Any) -> TurnRecord:
        """Raises ``pydantic.ValidationError`` (a ValueError) naming the field that does not fit."""
        return _adapter().validate_python(raw)

    @staticmethod
    def json_schema() -> dict[str, Any]:
        return _adapter().json_schema()


@cache
def _adapter() -> TypeAdapter[TurnRecord]:
    return TypeAdapter(TurnRecord)


class HoldsRecord:
    """A turn kept by a door that adds its own facts (a suite's checks, a kept run, a simulated
    player's steer, a variant's trace) to the runtime's ``record``: its reply and path are the
    record's, never copies. ``record`` is None when the turn failed."""

    record: TurnRecord | None

    @property
    def reply(self) -> str:
        return self.record.reply if self.record is not None else ""

    @property
    def path(self) -> list[str]:
        return self.record.path if self.record is not None else []
