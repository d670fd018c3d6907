"""Events a turn streams out as they happen, so the editor can show a turn live.

``Agent.run_turn`` calls its ``on_event`` callback with these, on the thread that
runs the turn, in this order per node: ``NodeStarted``, any ``Token`` / ``Speak`` /
``ToolCalled`` / ``Summarized`` / ``TurnWarning``, then ``NodeFinished``; the turn
ends with ``TurnFinished`` (only when it succeeds). ``kind`` is the event's name in
the user's words, for a UI that dispatches on strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class NodeEvent:
    """Something one node did while it ran; ``node`` is its id."""

    kind: ClassVar[str]
    node: str


@dataclass(frozen=True)
class NodeStarted(NodeEvent):
    kind: ClassVar[str] = "node_started"
    type: str


@dataclass(frozen=True)
class NodeText(NodeEvent):
    """Text a node produced: a ``Token`` or a ``Speak``. ``reply``: it is part of the reply the player
    sees (a player-facing node's output that is the turn's reply, or a guard's canned line), not an
    inner node's (a classifier's, a Tool Call's JSON): a game shows only these."""

    text: str
    reply: bool = False


@dataclass(frozen=True)
class Token(NodeText):
    """A piece of text a model just generated."""

    kind: ClassVar[str] = "token"


@dataclass(frozen=True)
class Speak(NodeText):
    """A sentence a GenerateAndSpeak node finished: ready for text-to-speech. ``tags``: the reply's tags
    as it is spoken, name -> value (the node's own tag, picked before its first sentence, and the
    ``Asset.reply_tags`` earlier nodes wrote); empty for a guard's canned line."""

    kind: ClassVar[str] = "speak"
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCalled(NodeEvent):
    kind: ClassVar[str] = "tool_call"
    tool: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Summarized(NodeEvent):
    """A Summarize node folded turns into a new summary (sent when ``notify_client`` is set)."""

    kind: ClassVar[str] = "summarized"
    covered_through: int  # index of the last turn the summary covers (turns count from 0)
    folded_turns: int
    summary_chars: int
    text: str


@dataclass(frozen=True)
class TurnWarning(NodeEvent):
    kind: ClassVar[str] = "warning"
    message: str


@dataclass(frozen=True)
class Guarded(NodeEvent):
    """A Guard node found a policy broken: the game can react (the guard calls the watch)."""

    kind: ClassVar[str] = "guarded"
    policy: str
    exit: str  # the port taken: "policy:NAME"
    check: str  # which check found it: patterns, plugin:NAME, model
    why: str
    checked: str  # line, or reply (a reply withdrawn before it was spoken)


@dataclass(frozen=True)
class GameEventReached(NodeEvent):
    """The turn reached a node or exit the asset marks as one the game acts on (``Asset.game_events``)."""

    kind: ClassVar[str] = "game_event"
    name: str
    exit: str  # the port taken; '' when the mark is on the node running


@dataclass(frozen=True)
class ReplyTagged(NodeEvent):
    """A node wrote a slot the asset sends the game with the reply (``Asset.reply_tags``), or a Generate
    and Speak node picked its reply's tag (``GenerateAndSpeak.tags``): a mood or a gesture the game
    shows as the reply streams."""

    kind: ClassVar[str] = "tag"
    name: str
    value: str


@dataclass(frozen=True)
class NodeFinished(NodeEvent):
    kind: ClassVar[str] = "node_finished"
    type: str
    output: str
    exit: str  # the port taken: "default_exit", "intent:NAME", "fallback_exit"
    next_node: str  # "" is END


@dataclass(frozen=True)
class TurnFinished:
    kind: ClassVar[str] = "turn_finished"
    turn: int
    reply: str
    path: list[str] = field(default_factory=list)


Event = NodeStarted | Token | Speak | ToolCalled | Summarized | TurnWarning | Guarded | GameEventReached | ReplyTagged | NodeFinished | TurnFinished
EventCallback = Callable[[Event], None]

# A sentence ends at . ! ? or … (optionally followed by closing quotes or brackets) and then whitespace.
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s+")
_SENTENCE_END_CHARS = frozenset(".!?\u2026\"'\u201d\u2019)]")


class SentenceSplitter:
    """Collects streamed text and hands back whole sentences, for ``Speak`` events."""

    def __init__(self) -> None:
        self._pending = ""
        self._scanned = 0  # where in the pending text a sentence end may still begin

    def feed(self, text: str) -> list[str]:
        self._pending += text
        sentences: list[str] = []
        while True:
            match = _SENTENCE_END.search(self._pending, self._scanned)
            if not match:
                # Only the trailing run of punctuation and closing quotes can still begin a sentence
                # end, so the next token is searched from there, not from the start: a long reply
                # with no full stop was scanned again for every token (quadratic).
                start = len(self._pending)
                while start > self._scanned and self._pending[start - 1] in _SENTENCE_END_CHARS:
                    start -= 1
                self._scanned = start
                return sentences
            sentence = self._pending[: match.end()].strip()
            self._pending = self._pending[match.end():]
            self._scanned = 0
            if sentence:
                sentences.append(sentence)

    def flush(self) -> list[str]:
        """The text left over at the end of generation (a last sentence without trailing space)."""
        rest, self._pending, self._scanned = self._pending.strip(), "", 0
        return [rest] if rest else []
