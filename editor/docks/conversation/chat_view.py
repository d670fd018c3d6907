"""The chat transcript: player lines, each reply with the node that wrote it, tool calls inline,
summaries where they folded, and which backend ran each turn once a conversation has run on a server. Finished turns are drawn from the agent's dialog history;
the running turn is appended piece by piece as tokens stream in."""

from __future__ import annotations

import html
import json
from pathlib import Path

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser, QWidget

from editor.canvas.subgraphs import behaviour_node
from editor.services.backend_choice import EMBEDDED_LABEL
from runtime.asset.model import Asset
from runtime.dialogue.history import Reply, SavedDialog, ToolExchange

STYLE = """
  .turn { color: #8a8a8a; font-size: small; }
  .player { color: #e8e8e8; }
  .who { color: #7fb2e5; font-weight: bold; }
  .node { color: #d9a55b; font-weight: bold; }
  .hidden { color: #8a8a8a; font-style: italic; }
  .tool { color: #8fd18f; font-family: monospace; }
  .summary { color: #c49be8; }
  .live { color: #e8e8e8; }
  .error { color: #ff8080; }
  .edited { color: #e5c07b; font-size: small; }
  .same { color: #8fd18f; font-size: small; }
  .changed { color: #e5c07b; font-size: small; font-weight: bold; }
  a.node { color: #d9a55b; font-weight: bold; text-decoration: none; }
  a.act { color: #7fb2e5; text-decoration: none; font-size: small; }
  .via { color: #7d7d7d; font-size: small; }
"""

# Links in a turn's header: ``turn:ACTION:INDEX`` (INDEX from 0, the turn's place in the branch), and
# ``branch:TURN_ID`` for the < > arrows between a turn's alternatives. The dock handles them.
TURN_ACTIONS = (("regenerate", "\u21bb regenerate", ("Run this turn again; the dock then offers to replay the later "
                 "turns after it (they stay on the old branch otherwise)")),
                ("edit", "\u270e edit", "Edit the player's line (or the reply) and go on from there"),
                ("rewind", "\u21b6 rewind here", ("Go back to before this turn, exactly as it was then, with its "
                 "line in the box to edit or send again")),
                ("replay", "\u25b6 replay from here", "Send the player's lines again from this turn with the graph as it is now"))


def _e(text: str) -> str:
    return html.escape(text).replace("\n", "<br/>")


def node_label(asset: Asset | None, node_id: str, folder: Path | None = None) -> str:
    """A node as the chat names it: its title and id (just the id when the node is gone). A node of a
    behaviour (``guard/warn``) is found in the behaviour's file, from the asset's ``folder``."""
    if asset is not None:
        try:
            node = asset.node(node_id)
        except KeyError:
            node = behaviour_node(asset, folder, node_id)
        if node is not None and node.title and node.title != node.id:
            return f"{node.title} ({node_id})"
    return node_id


def node_link(asset: Asset | None, node_id: str, after: str = "", folder: Path | None = None) -> str:
    """A node's name as a ``node:ID`` link (the dock shows the node on the canvas), ``after`` inside it."""
    return (f"<a class='node' href='node:{html.escape(node_id, quote=True)}' title='Show this node on the canvas'>"
            f"{_e(node_label(asset, node_id, folder))}{after}</a>")


def tool_text(tool: str, arguments: dict) -> str:
    return f"{tool}({json.dumps(arguments, ensure_ascii=False)})"


def turn_header(saved: SavedDialog, index: int, changed: dict[int, bool] | None = None,
                read_only: bool = False) -> str:
    """A turn's header: its number (from 1), an edited mark, ``< 2/3 >`` between its alternatives,
    whether a replay changed its reply, and its actions (none, and no arrows, when ``read_only``:
    a conversation followed elsewhere is not changed here)."""
    parts = [f"<span class='turn'>Turn {index + 1}</span>"]
    tree = saved.tree
    path = tree.path() if tree is not None else []
    if index < len(path):
        node = tree.nodes[path[index]]  # type: ignore[union-attr]
        if node.edited:
            parts.append("<span class='edited'>\u270e edited</span>")
        alternatives = tree.alternatives(node.id)  # type: ignore[union-attr]
        if len(alternatives) > 1 and read_only:
            parts.append(f"<span class='turn'>{alternatives.index(node.id) + 1}/{len(alternatives)}</span>")
        elif len(alternatives) > 1:
            at = alternatives.index(node.id)
            back = (f"<a class='act' href='branch:{alternatives[at - 1]}' title='the previous alternative'>\u25c0</a>"
                    if at > 0 else "<span class='turn'>\u25c1</span>")
            forward = (f"<a class='act' href='branch:{alternatives[at + 1]}' title='the next alternative'>\u25b6</a>"
                       if at + 1 < len(alternatives) else "<span class='turn'>\u25b7</span>")
            parts.append(f"{back} <span class='turn'>{at + 1}/{len(alternatives)}</span> {forward}")
        if changed and node.id in changed:
            parts.append("<span class='changed'>reply changed</span>" if changed[node.id]
                         else "<span class='same'>same reply</span>")
    if read_only:
        return " &nbsp;".join(parts)
    actions = " ".join(f"<a class='act' href='turn:{name}:{index}' title='{tip}'>{label}</a>"
                       for name, label, tip in TURN_ACTIONS)
    return " &nbsp;".join(parts) + f" &nbsp; {actions}"


def shown_backends(saved: SavedDialog, backends: dict[int, str] | None) -> dict[int, str]:
    """Turn index -> the backend line to show under it. Only once a turn of this branch ran on a
    server (or on another backend than the rest): a conversation wholly on this computer shows none."""
    tree = saved.tree
    if not backends or tree is None:
        return {}
    labels = {i: backends.get(turn_id, "") for i, turn_id in enumerate(tree.path())}
    used = {label for label in labels.values() if label}
    if not used or used == {EMBEDDED_LABEL}:
        return {}
    return {i: label for i, label in labels.items() if label}


def transcript_html(saved: SavedDialog, asset: Asset | None, changed: dict[int, bool] | None = None,
                    backends: dict[int, str] | None = None, read_only: bool = False,
                    folder: Path | None = None) -> str:
    """The finished turns of the current branch as HTML (summaries after the turn they fold through);
    ``backends`` (turn id -> backend label) adds a quiet "via ..." line under each turn's replies;
    ``read_only`` leaves out the turns' actions; ``folder``: the asset's (where its behaviours are)."""
    rows: list[str] = []
    via = shown_backends(saved, backends)
    summaries = {}
    for summary in saved.history.summaries:
        summaries.setdefault(summary.covered_through, []).append(summary)
    for index, turn in enumerate(saved.history.turns):
        rows.append(f"<p>{turn_header(saved, index, changed, read_only)}<br/>"
                    f"<span class='who'>Player:</span> <span class='player'>{_e(turn.player)}</span></p>")
        for entry in turn.entries:
            if isinstance(entry, Reply):
                hidden = "" if entry.replay else " <span class='hidden'>(hidden step: not replayed)</span>"
                rows.append(f"<p>{node_link(asset, entry.node, ':', folder)}{hidden} "
                            f"{_e(entry.text)}</p>")
            elif isinstance(entry, ToolExchange):
                rows.append(f"<p class='tool'>\u2692 {node_link(asset, entry.node, folder=folder)} called "
                            f"{_e(tool_text(entry.tool, entry.arguments))} \u2192 {_e(entry.result)}</p>")
        if index in via:
            rows.append(f"<p class='via' title='{html.escape(via[index], quote=True)}'>via {_e(via[index])}</p>")
        for summary in summaries.get(index, []):
            by = f" by {_e(node_label(asset, summary.node, folder))}" if summary.node else ""
            rows.append(f"<p class='summary'>\u2261 Summary{by}: folded {summary.folded_turns} turn"
                        f"{'s' if summary.folded_turns != 1 else ''} (through turn {summary.covered_through + 1})<br/>"
                        f"<i>{_e(summary.text)}</i></p>")
    return "".join(rows)


class ChatView(QTextBrowser):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.document().setDefaultStyleSheet(STYLE)
        self.setPlaceholderText("Say something to the character below. Each reply shows the node that wrote it.")
        self._streaming_node = ""
        self.read_only = False  # turns without their actions (a conversation followed on a server)

    def show_history(self, saved: SavedDialog, asset: Asset | None, changed: dict[int, bool] | None = None,
                     backends: dict[int, str] | None = None, folder: Path | None = None) -> None:
        self._streaming_node = ""
        self.setHtml(transcript_html(saved, asset, changed, backends, self.read_only, folder))
        self._scroll_to_end()

    def _append(self, html_text: str) -> None:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.document().isEmpty():
            cursor.insertBlock()  # insertHtml would otherwise continue the last paragraph
        cursor.insertHtml(html_text)
        self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    # --- the running turn ------------------------------------------------------------------

    def begin_turn(self, line: str) -> None:
        self._append(f"<p><span class='who'>Player:</span> <span class='player'>{_e(line)}</span></p>")
        self._streaming_node = ""

    def begin_node(self, label: str, node_id: str = "") -> None:
        name = (f"<a class='node' href='node:{html.escape(node_id, quote=True)}' title='Show this node on the "
                f"canvas'>{_e(label)}:</a>") if node_id else f"<span class='node'>{_e(label)}:</span>"
        self._append(f"<p>{name} </p>")
        self._streaming_node = label

    def stream(self, text: str) -> None:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        plain = QTextCharFormat()
        plain.setForeground(QColor("#e8e8e8"))
        cursor.insertText(text, plain)
        self._scroll_to_end()

    def note(self, text: str, colour: str = "#8fd18f") -> None:
        self._append(f"<p><span style='color:{colour}'>{_e(text)}</span></p>")
