"""A behaviour chosen before the asset's first save (issue 38): the Subgraph node shows the behaviour's
ports at once, the first save names the file relative to the asset's folder (in the file on disk too),
a path that could not be read before the save gives the node its ports after it, and picking the same
file again reads it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from editor.window.main_window import MainWindow
from runtime.asset.file import asset_from_dict, load_asset
from tests.editor.canvas.test_subgraphs import THREATS, generate, ports, write


@pytest.fixture
def threats(tmp_path: Path) -> Path:
    return write(tmp_path / "behaviours" / "threats.json", THREATS)


def pick(window: MainWindow, monkeypatch, path: Path) -> None:
    """The "…" button of the behaviour field, the file dialog answering ``path``."""
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *_a, **_k: (str(path), "Parley behaviours (*.json)"))
    window.properties.form.editors["behaviour"].browse_button.click()


def untitled_with_subgraph(make_window) -> tuple[MainWindow, str]:
    window = make_window()
    window.set_asset(asset_from_dict({"version": 1, "name": "Gate guard", "default_model": "m.gguf",
                                      "start_node": "", "nodes": []}))
    node_id = window.canvas.add_node("Subgraph", (0.0, 0.0))
    window.canvas.select([node_id])
    return window, node_id


def test_a_behaviour_chosen_before_the_first_save_shows_its_ports_and_is_made_relative_by_the_save(
        make_window, monkeypatch, tmp_path: Path, threats: Path):
    window, node_id = untitled_with_subgraph(make_window)
    assert window.document.path == "" and window.document.asset_dir is None
    steps = window.document.undo_stack.count()
    pick(window, monkeypatch, threats)
    node = window.document.node(node_id)
    assert Path(node.behaviour) == threats, "kept as chosen until the asset has a folder"
    assert node.exit_targets == {"refuse": "", "calm": ""}, "the ports are read from the file at once"
    assert ports(window, node_id) == ["refuse", "calm"]
    assert window.canvas.canvas_node(node_id).view.summary[0] == "runs: Guard threats"
    assert window.canvas.canvas_node(node_id).view.summary[2] == "relative once the asset is saved"
    assert window.document.undo_stack.count() == steps + 1

    saved = tmp_path / "agents" / "guard.json"
    saved.parent.mkdir()
    assert window.save_to(str(saved))
    node = window.document.node(node_id)
    assert node.behaviour == "../behaviours/threats.json", "relative to the asset's folder once it has one"
    on_disk = json.loads(saved.read_text(encoding="utf-8"))
    assert [n["behaviour"] for n in on_disk["nodes"]] == ["../behaviours/threats.json"], "the file holds it too"
    assert load_asset(saved).node(node_id).exit_targets == {"refuse": "", "calm": ""}
    assert ports(window, node_id) == ["refuse", "calm"]
    assert window.canvas.canvas_node(node_id).view.summary[1:] == ["../behaviours/threats.json",
                                                                   "double-click to open it"]
    assert not window.document.modified, "the save wrote what the editor shows"
    assert not [p for p in window.problems if p.node_id == node_id and p.field == "behaviour"], window.problems
    window.document.undo_stack.undo()  # the renaming is a step of its own: undo gives back the path chosen
    assert Path(window.document.node(node_id).behaviour) == threats


def test_a_behaviour_that_can_be_read_only_once_saved_gives_the_node_its_ports_on_the_save(
        make_window, tmp_path: Path, threats: Path):
    window, node_id = untitled_with_subgraph(make_window)
    editor = window.properties.form.editors["behaviour"]
    editor.line.setText("behaviours/threats.json")  # typed: relative to a folder the asset has not got yet
    editor.line.editingFinished.emit()
    assert window.document.node(node_id).behaviour == "behaviours/threats.json"
    assert ports(window, node_id) == []
    assert window.save_to(str(tmp_path / "guard.json"))
    assert window.document.node(node_id).behaviour == "behaviours/threats.json"
    assert window.document.node(node_id).exit_targets == {"refuse": "", "calm": ""}
    assert ports(window, node_id) == ["refuse", "calm"]
    assert load_asset(tmp_path / "guard.json").node(node_id).exit_targets == {"refuse": "", "calm": ""}
    assert not window.document.modified


def test_picking_the_same_behaviour_again_reads_it_again(make_window, monkeypatch, tmp_path: Path, threats: Path):
    window, node_id = untitled_with_subgraph(make_window)
    assert window.save_to(str(tmp_path / "guard.json"))
    window.canvas.select([node_id])
    pick(window, monkeypatch, threats)
    assert ports(window, node_id) == ["refuse", "calm"]
    raw = json.loads(json.dumps(THREATS))
    raw["nodes"].append({"id": "flee", "type": "Exit", "position": [600, 300]})
    raw["nodes"].append(generate("run", "flee"))
    write(threats, raw)
    window.subgraphs.dismiss()  # "changed on disk" not taken up: the designer picks the file again instead
    steps = window.document.undo_stack.count()
    pick(window, monkeypatch, threats)
    assert window.document.node(node_id).behaviour == "behaviours/threats.json"
    assert ports(window, node_id) == ["refuse", "calm", "flee"]
    assert window.document.undo_stack.count() == steps + 1
