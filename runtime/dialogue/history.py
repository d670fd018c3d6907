"""The dialog history: everything said in one agent's conversation.

The history belongs to the agent and grows without limit: every player line, every
reply with the node that wrote it, every tool call with its result, every summary
with the turns it covers. Prompts are built from it per node (``runtime.prompting.prompt``);
trimming a prompt never removes anything here.

Turns count from 0. A summary's ``covered_through`` is the index of the last turn it
covers. The file format is ``runtime.dialogue.dialog_file``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.names import VariableValue

if TYPE_CHECKING:  # pragma: no cover
    from runtime.dialogue.tree import ConversationTree


# --- the history, as the runtime uses it ------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A reply a node wrote. ``replay`` records the node's History Role when it was written:
    False (``history_role: none``) means later turns never see it."""

    node: str
    text: str
    replay: bool = True


@dataclass(frozen=True)
class ToolExchange:
    """A tool call and its result: one history entry, replayed whole or not at all."""

    node: str
    tool: str
    arguments: dict[str, Any]
    result: str
    replay: bool = True  # the node's Disposition when it was written: replay, or omit


Entry = Reply | ToolExchange


@dataclass
class Turn:
    player: str
    entries: list[Entry] = field(default_factory=list)


@dataclass(frozen=True)
class Summary:
    text: str
    covered_through: int
    folded_turns: int
    node: str = ""

    @property
    def summary_chars(self) -> int:
        return len(self.text)


@dataclass
class DialogHistory:
    turns: list[Turn] = field(default_factory=list)
    summaries: list[Summary] = field(default_factory=list)

    @property
    def summary(self) -> Summary | None:
        """The newest summary, the one prompts use."""
        return self.summaries[-1] if self.summaries else None

    @property
    def covered_through(self) -> int:
        """Index of the last turn the newest summary covers; -1 when there is none."""
        return self.summaries[-1].covered_through if self.summaries else -1

    def copy(self) -> DialogHistory:
        """A copy whose lists can change without touching this one (turns are not changed in place)."""
        return DialogHistory([Turn(t.player, list(t.entries)) for t in self.turns], list(self.summaries))


@dataclass
class SavedDialog:
    """What a dialog file holds: the history and the agent state that shapes future prompts."""

    history: DialogHistory = field(default_factory=DialogHistory)
    windows: dict[str, int] = field(default_factory=dict)  # node id -> window start
    variables: dict[str, VariableValue] = field(default_factory=dict)
    system_prompts: dict[str, str] = field(default_factory=dict)  # node id -> system prompt set at runtime
    seed_salt: int = 0  # added to every fixed seed (re-rolled seeds)
    tree: ConversationTree | None = None  # every branch (None: a history that kept none, such as a version 1 file)
