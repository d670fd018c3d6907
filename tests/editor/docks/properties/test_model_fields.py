"""A new agent starts on the models folder's model; model fields pick from the models folder."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QFileDialog

from editor.docks.properties.field_editors import ModelEditor
from runtime.models.folder import MODELS_DIR_ENV, SAMPLE_MODEL, list_models
from tests.runtime.tiny_gguf import write_tiny_gguf


@pytest.fixture
def models(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv(MODELS_DIR_ENV, str(folder))
    return folder


def test_a_new_agent_uses_the_sample_model_when_it_is_there(models, make_window):
    write_tiny_gguf(models / "Another.gguf")
    write_tiny_gguf(models / SAMPLE_MODEL.file_name)
    window = make_window()
    assert window.document.asset.default_model == SAMPLE_MODEL.file_name
    assert not window.document.modified, "a fresh window has nothing to save"
    window.document.set_agent_field("default_model", "")
    window.document.undo_stack.setClean()
    window.new_asset()
    assert window.document.asset.default_model == SAMPLE_MODEL.file_name


def test_a_new_agent_uses_the_only_model_or_none(models, make_window):
    assert make_window().document.asset.default_model == "", "an empty models folder names no model"
    write_tiny_gguf(models / "Only.gguf")
    window = make_window()
    assert window.document.asset.default_model == "Only.gguf"
    write_tiny_gguf(models / "Second.gguf")
    window.new_asset()
    assert window.document.asset.default_model == "", "which of two models is the designer's choice"


def test_model_picker_lists_the_models_folder(models, window):
    write_tiny_gguf(models / "Alpha.gguf", context_length=2048)
    write_tiny_gguf(models / "Beta.gguf")
    (models / "Broken.gguf").write_bytes(b"not a model")
    node = window.canvas.add_node("Generate", (0, 0))
    editor = window.properties.form.editors["model_name"]
    assert isinstance(editor, ModelEditor)

    editor.fill_models_menu()
    entries = {a.text().split("\t")[0]: a for a in editor.models_menu.actions() if not a.isSeparator()}
    listed = [m.file_name for m in list_models()]
    assert listed == ["Alpha.gguf", "Beta.gguf", "Broken.gguf"]
    assert all(name in entries for name in listed), "the picker lists what `parley models list` lists"
    assert "2048 ctx" in entries["Alpha.gguf"].text()
    assert not entries["Broken.gguf"].isEnabled(), "an unreadable file is shown, not offered"
    entries["Beta.gguf"].trigger()
    assert window.document.node(node).model_name == "Beta.gguf"

    editor.fill_models_menu()
    default = next(a for a in editor.models_menu.actions() if a.text() == editor.empty_label)
    default.trigger()
    assert window.document.node(node).model_name == "", "the first entry goes back to the agent's model"


def test_browse_starts_in_the_models_folder(models, window, monkeypatch, tmp_path):
    asked = []
    picked = [str(models / "Alpha.gguf")]

    def choose(parent, caption, folder, file_filter):
        asked.append(folder)
        return picked[0], file_filter

    monkeypatch.setattr(QFileDialog, "getOpenFileName", choose)
    window.canvas.select([])
    editor = window.properties.form.editors["default_model"]
    editor.browse_button.click()
    assert asked == [str(models)]
    assert window.document.asset.default_model == "Alpha.gguf", "a model in the models folder is named by file"

    elsewhere = tmp_path / "elsewhere" / "Gamma.gguf"
    picked[0] = str(elsewhere)
    editor.browse_button.click()
    assert window.document.asset.default_model == str(elsewhere)
