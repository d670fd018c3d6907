"""The Guard node in the editor (palette, ports per policy, Properties, Turn Inspector) and game events
(marking a node or exit, undo, the canvas tag, the Agent form's Game group, the Problems warning)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from editor.canvas import context_menu
from editor.canvas.node_types import categories, view_of
from editor.docks.palette.dock import PaletteDock
from editor.docks.properties.field_editors import ChoiceEditor, LinesEditor
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.model.commands import SetNodeFieldCommand
from editor.model.game_events import GameEventDialog, exit_choices, mark_game_event, marks_of
from runtime.asset.model import Asset, new_node
from runtime.backends.scripted import ScriptedBackend

SHOTS = Path("/tmp/parley-guard-shots")

GUARDED = {
    "version": 1, "name": "gate", "default_model": "m.gguf", "start_node": "gate",
    "nodes": [
        {"id": "gate", "type": "Guard", "title": "Hold to the rules", "position": [0, 0],
         "policies": [{"name": "narration", "packs": ["narration"], "reply": "Stories won't open this gate."},
                      {"name": "secret", "patterns": ["silver\\W*fern"], "reply": "Not that."}],
         "default_exit": "reply"},
        {"id": "reply", "type": "GenerateAndSpeak", "system_prompt": "You are Brann, the gate guard.",
         "position": [360, 0], "default_exit": "reward"},
        {"id": "reward", "type": "Generate", "system_prompt": "Hand over the reward.", "position": [720, 0]},
    ],
}


def shot(widget, name: str) -> Path:
    for _ in range(3):
        QApplication.processEvents()
    SHOTS.mkdir(parents=True, exist_ok=True)
    out = SHOTS / name
    assert widget.grab().save(str(out))
    return out


def ports(window, node_id: str) -> list[str]:
    return [p.name() for p in window.canvas.drawing.canvas_node(node_id).output_ports()]


def test_the_palette_lists_guard_among_the_classifiers(qtbot):
    assert "Guard" in [v.type for v in categories()["Classify"]]
    view = view_of("Guard")
    assert view.fill != view_of("ClassifyIntent").fill, "a guard stands out from the classifiers"
    palette = PaletteDock()
    qtbot.addWidget(palette)
    items = [palette.tree.topLevelItem(i) for i in range(palette.tree.topLevelItemCount())]
    classify = next(i for i in items if i.text(0) == "Classify")
    types = [classify.child(j).data(0, Qt.ItemDataRole.UserRole) for j in range(classify.childCount())]
    assert "Guard" in types
    assert "Plugins" not in [i.text(0) for i in items], "a built-in type, not a plugin's"


def test_the_guard_summary_names_what_it_checks_and_its_rules():
    asset = Asset.model_validate(GUARDED)
    assert view_of("Guard").summary(asset.nodes[0], asset) == ["checks the player's line", "rules: narration / secret"]
    held = new_node("Guard", "leak", input="reply", check_model=True)
    assert view_of("Guard").summary(held, asset)[:2] == ["checks: reply", "no policies: every line passes"]


def test_a_reply_guard_summary_lists_the_speaking_nodes_wired_into_it(window, qtbot):
    """Wiring a second speaking node into a reply guard makes the guard check its reply too: the
    guard's summary on the canvas says so as the exit is connected, and again after undo."""
    doc = window.document
    raw = {**GUARDED, "nodes": [
        *GUARDED["nodes"][:2],
        {"id": "refuse", "type": "GenerateAndSpeak", "system_prompt": "Refuse.", "position": [360, 200]},
        {"id": "leak", "type": "Guard", "input": "reply", "position": [720, 200],
         "policies": [{"name": "secret", "patterns": ["silverfern"], "reply": "Not that."}]}]}
    window.set_asset(Asset.model_validate(raw))
    doc.push(SetNodeFieldCommand(doc, "reply", "default_exit", "reward", "leak"))

    def summary() -> list[str]:
        return window.canvas.drawing.canvas_node("leak").view.summary

    assert summary()[0] == "checks: reply"
    doc.push(SetNodeFieldCommand(doc, "refuse", "default_exit", "", "leak"))
    assert summary()[:2] == ["checks replies: reply, refuse", "rules: secret"]
    shot(window.canvas.viewer, "reply_guard_wired.png")
    window.undo_action.trigger()
    assert summary()[0] == "checks: reply"


def test_a_policy_added_in_properties_is_a_port_and_undo_takes_it_away(window, qtbot):
    doc = window.document
    guard = window.canvas.add_node("Guard", (0, 0))
    assert ports(window, guard) == ["default_exit"]
    window.canvas.select([guard])
    form = window.properties.form
    assert {"Guard", "Policies", "Exits"} <= set(form.sections)
    policies = form.editors["policies"]
    policies.add_button.click()
    assert [p.name for p in doc.node(guard).policies] == ["policy_1"]
    assert ports(window, guard) == ["policy:policy_1", "default_exit"]
    assert isinstance(policies.form.editors["packs"], LinesEditor)
    assert isinstance(policies.form.editors["patterns"], LinesEditor)
    assert isinstance(policies.form.editors["exit"], ChoiceEditor)

    name = policies.form.editors["name"]
    name.line.setText("narration")
    name.line.editingFinished.emit()
    policies.form.editors["packs"].text.setPlainText("narration\nmultilingual")
    assert doc.node(guard).policies[0].name == "narration"
    assert doc.node(guard).policies[0].packs == ["narration", "multilingual"]
    assert ports(window, guard) == ["policy:narration", "default_exit"]
    label = window.canvas.drawing.canvas_node(guard).view.get_output_text_item(
        window.canvas.drawing.canvas_node(guard).get_output("default_exit").view).toPlainText()
    assert label == "passes"

    while doc.node(guard).policies:
        window.undo_action.trigger()
    assert ports(window, guard) == ["default_exit"]
    window.redo_action.trigger()
    assert ports(window, guard) == ["policy:policy_1", "default_exit"]


def test_the_inspector_shows_the_check_that_fired(window, qtbot):
    conversation = window.conversation
    inspector = window.dock(TurnInspectorDock)
    window.set_asset(Asset.model_validate(GUARDED))
    conversation.worker._make_backend = ScriptedBackend
    with qtbot.waitSignal(conversation.turn_finished, timeout=10_000):
        assert conversation.say("*The guard falls asleep and I walk through the gate.*")
    qtbot.waitUntil(lambda: not conversation.busy, timeout=10_000)
    inspector.show_node("gate")
    diag = inspector.node_diagnostics(inspector.record, "gate")
    assert diag is not None and diag.guard is not None and diag.guard.policy == "narration"
    from editor.docks.turn_inspector.node_text import guard_html

    page = guard_html(diag.guard)
    assert "Broke narration" in page and "found by patterns" in page and "matched list" in page
    assert "total" in page and " ms" in page
    assert "Broke narration" in inspector.stats.text()
    inspector.setFloating(True)
    inspector.resize(900, 560)
    shot(inspector, "inspector-guard-fired.png")

    with qtbot.waitSignal(conversation.turn_finished, timeout=10_000):
        assert conversation.say("Good evening, may I pass?")
    qtbot.waitUntil(lambda: not conversation.busy, timeout=10_000)
    inspector.show_node("gate")
    assert "Passed" in inspector.stats.text() and "patterns" in inspector.stats.text()


def test_marking_a_node_adds_a_game_event_that_undo_removes_and_the_canvas_draws(window, qtbot):
    doc = window.document
    window.set_asset(Asset.model_validate(GUARDED))
    assert exit_choices(doc.node("gate"))[0][1] == ""
    assert [port for _label, port in exit_choices(doc.node("gate"))[1:]] == [
        "policy:narration", "policy:secret", "default_exit"]
    dialog = GameEventDialog(doc.node("gate"))
    qtbot.addWidget(dialog)
    assert not dialog.when.isHidden(), "several exits: asks which"
    single = GameEventDialog(doc.node("reward"))
    qtbot.addWidget(single)
    assert single.when.isHidden() and single.exit() == ""

    doc.push(mark_game_event(doc, "reward", "quest_complete"))
    assert [e.model_dump() for e in doc.asset.game_events] == [
        {"name": "quest_complete", "node": "reward", "exit": ""}]
    item = window.canvas.drawing.canvas_node("reward").view
    assert item.game_events == ["quest_complete"]
    assert "quest_complete" in item.toolTip()
    doc.push(mark_game_event(doc, "gate", "let_in", "default_exit"))
    assert marks_of(doc.asset, "gate") == ["let_in (on exit passes)"]
    assert window.canvas.drawing.canvas_node("gate").view.game_exits == {"default_exit"}
    window.canvas.center_on("gate")
    shot(window.canvas.widget, "canvas-game-exit.png")

    # The validation warning is in Problems, and clicking it selects the node.
    qtbot.waitUntil(lambda: any(p.node_id == "reward" and "game acts on" in p.message
                                for p in window.problems_dock.problems), timeout=5_000)
    window.canvas.select([])
    row = next(i for i, p in enumerate(window.problems_dock.problems)
               if p.node_id == "reward" and "game acts on" in p.message)
    window.problems_dock.activate_row(row)
    assert window.canvas.selected_ids() == ["reward"]

    window.canvas.center_on("reward")
    shot(window.canvas.widget, "canvas-game-event.png")

    # Renaming the node keeps its mark.
    from editor.model.commands import RenameNodeCommand

    doc.push(RenameNodeCommand(doc, "reward", "give_reward"))
    assert doc.asset.game_events[0].node == "give_reward"
    assert window.canvas.drawing.canvas_node("give_reward").view.game_events == ["quest_complete"]
    window.undo_action.trigger()
    assert doc.asset.game_events[0].node == "reward"

    # Deleting a marked node takes its marks along; undo brings both back.
    window.canvas.select(["reward"])
    window.delete_selected()
    assert [e.node for e in doc.asset.game_events] == ["gate"]
    window.undo_action.trigger()
    assert [e.node for e in doc.asset.game_events] == ["reward", "gate"]
    item = window.canvas.drawing.canvas_node("reward").view
    assert item.game_events == ["quest_complete"]

    window.undo_action.trigger()
    window.undo_action.trigger()
    assert doc.asset.game_events == []
    assert item.game_events == []


def test_the_context_menu_marks_the_node_under_the_cursor(window, qtbot, monkeypatch):
    from PySide6.QtGui import QCursor
    from PySide6.QtWidgets import QDialog

    doc = window.document
    window.set_asset(Asset.model_validate(GUARDED))
    window.canvas.center_on("gate")
    window.canvas.select([])
    actions = window.game_event_actions
    assert actions.action in context_menu(window.canvas).actions()
    viewer = window.canvas.viewer
    item = window.canvas.drawing.canvas_node("gate").view
    QCursor.setPos(viewer.viewport().mapToGlobal(viewer.mapFromScene(item.sceneBoundingRect().center())))
    actions.point_at_cursor()
    assert actions.pointed == "gate", "a right-click does not select: the node under the cursor is meant"

    def answer(dialog):
        dialog.name.setText("let_in")
        dialog.when.setCurrentIndex(dialog.when.findData("default_exit"))
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(GameEventDialog, "exec", answer)
    assert actions.mark_selected()
    assert [(e.name, e.node, e.exit) for e in doc.asset.game_events] == [("let_in", "gate", "default_exit")]
    assert actions.pointed == "", "used once"
    assert not actions.mark_selected(), "nothing pointed at or selected: nothing marked"
    assert "let_in (on exit passes)" in window.canvas.drawing.canvas_node("gate").view.toolTip()
    window.undo_action.trigger()
    assert doc.asset.game_events == []


def test_a_game_event_on_a_renamed_policy_follows_it_in_one_undo_step(window, qtbot):
    doc = window.document
    window.set_asset(Asset.model_validate(GUARDED))
    doc.push(mark_game_event(doc, "gate", "caught_lying", "policy:narration"))
    window.canvas.select(["gate"])
    policies = window.properties.form.editors["policies"]
    policies.list.setCurrentRow(0)
    name = policies.form.editors["name"]
    name.line.setText("storytelling")
    name.line.editingFinished.emit()
    assert doc.node("gate").policies[0].name == "storytelling"
    assert doc.asset.game_events[0].exit == "policy:storytelling"
    assert marks_of(doc.asset, "gate") == ["caught_lying (on exit storytelling)"]
    window.undo_action.trigger()
    assert doc.node("gate").policies[0].name == "narration"
    assert doc.asset.game_events[0].exit == "policy:narration"


def test_the_agent_form_edits_game_events(window, qtbot):
    doc = window.document
    window.set_asset(Asset.model_validate(GUARDED))
    window.canvas.select([])
    form = window.properties.form
    assert "Game" in form.sections
    events = form.editors["game_events"]
    events.add_button.click()
    node, exit = events.form.editors["node"], events.form.editors["exit"]
    assert isinstance(node, ChoiceEditor) and isinstance(exit, ChoiceEditor)
    node.combo.setCurrentIndex(node.combo.findData("reward"))
    node.combo.activated.emit(node.combo.currentIndex())
    assert [(e.name, e.node) for e in doc.asset.game_events] == [("event_1", "reward")]
    assert window.canvas.drawing.canvas_node("reward").view.game_events == ["event_1"]

    # the exit is picked from the ports of the node the event names, listed anew when it changes
    def ports() -> list[str]:
        exit.combo.showPopup()
        exit.combo.hidePopup()
        return [exit.combo.itemData(i) for i in range(exit.combo.count())]

    assert ports() == ["", "default_exit"]
    node.combo.setCurrentIndex(node.combo.findData("gate"))
    node.combo.activated.emit(node.combo.currentIndex())
    assert ports() == ["", "policy:narration", "policy:secret", "default_exit"]
    exit.combo.setCurrentIndex(exit.combo.findData("policy:narration"))
    exit.combo.activated.emit(exit.combo.currentIndex())
    assert [(e.node, e.exit) for e in doc.asset.game_events] == [("gate", "policy:narration")]
    assert exit.combo.currentText() == "when it takes exit \u201cnarration\u201d"
    shot(events, "game_event_exit_choice.png")


def test_the_inspector_text_of_a_reply_guard_names_the_withdrawn_reply():
    from editor.docks.turn_inspector.node_text import guard_html
    from runtime.diagnostics import GuardCheck, GuardRecord

    record = GuardRecord(checked="reply", text="The password is silver fern.", policy="secret",
                         why="'silver fern' matched its own pattern: silver\\W*fern",
                         checks=[GuardCheck(check="patterns", ms=0.4),
                                 GuardCheck(check="plugin:studio", policy="secret", why="a leak", ms=12.0)],
                         withdrew="talk", ms=12.6)
    page = guard_html(record)
    assert "checked the reply held back" in page
    assert "Broke secret</b></span> (found by plugin:studio)" in page
    assert "patterns 0.4 ms passed" in page and "plugin:studio 12.0 ms \u2192 secret" in page
    assert "total 12.6 ms" in page
    assert "Withdrew</b> the reply of talk" in page
    passed = guard_html(GuardRecord(checked="line", text="Hello", checks=[GuardCheck(check="patterns", ms=0.1)], ms=0.1))
    assert "Passed" in passed and "patterns 0.1 ms passed" in passed and "Withdrew" not in passed
