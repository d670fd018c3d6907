"""The Conversation dock for a scene: several NPCs in one conversation, each line with its speaker.

Above the chat, which NPC's graph the canvas shows and who is in the scene (a click brings an NPC in
or sends it away); the chat, round by round, each NPC's reply streaming as it is generated, a click on
a line showing that NPC's turn in the Turn Inspector; under it, whom the player speaks to, whether it
is a whisper, the line, Send, Carry on (the player says nothing) and Stop, and the rounds' actions:
rewind the last round, regenerate it, replay every round, each NPC line then saying whether it came
out the same."""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from editor.docks.conversation.chat_view import STYLE
from editor.docks.conversation.status import TurnStatus
from editor.session.scene_view import PLAYER_TURN, SceneReplayReport, SceneShown, SceneView, ShownLine
from editor.widgets.flow_layout import wrapping_row
from runtime.scene.model import PLAYER
from runtime.scene.scene import SceneLine
from runtime.session.failures import Failure

SCENE_STYLE = STYLE + """
  .npc { color: #d9a55b; font-weight: bold; }
  a.line { color: #e8e8e8; text-decoration: none; }
  .stage { color: #8a8a8a; font-style: italic; }
  .whisper { color: #c49be8; font-size: small; }
  .deaf { color: #7d7d7d; font-size: small; }
"""

# Each NPC's name in the chat in a colour of its own (the player's is the chat's own blue)
SPEAKER_COLOURS = ("#d9a55b", "#8fd18f", "#e88f8f", "#c49be8", "#5fc7c7", "#e5c07b")

EVERYONE = ""  # the To picker's "everyone" (the director picks)


def _e(text: str) -> str:
    return html.escape(text).replace("\n", "<br/>")


def scene_html(shown: SceneShown) -> str:
    """Every round of the scene: its header (with rewind and regenerate on the last), the player's line,
    each NPC's line with its speaker's name, linked to its turn in the Turn Inspector, and who did not
    hear it; the stage directions (joins and leaves) where they happened."""
    colours = {npc.id: SPEAKER_COLOURS[i % len(SPEAKER_COLOURS)] for i, npc in enumerate(shown.npcs)}
    rows: list[str] = []
    last = len(shown.rounds) - 1
    for r in shown.rounds:
        rows += [f"<p class='stage'>{_e(note)}</p>" for note in r.notes]
        head = [f"<span class='turn'>Round {r.index + 1}</span>"]
        if r.carried_on:
            head.append("<span class='turn'>\u00b7 carry on</span>")
        if r.to:
            head.append(f"<span class='whisper'>\u00b7 {'whispered to' if r.whisper else 'to'} "
                        f"{_e(shown.name_of(r.to))}</span>")
        if r.index == last:
            head.append("&nbsp; <a class='act' href='scene:rewind' title='Take back this round: every NPC is as it "
                        "was before it, the line back in the box'>\u21b6 rewind</a> "
                        "<a class='act' href='scene:regenerate' title='Say this round again from the same line; each "
                        "NPC line then says whether it came out the same'>\u21bb regenerate</a>")
        rows.append("<p>" + " ".join(head) + "</p>")
        for line in r.lines:
            rows.append(_line_html(shown, line, colours))
    rows += [f"<p class='stage'>{_e(note)}</p>" for note in shown.notes_after]
    return "".join(rows)


def _line_html(shown: SceneShown, line: ShownLine, colours: dict[str, str]) -> str:
    if line.turn == PLAYER_TURN:
        return f"<p><span class='who'>{_e(line.name)}:</span> <span class='player'>{_e(line.text)}</span></p>"
    colour = colours.get(line.speaker, "#d9a55b")
    tip = f"{line.name}'s turn (picked: {line.rule.replace('_', ' ')}): show it in the Turn Inspector"
    name = (f"<a class='npc' style='color:{colour}; text-decoration:none' href='line:{line.round}:{line.turn}' "
            f"title='{html.escape(tip, quote=True)}'>{_e(line.name)}:</a>")
    text = _e(line.text) if line.text else "<span class='hidden'>(says nothing)</span>"
    marks = []
    if line.same is not None:
        marks.append("<span class='same'>same reply</span>" if line.same
                     else "<span class='changed'>reply changed</span>")
    there = [n for n in shown.npcs if n.present and n.id != line.speaker]
    deaf = [n.name for n in there if n.id not in line.heard_by]
    if deaf and line.text:
        marks.append(f"<span class='deaf'>(not heard by {_e(', '.join(deaf))})</span>")
    return f"<p>{name} <span class='player'>{text}</span> {' '.join(marks)}</p>"


class SceneChat(QTextBrowser):
    """The scene's transcript; the running round appended piece by piece as its lines stream in."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.document().setDefaultStyleSheet(SCENE_STYLE)
        self.setPlaceholderText("Say something to the scene below; the director picks who answers.")

    def show_scene(self, shown: SceneShown) -> None:
        self.setHtml(scene_html(shown))
        self._scroll_to_end()

    def add_paragraph(self, html_text: str) -> None:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.document().isEmpty():
            cursor.insertBlock()
        cursor.insertHtml(html_text)
        self._scroll_to_end()

    def stream(self, text: str) -> None:
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        plain = QTextCharFormat()
        plain.setForeground(QColor("#e8e8e8"))
        cursor.insertText(text, plain)
        self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())


class ScenePanel(QWidget):
    """What the Conversation dock shows while the window has a scene open."""

    npc_picked = Signal(str)  # the NPC whose graph the canvas should show

    def __init__(self, view: SceneView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.round_line = ""  # the line of the round running: a failed round gives it back
        self._streaming = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)

        self.title = QLabel(self)
        self.title.setWordWrap(True)
        layout.addWidget(self.title)
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Canvas shows", self))
        self.npc_picker = QComboBox(self)
        self.npc_picker.setToolTip("Whose graph the canvas and Properties show: edit it and save it as any asset; "
                                   "the scene runs the edits from its next round")
        self.npc_picker.activated.connect(self._npc_picked)
        pick.addWidget(self.npc_picker, 1)
        layout.addLayout(pick)
        self.here_label = QLabel("In the scene:", self)
        self.here_buttons: dict[str, QToolButton] = {}
        self.here_row = QWidget(self)
        self.here_layout = QHBoxLayout(self.here_row)
        self.here_layout.setContentsMargins(0, 0, 0, 0)
        self.here_layout.addWidget(self.here_label)
        self.here_layout.addStretch(1)
        layout.addWidget(self.here_row)

        self.chat = SceneChat(self)
        self.chat.anchorClicked.connect(self._link)
        layout.addWidget(self.chat, 1)

        self.rewind_button = self._button("\u21b6 Rewind round", "Take back the last round: every NPC is as it was "
                                          "before it, its line back in the box", self.rewind)
        self.regenerate_button = self._button("\u21bb Regenerate round", "Say the last round again from the same "
                                              "line; each NPC line says whether it came out the same", self.regenerate)
        self.replay_button = self._button("\u25b6 Replay all", "Say every round again as it was said (to whom, "
                                          "whispered, who was there); each NPC line says whether it came out the "
                                          "same", self.replay)
        layout.addWidget(wrapping_row(self, [self.rewind_button, self.regenerate_button, self.replay_button],
                                      stretch_last=True))
        self.status = TurnStatus(self)
        layout.addWidget(self.status)

        address = QHBoxLayout()
        address.addWidget(QLabel("To", self))
        self.to_picker = QComboBox(self)
        self.to_picker.setToolTip("Whom the player speaks to: that NPC answers first (Everyone: the director picks)")
        self.to_picker.currentIndexChanged.connect(self._to_changed)
        address.addWidget(self.to_picker, 1)
        self.whisper_box = QCheckBox("Whisper", self)
        self.whisper_box.setToolTip("Only the NPC spoken to hears the line")
        address.addWidget(self.whisper_box)
        self.carry_on_button = QPushButton("Carry on", self)
        self.carry_on_button.setToolTip("Say nothing: the NPCs carry on among themselves")
        self.carry_on_button.clicked.connect(self.carry_on)
        address.addWidget(self.carry_on_button)
        layout.addLayout(address)
        talk = QHBoxLayout()
        self.line = QLineEdit(self)
        self.line.setPlaceholderText("What the player says\u2026 (Enter to send)")
        self.line.returnPressed.connect(self.send)
        self.send_button = QPushButton("Send", self)
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.clicked.connect(self.actions.stop)
        talk.addWidget(self.line, 1)
        for button in (self.send_button, self.stop_button):
            talk.addWidget(button)
        layout.addLayout(talk)

        view.opened.connect(self._opened)
        view.changed.connect(self._changed)
        view.busy_changed.connect(self._busy)
        view.round_started.connect(self._round_started)
        view.line_started.connect(self._line_started)
        view.token.connect(self._token)
        view.line_said.connect(self._line_said)
        view.failed.connect(self._failed)
        view.replayed.connect(self._replayed)
        view.round_finished.connect(self.done_round_status)
        view.rejected.connect(lambda message: self.status.show_error(f"Nothing changed: {message}"))
        self._busy(False)

    def _button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setToolTip(tip)
        button.clicked.connect(lambda _c=False: slot())
        return button

    # --- the scene ----------------------------------------------------------------------------------

    @property
    def shown(self) -> SceneShown:
        return self.view.shown

    def _opened(self, shown: SceneShown) -> None:
        self.title.setText(f"<b>{html.escape(shown.name)}</b> &nbsp;<span style='color:#8a8a8a'>"
                           f"{len(shown.npcs)} NPCs \u00b7 the player is {html.escape(shown.player_name)}</span>")
        self.npc_picker.clear()
        for npc in shown.npcs:
            self.npc_picker.addItem(npc.name, npc.id)
        self.status.set_status("")
        self._changed(shown)

    def set_canvas_npc(self, npc: str) -> None:
        """The canvas shows ``npc``'s graph now (the window opened it)."""
        index = self.npc_picker.findData(npc)
        if index >= 0:
            self.npc_picker.setCurrentIndex(index)

    def _npc_picked(self, index: int) -> None:
        self.npc_picked.emit(self.npc_picker.itemData(index))

    def _changed(self, shown: SceneShown) -> None:
        self._fill_here(shown)
        to = self.to_picker.currentData()
        self.to_picker.blockSignals(True)
        self.to_picker.clear()
        self.to_picker.addItem("Everyone", EVERYONE)
        for npc in shown.npcs:
            if npc.present:
                self.to_picker.addItem(npc.name, npc.id)
        self.to_picker.setCurrentIndex(max(self.to_picker.findData(to), 0))
        self.to_picker.blockSignals(False)
        self._to_changed()
        self.chat.show_scene(shown)
        self._streaming = False
        self._busy(self.view.busy)

    def _fill_here(self, shown: SceneShown) -> None:
        for npc in shown.npcs:
            button = self.here_buttons.get(npc.id)
            if button is None:
                button = QToolButton(self.here_row)
                button.setCheckable(True)
                button.clicked.connect(lambda checked, n=npc.id: self.set_present(n, checked))
                self.here_layout.insertWidget(self.here_layout.count() - 1, button)
                self.here_buttons[npc.id] = button
            button.setChecked(npc.present)
            button.setText(f"\u2713 {npc.name}" if npc.present else f"{npc.name} (away)")
            button.setToolTip(f"{npc.name} is in the scene: click to send them away" if npc.present
                              else f"{npc.name} is not in the scene: click to bring them in")
        for npc_id in [n for n in self.here_buttons if shown.npc(n) is None]:
            self.here_buttons.pop(npc_id).deleteLater()

    def _to_changed(self, *_index: int) -> None:
        addressed = bool(self.to_picker.currentData())
        self.whisper_box.setEnabled(addressed and not self.view.busy)
        if not addressed:
            self.whisper_box.setChecked(False)

    def _busy(self, busy: bool) -> None:
        rounds = bool(self.shown.rounds)
        for widget in (self.send_button, self.carry_on_button, *self.here_buttons.values()):
            widget.setEnabled(not busy)
        for widget in (self.rewind_button, self.regenerate_button, self.replay_button):
            widget.setEnabled(not busy and rounds)
        self.stop_button.setEnabled(busy)
        self.whisper_box.setEnabled(not busy and bool(self.to_picker.currentData()))

    # --- talking ------------------------------------------------------------------------------------

    def send(self) -> bool:
        text = self.line.text().strip()
        if not text:
            return False
        to = self.to_picker.currentData() or ""
        if self.actions.say(text, to=to, whisper=self.whisper_box.isChecked() and bool(to)):
            self.line.clear()
            return True
        return False

    def carry_on(self) -> bool:
        return self.actions.say(None)

    def set_present(self, npc: str, present: bool) -> bool:
        if not (self.actions.join(npc) if present else self.actions.leave(npc)):
            self._fill_here(self.shown)  # the button goes back to what is so
            return False
        return True

    def rewind(self) -> bool:
        rounds = self.shown.rounds
        if not rounds or not self.actions.rewind(1):
            return False
        player = next((line for line in rounds[-1].lines if line.turn == PLAYER_TURN), None)
        if player is not None:
            self.line.setText(player.text)
            self.line.selectAll()
        self.status.set_status(f"Round {len(rounds)} taken back: every NPC is as it was before it.")
        return True

    def regenerate(self) -> bool:
        return self.actions.regenerate()

    def replay(self) -> bool:
        return self.actions.replay(0)

    def _round_started(self, line: str, to: str, whisper: bool) -> None:
        self.round_line = line
        self.status.set_status("The scene is talking\u2026")
        if line:
            self.chat.add_paragraph(f"<p><span class='who'>{html.escape(self.shown.player_name)}:</span> "
                             f"<span class='player'>{_e(line)}</span></p>")

    def _line_started(self, npc: str, name: str) -> None:
        colours = {n.id: SPEAKER_COLOURS[i % len(SPEAKER_COLOURS)] for i, n in enumerate(self.shown.npcs)}
        self.chat.add_paragraph(f"<p><span class='npc' style='color:{colours.get(npc, '#d9a55b')}'>{html.escape(name)}:"
                         "</span> </p>")
        self._streaming = True
        self.status.set_status(f"{name} is speaking\u2026")

    def _token(self, _npc: str, text: str) -> None:
        if self._streaming:
            self.chat.stream(text)

    def _line_said(self, line: SceneLine) -> None:
        if line.speaker != PLAYER:
            self._streaming = False

    def _failed(self, failure: Failure) -> None:
        if self.round_line and not self.line.text():
            self.line.setText(self.round_line)  # the round was taken back whole: its line comes back
        self.chat.show_scene(self.shown)
        if failure.cancelled:
            self.status.set_status("Stopped: the round was taken back whole.")
        else:
            self.status.show_error(f"The round was taken back: {failure.message}")

    def _replayed(self, report: SceneReplayReport) -> None:
        what = "Round " + str(report.start + 1) if report.rounds == 1 else f"Rounds {report.start + 1}\u2013" \
            f"{report.start + report.rounds}"
        said = f"{what} said again: {report.same} NPC line{'s' if report.same != 1 else ''} the same"
        if report.changed:
            said += f", {report.changed} changed ({', '.join(report.changed_lines[:4])})"
        if not self.shown.exact:
            said += f". {self.shown.backend or 'This backend'} does not promise the same reply, so a change is " \
                    "not a sure sign of the graph's"
        self.status.set_status(said + ".")

    def _link(self, url) -> None:
        target = url.toString()
        if target == "scene:rewind":
            self.rewind()
        elif target == "scene:regenerate":
            self.regenerate()
        elif target.startswith("line:"):
            _kind, round_, turn = target.split(":")
            self.view.select_line((int(round_), int(turn)))

    def done_round_status(self, *_shown: object) -> None:
        """After a round: who spoke, picked by which rule."""
        rounds = self.shown.rounds
        if not rounds:
            return
        spoken = [f"{line.name} ({line.rule.replace('_', ' ')})" for line in rounds[-1].lines
                  if line.turn != PLAYER_TURN]
        self.status.set_status(f"Round {len(rounds)}: " + (", ".join(spoken) if spoken else "nobody answered") + ".")
