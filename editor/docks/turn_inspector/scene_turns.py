"""A scene's NPC lines as turns of the Turn Inspector: each one that NPC's own turn record (its prompts
exactly as it saw them), picked by its round and speaker, with what it heard above its path."""

from __future__ import annotations

from pathlib import Path

from editor.session.record import InspectedTurn
from editor.session.scene_view import PLAYER_TURN, LineKey, SceneShown


class SceneTurns:
    """The scene's turns the inspector lists among its turns from elsewhere (``external``: label ->
    (record, note)), and what it knows of each: its line, its NPC and its note's heading."""

    def __init__(self) -> None:
        self.labels: dict[LineKey, str] = {}  # a line -> its label in the pickers
        self.npcs: dict[str, str] = {}  # label -> the NPC whose turn it is
        self.headings: dict[str, str] = {}  # label -> what its note is

    def fill(self, shown: SceneShown, external: dict[str, tuple[InspectedTurn, str]]) -> None:
        """Replace the scene's turns in ``external`` with those of ``shown``."""
        for label in self.npcs:
            external.pop(label, None)
        self.labels, self.npcs, self.headings = {}, {}, {}
        for line in shown.lines:
            if line.turn == PLAYER_TURN or line.record is None:
                continue
            label = scene_turn_label(line.round, line.name, line.text)
            if label in external:
                label += f" ({line.turn + 1})"
            npc = shown.npc(line.speaker)
            where = f" ({Path(npc.asset_path).name})" if npc is not None else ""
            picked = f", picked by {line.rule.replace('_', ' ')}" if line.rule else ""
            external[label] = (line.record, line.heard)
            self.headings[label] = f"{line.name}'s turn{where}{picked}; what {line.name} heard"
            self.labels[line.key] = label
            self.npcs[label] = line.speaker

    def key_of(self, label: str) -> LineKey | None:
        return next((key for key, known in self.labels.items() if known == label), None)


def scene_turn_label(round_: int, name: str, text: str) -> str:
    """A scene line's turn in the pickers: its round, its speaker and the start of what it said."""
    said = " ".join(text.split())
    more = "\u2026" if len(said) > 32 else ""
    return f"Round {round_ + 1} \u00b7 {name}: \u201c{said[:32]}{more}\u201d"
