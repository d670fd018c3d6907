"""Regenerating a turn, and the offer that follows it: the later turns stay on the old branch, and
the bar offers to say their lines again after the regenerated turn."""

from __future__ import annotations

import re
from collections.abc import Callable

from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from editor.docks.conversation.status import TurnStatus
from editor.session.record import InspectedTurn
from editor.session.view import SessionView
from runtime.agent import turn_reply
from runtime.dialogue.history import SavedDialog

Lines = list[tuple[str, str]]  # (player line, reply) of each later turn


class LaterTurnsOffer(QFrame):
    """``asset`` names the nodes of the conversation shown; ``read_only`` says why it cannot be changed
    ("" when it can); ``step_by_step`` is the dock's Replay step by step box."""

    def __init__(self, view: SessionView, status: TurnStatus, step_by_step: QCheckBox,
                 asset: Callable[[], object], read_only: Callable[[], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.status = status
        self.step_by_step = step_by_step
        self.asset = asset
        self.read_only = read_only
        self.regenerating: tuple[int, frozenset[int], Lines] | None = None  # index, ids before, later
        self.later_offer: tuple[int, int, Lines] | None = None  # turn id, its index, later lines
        self.setObjectName("later_bar")
        self.setStyleSheet("QFrame#later_bar { background: #1c3346; border-radius: 3px; }")
        layout = QVBoxLayout(self)  # the label above its buttons: readable in a narrow dock
        layout.setContentsMargins(6, 4, 6, 4)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        # its wrapped lines are its least height: a short dock squeezes the chat, never this sentence
        self.label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.replay_button = QPushButton("\u25b6 Replay them here", self)
        self.replay_button.setToolTip("Send the later turns' lines again after the regenerated turn, with the "
                                      "graph as it is now (step by step if Replay step by step is on)")
        self.replay_button.clicked.connect(lambda _c=False: self.replay_later_turns())
        self.leave_button = QPushButton("Leave them", self)
        self.leave_button.setToolTip("Keep the later turns where they are (Branches, or \u25c0 \u25b6 on the turn)")
        self.leave_button.clicked.connect(lambda _c=False: self.drop())
        buttons = QHBoxLayout()
        buttons.addWidget(self.replay_button)
        buttons.addWidget(self.leave_button)
        buttons.addStretch(1)
        layout.addWidget(self.label)
        layout.addLayout(buttons)
        self.hide()

    def regenerate(self, index: int) -> bool:
        """Run turn ``index`` (from 0) again; once it has run, offer to replay the turns that followed it."""
        tree = self.view.saved.tree
        later = []
        if tree is not None:
            later = [(tree.nodes[i].turn.player, turn_reply(self.asset(), tree.nodes[i].turn))
                     for i in tree.path()[index + 1:]]
        self.drop()
        if not self.actions.regenerate(index):
            return False
        self.regenerating = (index, frozenset(tree.nodes) if tree is not None else frozenset(), later)
        return True

    def turn_finished(self, record: InspectedTurn) -> None:
        regenerating, self.regenerating = self.regenerating, None
        if regenerating is not None and regenerating[0] == record.turn:
            self._regenerated(record, regenerating[1], regenerating[2])

    def _regenerated(self, record: InspectedTurn, known: frozenset[int], later: Lines) -> None:
        """Say what regenerating turn ``record.turn`` gave, and offer to say the later turns again after it."""
        tree = self.view.saved.tree
        alternatives = tree.alternatives(record.turn_id) if tree is not None and record.turn_id in tree.nodes else []
        at = f"{alternatives.index(record.turn_id) + 1}/{len(alternatives)}" if record.turn_id in alternatives else ""
        number = record.turn + 1
        if record.turn_id in known:  # the runtime found it had this alternative already
            said = (f"<b>Turn {number} came out as before</b> ({at}): fixed seeds repeat a reply; "
                    "Re-roll seeds for another one.")
        else:
            said = f"<b>Turn {number} has a new reply</b> ({at})."
        if not later:
            self.status.set_status(f"{self.status.text()} \u00b7 {re.sub('<[^>]+>', '', said)}")
            return
        turns = f"turn {number + 1}" if len(later) == 1 else f"turns {number + 1}\u2013{number + len(later)}"
        where = "is kept after it" if record.turn_id in known else "stays on the old branch"
        if len(later) > 1:
            where = where.replace("is kept", "are kept").replace("stays", "stay")
        self.later_offer = (record.turn_id, record.turn, later)
        self.label.setText(f"{said} The later {turns} {where}.")
        self.replay_button.setText(f"\u25b6 Replay {turns} here")
        self.show()

    def replay_later_turns(self) -> bool:
        """Say the lines of the turns that followed a regenerated turn again after it (the offer's button)."""
        offer = self.later_offer
        if offer is None or self.view.busy or self.read_only():
            return False
        self.drop()
        self.actions.continue_with(offer[1] + 1, offer[2], step=self.step_by_step.isChecked())
        return True

    def history_shown(self, saved: SavedDialog) -> None:
        if self.later_offer is not None and (saved.tree is None or saved.tree.current != self.later_offer[0]):
            self.drop()  # the conversation moved on from the regenerated turn: the offer is stale

    def forget(self) -> None:
        """A new conversation, or a failed turn: nothing is being regenerated and nothing is offered."""
        self.regenerating = None
        self.drop()

    def drop(self) -> None:
        self.later_offer = None
        self.hide()
