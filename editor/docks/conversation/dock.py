"""The Conversation dock: a test conversation with the graph, on the embedded runtime or a server.

The dock assembles its panels and wires them to the conversation: the backend bar (where the agent
runs; once a conversation has run on a server, each turn says which backend ran it), the row of
actions, the restart banner, the replay bar, the later-turns offer, the chat and its branch tree, the
tool's answer, the missing-model offer, the load bar, the status line and the player's line."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QDockWidget, QSplitter, QStackedWidget, QVBoxLayout, QWidget

from editor.docks.conversation.backend_bar import BackendBar
from editor.docks.conversation.branch_tree import BranchTree
from editor.docks.conversation.chat_view import ChatView, node_label
from editor.docks.conversation.history_dialogs import HistoryEditor, VariablesDialog
from editor.docks.conversation.history_files import HistoryFiles
from editor.docks.conversation.later_turns import LaterTurnsOffer
from editor.docks.conversation.model_offer import ModelOffer
from editor.docks.conversation.replay_bar import ReplayBar
from editor.docks.conversation.restart_banner import RestartBanner
from editor.docks.conversation.save_as_test import SaveAsTest
from editor.docks.conversation.scene_panel import ScenePanel
from editor.docks.conversation.status import ModelLoadBar, TurnStatus, tool_button
from editor.docks.conversation.talk_line import TalkLine
from editor.docks.conversation.tool_answer import ToolAnswer
from editor.docks.conversation.turn_links import TurnLinks
from editor.docks.conversation.voice import Voice
from editor.services.backend_choice import EMBEDDED_LABEL, BackendChoice
from editor.services.sample_model_download import SampleModelDownload, missing_models
from editor.session.record import InspectedTurn
from editor.session.scene_view import SceneShown, SceneView
from editor.session.view import SessionView
from editor.threads.thread_job import ThreadJob
from editor.widgets.flow_layout import wrapping_row
from runtime.dialogue.history import SavedDialog
from runtime.events import NodeStarted, Speak, Summarized, Token, ToolCalled, TurnWarning
from runtime.nodes import NODE_TYPES
from runtime.session.failures import Failure


def _shows_output(type_name: str) -> bool:
    """Whether the chat streams a node's output (replies, tool calls)."""
    entry = NODE_TYPES.get(type_name)
    return entry is not None and entry.model.STREAMS_TO_CHAT


class ConversationDock(QDockWidget):
    test_case_saved = Signal(str)  # the suite file a case was saved to
    node_clicked = Signal(str)  # a reply's node name: the window selects and centres that node
    history_file_done = Signal(bool)  # an Import or Export ended (on its thread): whether it worked
    scene_npc_picked = Signal(str)  # in a scene: the NPC whose graph the canvas should show

    def __init__(self, view: SessionView, parent: QWidget | None = None,
                 download: SampleModelDownload | None = None, backends: BackendChoice | None = None,
                 scene: SceneView | None = None) -> None:
        """``scene``: the window's scene; while one is open the dock shows it (``ScenePanel``) in
        place of the single-agent conversation."""
        super().__init__("Conversation", parent)
        self.view = view
        self.actions = view.actions
        self.download = download if download is not None else SampleModelDownload(self)
        self.backends = backends if backends is not None else BackendChoice(self)
        self.turn_line = ""  # the line of the turn running or last run: a failed turn gives it back
        # Why the conversation cannot be changed here ("" when it can): it is followed on a server
        self.read_only = ""
        self.follow_panel: QWidget | None = None  # what the window shows above the chat meanwhile
        self.follow_asset = None  # what names the followed conversation's nodes (None: the document)
        asset, read_only = (lambda: self.asset), (lambda: self.read_only)
        body = QWidget(self)
        self.status = TurnStatus(body)
        self.backend_bar = BackendBar(self.backends, self.status, lambda: self.view.busy, body)
        self.files = HistoryFiles(view, self.backends, self.status, asset, read_only, self)
        self.voice_panel = Voice(self)
        self.save_test = SaveAsTest(view, self.status, self)
        self.tools_row = self._actions_row()
        self.banner = RestartBanner(view.actions.restart, body)
        self.replay_bar = ReplayBar(view, body)
        self.step_by_step = QCheckBox("Replay step by step", self)
        self.step_by_step.setToolTip("\u25b6 replay sends one recorded line per click of Next turn")
        self.later_bar = LaterTurnsOffer(view, self.status, self.step_by_step, asset, read_only, body)
        self.split = QSplitter(Qt.Orientation.Vertical, self)
        self.chat = ChatView(self.split)
        self.branches = BranchTree(view, asset, read_only, self.split)
        self.tool_panel = ToolAnswer(view, self.chat, self.status, self._come_forward, body)
        self.talk = TalkLine(view, read_only, body)
        self.model_offer = ModelOffer(self.download, self.status, self._come_forward, self.talk.line.setFocus, body)
        self.load_progress = ModelLoadBar(self.backends, self.status, body)
        self.links = TurnLinks(view, self.status, self.talk.line, self.step_by_step, self.later_bar,
                               asset, read_only, self)
        self._layout = layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        for panel in (self.backend_bar, self.tools_row, self.banner, self.replay_bar, self.later_bar):
            layout.addWidget(panel)
        layout.addWidget(self.split, 1)
        for panel in (self.step_by_step, self.tool_panel, self.model_offer, self.load_progress, self.status,
                      self.talk):
            layout.addWidget(panel)
        # The single-agent conversation, or a scene's in its place
        self.pages = QStackedWidget(self)
        self.pages.addWidget(body)
        self.scene_panel: ScenePanel | None = None
        if scene is not None:
            self.scene_panel = ScenePanel(scene, self.pages)
            self.pages.addWidget(self.scene_panel)
            self.scene_panel.npc_picked.connect(self.scene_npc_picked)
            scene.opened.connect(self._scene_opened)
        self.setWidget(self.pages)
        self.backend_bar.fill()
        self._name_the_panels_widgets()
        self._connect(view)
        if self.backends.note:
            self.show_error(self.backends.note)

    def _actions_row(self) -> QWidget:
        """The row of actions; it wraps onto a second row in a narrow dock (one row set a 725 px minimum width)."""
        self.new_button = tool_button(self, "New", "Start a new conversation on the graph as it is now",
                                      self.actions.restart)
        self.edit_button = tool_button(self, "Seed / edit\u2026", "Write or rewrite past turns", self.edit_history)
        self.variables_button = tool_button(self, "Variables\u2026", "Change the agent variables",
                                            self.edit_variables)
        self.branches_button = tool_button(self, "Branches", "Show every branch of this conversation: "
                                           "regenerated replies, rewound and edited turns", self.toggle_branches)
        self.branches_button.setCheckable(True)
        self.reroll_button = tool_button(self, "Re-roll seeds", "Every node keeps a fixed seed, so replays repeat "
                                         "their replies; re-roll to get other replies from now on", self.reroll_seeds)
        self.save_test_button = tool_button(self, "Save as test\u2026", "Save this conversation as a test case: its "
                                            "lines, expecting the path each turn took (Tests dock)",
                                            self.save_as_test_case)
        return wrapping_row(self, [
            self.new_button, self.files.export_button, self.files.import_button, self.edit_button,
            self.variables_button, self.branches_button, self.reroll_button, self.save_test_button,
            self.voice_panel.mute_button], stretch_last=True)

    def _name_the_panels_widgets(self) -> None:
        """The panels' widgets by the names the window, the tests and the benchmarks reach them by."""
        bar, files, talk, offer = self.backend_bar, self.files, self.talk, self.model_offer
        self.backend_combo, self.backends_button, self.backend_label = bar.combo, bar.backends_button, bar.label
        self.export_button, self.import_button = files.export_button, files.import_button
        self.export_bundle_action = files.export_bundle_action
        self.mute_button = self.voice_panel.mute_button
        self.banner_label, self.restart_button = self.banner.label, self.banner.restart_button
        self.replay_label = self.replay_bar.label
        self.replay_step_button, self.replay_stop_button = self.replay_bar.step_button, self.replay_bar.stop_button
        self.later_label = self.later_bar.label
        self.later_replay_button, self.later_leave_button = self.later_bar.replay_button, self.later_bar.leave_button
        self.tool_label, self.tool_result, self.tool_send = (self.tool_panel.label, self.tool_panel.result,
                                                             self.tool_panel.send_button)
        self.model_offer_label, self.download_progress = offer.label, offer.download_progress
        self.download_button, self.open_models_button = offer.download_button, offer.open_models_button
        self.download_reactions = offer.download_reactions
        self.line, self.send_button, self.stop_button = talk.line, talk.send_button, talk.stop_button
        self.setFocusProxy(self.line)  # the Talk workspace gives the dock the keyboard: the player's line

    def _connect(self, c: SessionView) -> None:
        c.busy_changed.connect(self._busy)
        c.loading.connect(self.load_progress.loading)
        c.event.connect(self._on_event)
        c.turn_started.connect(self._turn_started)
        c.turn_finished.connect(self._turn_finished)
        c.turn_failed.connect(self._turn_failed)
        c.history_changed.connect(self._show_history)
        c.history_rejected.connect(lambda message: self.show_error(f"Nothing changed: {message}"))
        c.tool_needed.connect(self.tool_panel.ask)
        c.restart_offered.connect(self.banner.offer_restart)
        c.restarted.connect(self._restarted)
        c.backend_failed.connect(lambda message: self.show_error(
            f"Could not switch the backend ({message}); turns still run on the previous one."))
        self.chat.anchorClicked.connect(self.links.follow)
        self.links.node_clicked.connect(self.node_clicked)
        self.files.done.connect(self.history_file_done)
        self.save_test.saved.connect(self.test_case_saved)

    def _scene_opened(self, shown: SceneShown) -> None:
        self.pages.setCurrentWidget(self.scene_panel if shown.path else self.pages.widget(0))

    # --- what the panels share ------------------------------------------------------------------

    @property
    def asset(self):
        if self.follow_asset is not None:
            return self.follow_asset
        return self.actions.running_asset or self.actions.document.asset

    @property
    def asset_folder(self) -> Path | None:
        """Where the asset's behaviours are found (None for a followed conversation's asset)."""
        return self.actions.document.asset_dir if self.follow_asset is None else None

    @property
    def voice(self):
        return self.voice_panel.engine

    @property
    def spoken(self) -> list[str]:
        return self.voice_panel.spoken

    @property
    def file_job(self) -> ThreadJob | None:
        return self.files.file_job

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.set_status(text, error)

    def show_error(self, text: str) -> None:
        self.status.show_error(text)

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
        self.talk.show_read_only(reason)
        if reason:
            self.tool_panel.hide()
            self.replay_bar.hide()
            self.later_bar.drop()  # its replay would change a conversation that is not this window's
        self._busy(self.view.busy)
        if reason:
            self._redraw()

    def _come_forward(self) -> None:
        """A question for the designer (a tool's answer, a missing model) is never left out of sight in a
        workspace that hides this dock."""
        if not self.isVisible():
            self.show()
        self.raise_()

    # --- a turn ---------------------------------------------------------------------------------

    def send(self) -> None:
        self.talk.send()

    def send_tool_result(self) -> None:
        self.tool_panel.send_tool_result()

    def speak(self, sentence: str) -> None:
        self.voice_panel.speak(sentence)

    def _busy(self, busy: bool) -> None:
        editable = not self.read_only
        self.talk.enable(busy)
        for button in (self.edit_button, self.variables_button):
            button.setEnabled(not busy and editable)
        for button in (self.new_button, self.reroll_button, self.restart_button):
            button.setEnabled(editable)
        self.step_by_step.setEnabled(editable)
        self.files.enable_buttons()
        if not busy:
            self.load_progress.hide()
            self.tool_panel.hide()
            # The finished (or failed) turn is in the agent's history now: draw it from there.
            self._redraw()

    def _turn_started(self, line: str) -> None:
        self.turn_line = line
        self.model_offer.turn_started()
        self.set_status("Thinking\u2026")
        self.chat.begin_turn(line)

    def _on_event(self, event: object) -> None:
        if isinstance(event, NodeStarted):
            if _shows_output(event.type):
                self.chat.begin_node(node_label(self.asset, event.node, self.asset_folder), event.node)
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

    def _turn_finished(self, record: InspectedTurn | None) -> None:
        if record is None:
            self.set_status("Turn finished (diagnostics are off for this asset).")
            return
        d = record.diagnostics
        path = " \u2192 ".join([*d.path, "END"])
        remote = d.backend and d.backend != EMBEDDED_LABEL
        self.set_status(f"Turn {d.turn + 1}: {path} in {d.total_ms / 1000:.1f} s"
                        + (f" on {self.backends.spec}" if remote and self.backend_bar.is_chosen(d.backend) else "")
                        + (f" \u00b7 {len(d.warnings)} warning(s)" if d.warnings else ""))
        self.backend_bar.turn_ran_on(d.backend)
        self.later_bar.turn_finished(record)

    def _turn_failed(self, failure: Failure) -> None:
        self.later_bar.regenerating = None
        if not self.line.text() and self.turn_line:
            self.line.setText(self.turn_line)  # the player's line is not lost: fix the cause, press Enter
        if failure.cancelled:
            self.set_status(failure.message)
            return
        missing = []
        if failure.code == "model_missing":
            missing = missing_models(self.asset, self.actions.document.asset_dir) or [failure.model]
        if missing and not self.backends.remote:
            self.model_offer.offer_models(missing, failure.message)
        elif self.backends.remote:
            where = self.backends.spec
            named = where in failure.message
            self.show_error(f"The turn did not run{'' if named else f' on {where}'}: {failure.message}\n"
                            "The conversation is as it was before this turn; your line is back in the box. "
                            "Send it again, or pick another backend above.")
        else:
            self.show_error(failure.message)

    # --- the conversation shown -------------------------------------------------------------------

    def _restarted(self) -> None:
        self.later_bar.forget()
        self._show_history(self.view.saved)
        self.set_status("New conversation.")

    def _show_history(self, saved: SavedDialog) -> None:
        self.later_bar.history_shown(saved)
        if not self.view.busy:
            self._redraw(saved)
        self._fill_branches()

    def _redraw(self, saved: SavedDialog | None = None) -> None:
        self.chat.show_history(saved or self.view.saved, self.asset, self._changed(),
                               self.view.turn_backends, self.asset_folder)

    def _changed(self) -> dict[int, bool]:
        """Turn id -> whether a replay changed its reply (every replay of this conversation)."""
        return {turn_id: bool(r.changed) for turn_id, r in self.view.records.items() if r.changed is not None}

    def toggle_branches(self) -> None:
        self.branches.setVisible(self.branches_button.isChecked())
        self._fill_branches()

    def _fill_branches(self) -> None:
        count = self.branches.fill()
        self.branches_button.setText(f"Branches ({count})" if count else "Branches")

    # --- the actions on turns and on the whole conversation ------------------------------------------

    def _chat_link(self, url) -> None:
        self.links.follow(url)

    def regenerate(self, index: int) -> bool:
        return self.later_bar.regenerate(index)

    def rewind(self, index: int) -> bool:
        return self.links.rewind(index)

    def edit_turn(self, index: int) -> None:
        self.links.edit_turn(index)

    def replay_later_turns(self) -> bool:
        return self.later_bar.replay_later_turns()

    def reroll_seeds(self) -> None:
        if self.actions.reroll_seeds():
            self.set_status("Seeds re-rolled: regenerate a turn to get another reply (replays repeat it).")

    def default_node(self) -> str:
        asset = self.asset
        for node in asset.nodes:
            if node.PLAYER_FACING:
                return node.id
        return asset.start_node

    def edit_history(self) -> None:
        dialog = HistoryEditor(self.view.saved, self.default_node(), self)
        if dialog.exec():
            self.actions.change_history(dialog.operation())

    def edit_variables(self) -> None:
        values = dict(self.asset.variables)
        values.update(self.view.saved.variables)
        dialog = VariablesDialog(values, self)
        if dialog.exec():
            self.actions.set_variables(dialog.values())
            self.set_status("Variables changed: " + json.dumps(dialog.values(), ensure_ascii=False))

    def save_as_test_case(self, name: str | None = None) -> str:
        """Add this branch to the suite beside the asset as a test case (``SaveAsTest.save_as_test_case``)."""
        return self.save_test.save_as_test_case(name)

    def edit_backends(self) -> None:
        self.backend_bar.edit_backends()

    def offer_models(self, missing: list[str], message: str) -> None:
        self.model_offer.offer_models(missing, message)

    def download_sample_model(self) -> None:
        self.model_offer.download_sample_model()

    def replay_promise(self):
        return self.replay_bar.replay_promise()

    # --- files (``HistoryFiles``) and crash recovery ----------------------------------------------------

    def export_dialog(self) -> None:
        self.files.export_dialog()

    def import_dialog(self) -> None:
        self.files.import_dialog()

    def export_repro_bundle(self) -> None:
        self.files.export_repro_bundle()

    def start_bundle_export(self, path: str) -> bool:
        return self.files.start_bundle_export(path)

    def export_bundle_to(self, path: str) -> bool:
        return self.files.export_bundle_to(path)

    def start_export(self, path: str) -> bool:
        return self.files.start_export(path)

    def start_import(self, path: str) -> bool:
        return self.files.start_import(path)

    def export_to(self, path: str) -> bool:
        return self.files.export_to(path)

    def import_from(self, path: str) -> bool:
        return self.files.import_from(path)

    def wait_for_history_file(self) -> bool:
        return self.files.wait_for_history_file()

    def continue_from(self, saved: SavedDialog | None, line: str, crashed: str = "") -> bool:
        """Carry on a conversation a crash interrupted: ``saved`` (None: it had no turns yet) continued
        from as if imported, and ``line``, said as it crashed, back in the box to send again. ``crashed``
        says what crashed. False, with the reason shown, when the conversation cannot take it now."""
        if saved is not None and not self.actions.import_history(saved, "the recovered conversation"):
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

    def stop_voice(self) -> None:
        """Called by the window as it closes (after the conversation has stopped)."""
        self.voice_panel.stop()
