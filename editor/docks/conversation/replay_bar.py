"""A replay under way: how far it is, how many replies changed, and its controls (Next turn, Close)."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from editor.session.view import SessionView
from runtime.backends.base import Reproducibility


class ReplayBar(QFrame):
    def __init__(self, view: SessionView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.setObjectName("replay_bar")
        self.setStyleSheet("QFrame#replay_bar { background: #1c3346; border-radius: 3px; }")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.step_button = QPushButton("Next turn", self)
        self.step_button.setToolTip("Send the next recorded line")
        self.step_button.clicked.connect(lambda _c=False: self.actions.replay_step())
        self.stop_button = QPushButton("Close", self)
        self.stop_button.clicked.connect(lambda _c=False: self.actions.stop_replay())
        layout.addWidget(self.label, 1)
        layout.addWidget(self.step_button)
        layout.addWidget(self.stop_button)
        self.hide()
        view.replay_changed.connect(self.show_replay)

    def show_replay(self) -> None:
        replay = self.view.replaying
        if replay is None:
            self.hide()
            return
        done = replay.total - len(replay.pending)
        changed = replay.changed
        state = "done" if not replay.pending else ("waiting for Next turn" if replay.step else "running")
        promise = self.replay_promise()
        doubt = "" if promise is None or promise.exact else (
            f" <span style='color:#9a9a9a'>(not a sure sign: {html.escape(promise.note)})</span>")
        self.label.setText(
            f"<b>Replay from turn {replay.start + 1}</b>: {done} of {replay.total} turns sent ({state}); "
            f"<span style='color:#e5c07b'>{changed} repl{'ies' if changed != 1 else 'y'} changed</span>{doubt}, "
            f"{done - changed} the same.")
        self.step_button.setVisible(replay.step and bool(replay.pending))
        self.show()

    def replay_promise(self) -> Reproducibility | None:
        """What the backend the replay runs on promises, so a changed reply is never taken for the graph's
        doing when it may be numerics: as recorded with the latest replayed turn (before one has run, the
        latest turn that ran at all; None when none has)."""
        records = self.view.records
        replayed = [turn_id for turn_id, record in records.items() if record.replaced is not None]
        for turn_id in ([max(replayed)] if replayed else []) + sorted(records, reverse=True):
            promise = self.view.reproducibility_of(turn_id)
            if promise is not None:
                return promise
        return None
