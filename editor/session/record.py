"""A finished turn as the docks show it (``InspectedTurn``), and what the embedded backend's cache
snapshots hold after it (``SnapshotUse``). Plain data: the local conversation, a followed session and a
test run all make these, and the docks read them through the ``SessionView``."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.agent import TurnResult
from runtime.asset.model import Asset
from runtime.backends.base import Backend, Reproducibility
from runtime.diagnostics import TurnDiagnostics
from runtime.models.memory import MIB
from runtime.prompting.prompt import PromptPart


@dataclass(frozen=True)
class SnapshotUse:
    """What the embedded backend's cache snapshots (``LlamaBackend.snapshots``) hold, read on the
    worker thread after a turn or a budget change."""

    bytes: int  # in use now
    budget: int  # what they may take (0: snapshots are off)
    count: int  # snapshots kept now
    taken: int  # taken since the backend was made
    restored: int  # restored since the backend was made

    @property
    def text(self) -> str:
        """As the Turn Inspector shows it: "snapshots: 15 MiB of 256 MiB"."""
        if self.budget <= 0:
            return "snapshots: off"
        return f"snapshots: {mib_text(self.bytes)} of {mib_text(self.budget)}"

    @property
    def detail(self) -> str:
        """The counts, for a tooltip or the budget dialog."""
        kept = f"{self.count} snapshot{'s' if self.count != 1 else ''} kept"
        return f"{kept} ({self.bytes:,} bytes); {self.taken} taken and {self.restored} restored so far."


# What a snapshot is, in the designer's words (the Turn Inspector's tooltip)
SNAPSHOT_MEANING = ("A snapshot is a copy of a node's cache taken before a trim, a summary or a rewind cut it, so "
                    "going back across that turn restores it instead of reading the conversation again.")


def mib_text(size: int) -> str:
    """Bytes in whole MiB (below 1 MiB, in KiB, so a small use does not read as none)."""
    if 0 < size < MIB:
        return f"{max(size >> 10, 1)} KiB"
    return f"{round(size / MIB)} MiB"


def snapshot_use(backend: Backend | None) -> SnapshotUse | None:
    """The snapshots ``backend`` keeps (None for a backend that keeps none, such as a server). Call it
    on the worker thread only."""
    snapshots = getattr(backend, "snapshots", None)
    if snapshots is None:
        return None
    return SnapshotUse(snapshots.bytes, snapshots.budget, len(snapshots), snapshots.taken, snapshots.restored)


@dataclass
class InspectedTurn:
    """A finished turn as the docks show it: the runtime's diagnostics, the asset the turn ran on,
    and each prompt-building node's prompt in parts with their token costs (recorded by the runtime)."""

    diagnostics: TurnDiagnostics
    asset: Asset
    parts: dict[str, list[PromptPart]] = field(default_factory=dict)  # node id -> parts
    context_sizes: dict[str, int] = field(default_factory=dict)  # node id -> context size used
    turn_id: int = -1  # the turn's id in the conversation tree
    replaced: str | None = None  # in a replay: the reply the recorded turn had
    # What the backend that ran it promises on a replay (None: not known, e.g. a test run's turn)
    reproducibility: Reproducibility | None = None
    snapshots: SnapshotUse | None = None  # the embedded backend's cache snapshots after the turn

    @property
    def turn(self) -> int:
        """Its position in its branch (from 0; the chat and the inspector show it from 1)."""
        return self.diagnostics.turn

    @property
    def changed(self) -> bool | None:
        """In a replay: whether the reply differs from the recorded one (None outside a replay)."""
        return None if self.replaced is None else self.diagnostics.reply != self.replaced


def inspected_turn(result: TurnResult, asset: Asset) -> InspectedTurn:
    """The record of a finished turn (with diagnostics) that ran on ``asset``: the live
    conversation's turns, and the turns of a test run that the Turn Inspector opens."""
    assert result.diagnostics is not None
    return InspectedTurn(
        result.diagnostics, asset,
        parts={node: prompt.parts for node, prompt in result.prompts.items()},
        context_sizes={node: prompt.context_size for node, prompt in result.prompts.items()},
        turn_id=result.turn_id,
    )
