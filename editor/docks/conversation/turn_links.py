"""The links on each turn of the chat: *regenerate*, *edit*, *rewind here*, *replay from here*, the
``< 2/3 >`` alternatives and the node names (which select the node on the canvas)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QLineEdit, QWidget

from editor.docks.conversation.history_dialogs import EditTurnDialog
from editor.docks.conversation.later_turns import LaterTurnsOffer
from editor.docks.conversation.status import TurnStatus
from editor.session.view import SessionView
from runtime.agent import turn_reply
from runtime.dialogue.history import Reply


def _with_reply(entries: list, old: str, new: str, asset) -> list:
    """The turn's entries with the reply the player heard replaced by ``new`` (in the last
    player-facing reply; one reply of the designer's own when there was none)."""
    out = list(entries)
    for i in range(len(out) - 1, -1, -1):
        entry = out[i]
        if isinstance(entry, Reply) and entry.replay and entry.text and entry.text in old:
            out[i] = Reply(entry.node, new, entry.replay)
            return out
    facing = next((n.id for n in asset.nodes if n.PLAYER_FACING), "reply")
    return out + [Reply(facing, new, True)]


class TurnLinks(QObject):
    """What a click on a turn's link does. ``line`` is the player's line box (a rewound turn's line goes
    back there); ``asset`` names the nodes; ``read_only`` says why the conversation cannot be changed."""

    node_clicked = Signal(str)  # a reply's node name: the window selects and centres that node

    def __init__(self, view: SessionView, status: TurnStatus, line: QLineEdit,
                 step_by_step: QCheckBox, later: LaterTurnsOffer, asset: Callable[[], object],
                 read_only: Callable[[], str], parent: QWidget) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.status = status
        self.line = line
        self.step_by_step = step_by_step
        self.later = later
        self.asset = asset
        self.read_only = read_only
        self.dialog_parent = parent

    def follow(self, url) -> None:
        """A link in the chat was clicked."""
        target = url.toString()
        if target.startswith("node:"):  # showing a node changes nothing: read-only too
            self.node_clicked.emit(target[len("node:"):])
            return
        if self.read_only():
            self.status.show_error(f"Read-only: {self.read_only()}")
            return
        if target.startswith("branch:"):
            self.actions.select_branch(int(target.split(":", 1)[1]))
            return
        if not target.startswith("turn:"):
            return
        _, action, index_text = target.split(":")
        index = int(index_text)
        if self.view.busy:
            self.status.show_error("Wait for the turn to finish first.")
            return
        if action == "regenerate":
            self.later.regenerate(index)
        elif action == "rewind":
            self.rewind(index)
        elif action == "replay":
            self.actions.replay(index, step=self.step_by_step.isChecked())
        elif action == "edit":
            self.edit_turn(index)

    def rewind(self, index: int) -> bool:
        """Go back to before turn ``index`` (from 0), with its line in the box, selected: edit it or send it again."""
        turns = self.view.saved.history.turns
        line = turns[index].player if 0 <= index < len(turns) else ""
        if not self.actions.rewind(index):
            return False
        self.line.setText(line)
        self.line.selectAll()
        self.line.setFocus()
        self.status.set_status(f"Back to before turn {index + 1}: its line is in the box below, to edit or send "
                               "again. The later turns are kept as a branch (Branches).")
        return True

    def edit_turn(self, index: int) -> None:
        saved = self.view.saved
        turn = saved.history.turns[index]
        reply = turn_reply(self.asset(), turn)
        later = len(saved.history.turns) - index - 1
        dialog = EditTurnDialog(index + 1, turn.player, reply, later, self.dialog_parent)
        if not dialog.exec():
            return
        line, new_reply, replay_rest = dialog.values()
        pending = []
        if replay_rest and saved.tree is not None:
            path = saved.tree.path()
            pending = [(saved.tree.nodes[i].turn.player, turn_reply(self.asset(), saved.tree.nodes[i].turn))
                       for i in path[index + 1:]]
        if line and line != turn.player:
            self.actions.edit_line(index, line)
        elif new_reply != reply:
            entries = _with_reply(turn.entries, reply, new_reply, self.asset())
            self.actions.edit_reply(index, entries)
        else:
            return
        if pending:
            self.actions.continue_with(index + 1, pending, step=self.step_by_step.isChecked())
