"""The Raw JSON dock shows the runtime's diagnostics exactly, and searches, copies and saves them."""

from __future__ import annotations

import json

import jsonschema
import pytest
from PySide6.QtWidgets import QApplication

from editor.docks.raw_json.dock import RawJsonDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.resources import schemas_dir
from tests.editor.live import example, sample_model, talk

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


def test_raw_json_is_the_runtimes_diagnostics(window, qtbot, model, tmp_path):
    window.set_asset(example("chat", model, reply={"max_tokens": 16}))
    conversation = window.conversation
    raw = window.dock(RawJsonDock)
    first = talk(qtbot, conversation, "Good evening!")
    second = talk(qtbot, conversation, "Is the stew good tonight?")

    expected = second.diagnostics.model_dump(mode="json")
    assert raw.data == expected
    assert json.loads(raw.text()) == expected
    assert json.loads(raw.text_view.toPlainText()) == expected
    jsonschema.validate(json.loads(raw.text()), json.loads((schemas_dir() / "turn-diagnostics.schema.json").read_text(encoding="utf-8")))
    top = [raw.tree.topLevelItem(i).text(0) for i in range(raw.tree.topLevelItemCount())]
    assert top == list(expected)

    # Searchable: every key or value containing the text is marked and its parents opened.
    found = raw.find("window_start")
    assert found == 2
    assert raw.tree.currentItem().text(0) == "window_start_before"
    assert raw.tree.currentItem().parent().isExpanded()
    assert raw.find("Is the stew good") >= 2  # the player's line, and the prompt's current turn

    # Copyable and savable, byte for byte the same data.
    raw.find("")
    raw.tree.setCurrentItem(None)
    raw.copy()
    assert json.loads(QApplication.clipboard().text()) == expected
    out = tmp_path / "turn.json"
    assert raw.save_to(str(out))
    assert json.loads(out.read_text(encoding="utf-8")) == expected

    # Picking another turn in the inspector shows that turn here.
    inspector = window.dock(TurnInspectorDock)
    inspector.turn_picker.setCurrentIndex(inspector.turn_picker.findData(0))
    assert raw.data == first.diagnostics.model_dump(mode="json")
