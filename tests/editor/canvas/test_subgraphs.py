"""Subgraphs in the editor: a Subgraph node shows its behaviour's name and ports, choosing a behaviour
sets its ports in one undo step, double-click opens the behaviour, the behaviour files are watched
(and Reload uses them), namespaced ids land on the Subgraph node, the Turn Inspector nests a
behaviour's nodes, and Extract to Behaviour (one undo step). The scripted backend runs the turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from editor.canvas.subgraphs import ExtractRefused, behaviour_info, plan_extraction, subgraph_port_counts
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.window.help_menu import shortcut_rows
from editor.window.main_window import MainWindow
from runtime.asset.file import asset_to_dict, load_asset, save_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.problems import Problem


def generate(node_id: str, exit_to: str = "", x: float = 0.0, y: float = 0.0, **fields) -> dict:
    return {"id": node_id, "type": "Generate", "system_prompt": f"You are {node_id}.", "default_exit": exit_to,
            "position": [x, y], **fields}


def speak(node_id: str, exit_to: str = "", x: float = 0.0, y: float = 0.0) -> dict:
    return {"id": node_id, "type": "GenerateAndSpeak", "system_prompt": f"You are {node_id}. Answer.",
            "default_exit": exit_to, "max_tokens": 8, "position": [x, y]}


# Ports: refuse, calm (its Exit nodes, in file order).
THREATS = {
    "version": 1, "name": "Guard threats", "default_model": "m.gguf", "start_node": "classify",
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "position": [0, 0],
         "intents": [{"name": "threaten", "exit": "warn"}, {"name": "bribe", "exit": "refuse"}],
         "fallback_exit": "calm"},
        speak("warn", "refuse", 300, 0),
        {"id": "refuse", "type": "Exit", "position": [600, 0]},
        {"id": "calm", "type": "Exit", "position": [600, 150]},
    ],
}
GUARD = {
    "version": 1, "name": "Gate guard", "default_model": "m.gguf", "start_node": "guard",
    "nodes": [
        {"id": "guard", "type": "Subgraph", "behaviour": "behaviours/threats.json",
         "exits": {"refuse": "stern", "calm": "chat"}, "position": [0, 0]},
        speak("stern", "", 400, 0),
        speak("chat", "", 400, 200),
    ],
}


def write(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.fixture
def guard_file(tmp_path: Path) -> Path:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    return write(tmp_path / "guard.json", GUARD)


@pytest.fixture
def window(make_window, guard_file: Path) -> MainWindow:
    window = make_window()
    assert window.open_path(str(guard_file))
    return window


def ports(window: MainWindow, node_id: str) -> list[str]:
    return [p.name() for p in window.canvas.canvas_node(node_id).output_ports()]


def test_a_subgraph_node_shows_its_behaviours_name_and_ports(window: MainWindow, make_window, guard_file: Path):
    view = window.canvas.canvas_node("guard").view
    assert view.summary[0] == "runs: Guard threats" and view.summary[1] == "behaviours/threats.json"
    assert ports(window, "guard") == ["refuse", "calm"]
    assert not [p for p in window.problems if p.severity == "error"], window.problems
    # A behaviour without a name of its own is shown by its file's name.
    raw = dict(THREATS)
    raw.pop("name")
    write(guard_file.parent / "behaviours" / "threats.json", raw)
    window.canvas.refresh_node("guard")
    assert view.summary[0] == "runs: threats.json"
    # The behaviour opened: its Exit nodes are terminal-like, with an input and no exit.
    other = make_window()
    assert other.open_path(str(guard_file.parent / "behaviours" / "threats.json"))
    exit_node = other.canvas.canvas_node("calm")
    assert [p.name() for p in exit_node.input_ports()] == ["in"] and exit_node.output_ports() == []
    assert tuple(exit_node.view.color[:3]) == (120, 48, 48), "the END terminal's colour"


def test_choosing_the_behaviour_in_properties_sets_the_ports_in_one_undo_step(window: MainWindow, guard_file: Path):
    write(guard_file.parent / "behaviours" / "other.json", {
        "version": 1, "name": "Other", "start_node": "a",
        "nodes": [generate("a", "flee"), {"id": "flee", "type": "Exit"}, generate("b")]})
    node_id = window.canvas.add_node("Subgraph", (0.0, 400.0))
    window.canvas.select([node_id])
    editor = window.properties.form.editors["behaviour"]
    steps = window.document.undo_stack.count()
    editor.line.setText(str(guard_file.parent / "behaviours" / "other.json"))  # what the file dialog gives
    editor.line.editingFinished.emit()
    node = window.document.node(node_id)
    assert node.behaviour == "behaviours/other.json", "stored relative to the asset's folder"
    assert node.exit_targets == {"flee": "", "next": ""}
    assert ports(window, node_id) == ["flee", "next"]
    assert window.document.undo_stack.count() == steps + 1, "one undo step"
    window.document.undo_stack.undo()
    node = window.document.node(node_id)
    assert node.behaviour == "" and node.exit_targets == {} and ports(window, node_id) == []
    # A port the new behaviour shares keeps its target.
    window.canvas.select(["guard"])
    write(guard_file.parent / "behaviours" / "calm_only.json", {
        "version": 1, "start_node": "a", "nodes": [generate("a", "calm"), {"id": "calm", "type": "Exit"}]})
    editor = window.properties.form.editors["behaviour"]
    editor.line.setText("behaviours/calm_only.json")
    editor.line.editingFinished.emit()
    assert window.document.node("guard").exit_targets == {"calm": "chat"}
    assert not [p for p in window.problems if p.node_id == "guard" and p.severity == "error"], window.problems


def test_double_click_opens_the_behaviour_in_a_window_of_its_own(window: MainWindow, qtbot, guard_file: Path):
    window.canvas.frame_selection()
    QApplication.processEvents()
    view = window.canvas.canvas_node("guard").view
    rect = view.sceneBoundingRect()
    scene_point = rect.center() + type(rect.center())(0, rect.height() / 4)  # below the title (which edits it)
    viewport = window.canvas.viewer.viewport()
    at = window.canvas.viewer.mapFromScene(scene_point)
    before = {w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)}
    qtbot.mouseDClick(viewport, Qt.MouseButton.LeftButton, pos=QPoint(at.x(), at.y()))
    opened = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w not in before]
    try:
        assert len(opened) == 1
        behaviour = opened[0]
        assert Path(behaviour.document.path) == (guard_file.parent / "behaviours" / "threats.json").resolve()
        assert behaviour.document.has_node("classify")
        # Asked again, the window that has it open comes forward: no second one.
        assert window.subgraphs.open_node("guard") is behaviour
    finally:
        for w in opened:
            w.document.undo_stack.setClean()
            w.close()


def test_a_changed_behaviour_file_offers_a_reload(window: MainWindow, qtbot, guard_file: Path):
    support = window.subgraphs
    behaviour_file = guard_file.parent / "behaviours" / "threats.json"
    assert behaviour_file.resolve() in {p.resolve() for p in support.watched}
    raw = json.loads(json.dumps(THREATS))
    raw["nodes"].append({"id": "flee", "type": "Exit"})
    raw["nodes"][1]["default_exit"] = "flee"
    with qtbot.waitSignal(support.files_changed, timeout=10_000):
        save_asset(load_asset_from(raw), behaviour_file)  # replaced whole, as the editor saves
    assert support.bar.isVisible() and support.bar.label.text().startswith("threats.json changed")
    # Not reloaded yet: the node keeps its ports, and validation already says they no longer match.
    assert ports(window, "guard") == ["refuse", "calm"]
    steps = window.document.undo_stack.count()
    window.conversation._synced_asset = window.document.asset.model_copy()  # as after a turn
    support.bar.reload_button.click()
    assert not support.bar.isVisible()
    assert ports(window, "guard") == ["refuse", "calm", "flee"]
    assert window.document.node("guard").exit_targets == {"refuse": "stern", "calm": "chat", "flee": ""}
    assert window.document.undo_stack.count() == steps + 1
    assert not [p for p in window.problems if p.node_id == "guard" and p.severity == "error"], window.problems
    assert window.conversation._synced_asset is None, "the next turn builds its agent anew"

    # Saved from another window of the editor: the same offer (the file was replaced, and is still watched).
    other = window.subgraphs.open_node("guard")
    try:
        other.document.set_agent_field("name", "Threats, calmer")
        other.document.undo_stack.resetClean()
        with qtbot.waitSignal(support.files_changed, timeout=10_000):
            assert other.save()
        assert support.bar.isVisible()
        support.reload()
        assert window.canvas.canvas_node("guard").view.summary[0] == "runs: Threats, calmer"
    finally:
        other.document.undo_stack.setClean()
        other.close()


def load_asset_from(raw: dict):
    from runtime.asset.file import asset_from_dict

    return asset_from_dict(raw)


def test_namespaced_ids_land_on_the_subgraph_node(window: MainWindow):
    assert window.show_node("guard/classify")
    assert window.canvas.selected_ids() == ["guard"]
    window.canvas.highlight_path(["guard", "guard/classify", "guard/warn", "guard/refuse", "stern"])
    assert window.canvas.highlighted_path() == ["guard", "stern"]
    window.canvas.mark_problems([Problem("warning", "something inside", "", "guard/warn", "max_tokens")])
    assert window.canvas.problem_severity("guard") == "warning"
    assert "guard/warn" in window.canvas.canvas_node("guard").view.toolTip()
    window.show_problem("guard/warn", "")
    assert window.canvas.selected_ids() == ["guard"]


def test_a_test_runs_counts_reach_the_subgraph_nodes_ports(guard_file: Path):
    asset = load_asset(guard_file)
    visits = {"guard": 3, "guard/classify": 3, "guard/warn": 1, "guard/refuse": 2, "guard/calm": 1}
    exits = {("guard", "enter"): 3, ("guard/classify", "intent:bribe"): 1}
    counts = subgraph_port_counts(asset, guard_file.parent, exits, visits)
    assert counts == {("guard", "refuse"): 2, ("guard", "calm"): 1}


def test_the_turn_inspector_nests_a_behaviours_nodes(window: MainWindow, qtbot):
    window.conversation.use_backend(ScriptedBackend)
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=30_000):
        assert window.conversation.say("I threaten you: out of my way.")
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=30_000)
    inspector = window.dock(TurnInspectorDock)
    record = inspector.record
    ran = [n.node for n in record.diagnostics.nodes]
    assert ran[0] == "guard" and "guard/classify" in ran, ran
    top = inspector.node_list.topLevelItem(0)
    assert top.data(0, Qt.ItemDataRole.UserRole) == "guard"
    children = [top.child(i).data(0, Qt.ItemDataRole.UserRole) for i in range(top.childCount())]
    assert children == [n for n in ran if n.startswith("guard/")]
    inspector.show_node("guard/classify")
    assert inspector.current_node_id() == "guard/classify"
    assert "You are" in inspector.prompt_view.toPlainText() or inspector.prompt_view.toPlainText()
    # a row's click shows the Subgraph node on the canvas
    assert window.show_node("guard/classify") and window.canvas.selected_ids() == ["guard"]


# --- Extract to Behaviour -------------------------------------------------------------------------

# start -> greet -> ask -> (yes: thank, no: leave); ask's fallback ends the turn
SHOP = {
    "version": 1, "name": "Shop", "default_model": "m.gguf", "start_node": "greet", "variables": {"price": 3},
    "nodes": [
        speak("greet", "ask", 0, 0),
        {"id": "ask", "type": "ClassifyIntent", "position": [300, 0],
         "intents": [{"name": "yes", "exit": "haggle"}, {"name": "no", "exit": "leave"}], "fallback_exit": ""},
        speak("haggle", "thank", 600, 0),
        speak("thank", "", 900, 0),
        speak("leave", "", 900, 200),
    ],
}


@pytest.fixture
def shop(make_window, tmp_path: Path) -> MainWindow:
    window = make_window()
    assert window.open_path(str(write(tmp_path / "shop.json", SHOP)))
    return window


def test_extract_to_behaviour_is_one_undo_step(shop: MainWindow, tmp_path: Path, monkeypatch):
    doc = shop.document
    before = asset_to_dict(doc.asset)
    target = tmp_path / "behaviours" / "haggling.json"
    asked = []

    def save_name(*args, **kwargs):
        asked.append(args)
        return str(target), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_name)
    shop.canvas.select(["ask", "haggle"])
    steps = doc.undo_stack.count()
    assert shop.subgraphs.extract_action.shortcut().toString() == "Ctrl+Alt+B"
    assert ("Edit", "Extract to Behaviour", "Ctrl+Alt+B") in shortcut_rows(shop), "Help > Keyboard Shortcuts lists it"
    shop.subgraphs.extract_action.trigger()
    assert asked and doc.undo_stack.count() == steps + 1
    # the behaviour: the two nodes, an Exit node for each target outside, next for the END exit
    behaviour = load_asset(target)
    assert behaviour.start_node == "ask"
    assert [n.id for n in behaviour.nodes] == ["ask", "haggle", "leave", "thank"]
    assert [n.type_name for n in behaviour.nodes[2:]] == ["Exit", "Exit"]
    assert behaviour.node("haggle").default_exit == "thank" and behaviour.node("ask").intents[1].exit == "leave"
    assert behaviour.variables == {"price": 3}
    # the asset: a Subgraph node in their place, entered where they were, its ports where they led
    assert doc.asset.node_ids() == ["greet", "haggling", "thank", "leave"]
    node = doc.node("haggling")
    assert node.behaviour == "behaviours/haggling.json"
    assert node.exit_targets == {"leave": "leave", "thank": "thank", "next": ""}
    assert doc.node("greet").default_exit == "haggling"
    assert ports(shop, "haggling") == ["leave", "thank", "next"]
    assert not [p for p in shop.problems if p.severity == "error"], shop.problems
    assert shop.canvas.selected_ids() == ["haggling"]
    # undo puts every node back as it was; the file stays
    doc.undo_stack.undo()
    assert asset_to_dict(doc.asset) == before
    assert target.is_file()
    pipes = shop.canvas.canvas_node("greet").outputs()["default_exit"].view.connected_pipes
    assert [p.input_port.node.asset_id for p in pipes] == ["ask"], "the pipe drawn to the node again"
    doc.undo_stack.redo()
    assert doc.asset.node_ids() == ["greet", "haggling", "thank", "leave"]
    assert not shop.subgraphs.bar.isVisible(), "the file it wrote itself is no change on disk"


def test_extract_refuses_a_selection_with_two_entries(shop: MainWindow, monkeypatch, qtbot):
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: pytest.fail("no file asked for"))
    shop.canvas.select(["haggle", "leave"])  # entered at haggle (from ask.yes) and at leave (from ask.no)
    before = asset_to_dict(shop.document.asset)
    assert shop.subgraphs.extract() is None
    message = shop.subgraphs.last_refusal
    assert message.startswith("The selection has 2 entries: haggle (from ask \u25b8 yes); leave (from ask \u25b8 no)")
    box = shop.findChild(QMessageBox, "extract_refused")
    assert box is not None and box.isVisible()
    box.close()
    assert asset_to_dict(shop.document.asset) == before
    with pytest.raises(ExtractRefused, match="2 entries"):
        plan_extraction(shop.document.asset, ["greet", "leave"], "b.json", "b")  # START and ask.no


def test_extract_needs_a_saved_asset(make_window, monkeypatch):
    window = make_window()
    window.set_asset(load_asset_from(SHOP))
    window.canvas.select(["haggle"])
    assert window.subgraphs.extract() is None
    assert "Save the asset first" in window.subgraphs.last_refusal
    window.findChild(QMessageBox, "extract_refused").close()


def test_behaviour_info_follows_the_files_content(tmp_path: Path):
    write(tmp_path / "b.json", THREATS)
    assert behaviour_info(tmp_path, "b.json").ports == ["refuse", "calm"]
    raw = json.loads(json.dumps(THREATS))
    raw["nodes"] = raw["nodes"][:1] + raw["nodes"][2:]  # same size class, new content
    raw["nodes"][0]["intents"][0]["exit"] = ""
    write(tmp_path / "b.json", raw)
    assert behaviour_info(tmp_path, "b.json").ports == ["refuse", "calm", "next"]
    assert behaviour_info(tmp_path, "missing.json").problem == "file not found"
    assert behaviour_info(None, "b.json").problem == "save the asset first"


def test_an_example_opened_unsaved_finds_its_behaviours_in_its_folder(make_window):
    """File > Examples opens a copy with no file of its own: its Subgraph node still reads the example's
    behaviour next to it (until it is saved elsewhere), so the shipped gate guard opens without an error."""
    from runtime.resources import examples_dir

    window = make_window()
    assert window.open_path(str(examples_dir() / "gate_guard.json"), as_example=True)
    assert window.document.path == "" and window.document.asset_dir == examples_dir().resolve()
    assert not [p for p in window.problems if p.severity == "error"], window.problems
    assert window.canvas.canvas_node("guard").view.summary[0].startswith("runs: Threat handling")
    assert ports(window, "guard") == ["warned", "refused", "next"]
    window.canvas.select(["guard"])
    assert window.subgraphs.extract() is None and "Save the asset first" in window.subgraphs.last_refusal
    window.findChild(QMessageBox, "extract_refused").close()


def test_a_turn_says_why_it_cannot_run_when_a_behaviour_is_gone(window: MainWindow, qtbot, guard_file: Path):
    conversation = window.conversation
    conversation.use_backend(ScriptedBackend)
    with qtbot.waitSignal(conversation.turn_finished, timeout=30_000):
        assert conversation.say("I threaten you.")
    qtbot.waitUntil(lambda: not conversation.busy, timeout=30_000)
    (guard_file.parent / "behaviours" / "threats.json").unlink()
    window.subgraphs.reload()  # the Reload the bar offers
    assert any(p.node_id == "guard" and p.field == "behaviour" for p in window.problems)
    with qtbot.waitSignal(conversation.turn_failed, timeout=30_000) as failed:
        assert conversation.say("Hello again.")
    qtbot.waitUntil(lambda: not conversation.busy, timeout=30_000)
    assert failed.args[0].message.startswith("The graph cannot run: no file behaviours/threats.json")
    assert len(conversation.saved.history.turns) == 1, "the conversation so far stays"
    write(guard_file.parent / "behaviours" / "threats.json", THREATS)
    window.subgraphs.reload()
    with qtbot.waitSignal(conversation.turn_finished, timeout=30_000):
        assert conversation.say("I threaten you again.")
    qtbot.waitUntil(lambda: not conversation.busy, timeout=30_000)
    assert len(conversation.saved.history.turns) == 2
