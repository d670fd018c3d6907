"""The agent's Metadata field shows the designer's own data only: the editor's layout internals
(``parley_studio.start_position/end_position``) stay in the file, unchanged, but not in the form."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QApplication

from editor.model.document import EDITOR_METADATA_KEY
from runtime.asset.model import Asset, new_node


def _asset_with_layout(tmp_path):
    asset = Asset(nodes=[new_node("Generate", "reply")], start_node="reply",
                  metadata={"author": "Ada", EDITOR_METADATA_KEY: {"start_position": [-300.0, 10.0],
                                                                   "end_position": [500.0, 10.0]}})
    path = tmp_path / "npc.json"
    path.write_text(asset.model_dump_json(), encoding="utf-8")
    return path


def _metadata_editor(window):
    window.canvas.select([])
    form = window.properties.form
    assert form is not None and "metadata" in form.editors, "the agent's form has a Metadata field"
    return form.editors["metadata"]


def test_the_metadata_field_hides_the_editors_layout(window, tmp_path, qtbot):
    assert window.open_path(str(_asset_with_layout(tmp_path)))
    editor = _metadata_editor(window)
    text = editor.text.toPlainText()
    assert EDITOR_METADATA_KEY not in text and "start_position" not in text
    assert json.loads(text) == {"author": "Ada"}
    window.properties.grab().save("/tmp/n/metadata.png")


def test_editing_metadata_keeps_the_layout_and_saving_round_trips_it(window, tmp_path, qtbot):
    path = _asset_with_layout(tmp_path)
    assert window.open_path(str(path))
    editor = _metadata_editor(window)
    editor.text.setPlainText('{"author": "Grace", "mood": "gruff"}')
    QApplication.processEvents()
    metadata = window.document.asset.metadata
    assert metadata["author"] == "Grace" and metadata["mood"] == "gruff"
    assert metadata[EDITOR_METADATA_KEY] == {"start_position": [-300.0, 10.0], "end_position": [500.0, 10.0]}
    assert window.save_to(str(path))
    saved = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    assert saved[EDITOR_METADATA_KEY] == {"start_position": [-300.0, 10.0], "end_position": [500.0, 10.0]}
    assert saved["author"] == "Grace"


def test_an_asset_saved_unedited_keeps_its_metadata_byte_for_byte(window, tmp_path):
    path = _asset_with_layout(tmp_path)
    assert window.open_path(str(path))
    _metadata_editor(window)
    before = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    assert window.save_to(str(path))
    assert json.loads(path.read_text(encoding="utf-8"))["metadata"] == before
    assert not window.document.modified
