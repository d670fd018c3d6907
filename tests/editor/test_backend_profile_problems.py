"""Issue 20 in the editor: a profiles file nested too deeply, or holding an address that is not
one, lets the editor start with no profiles and says why; no profile may take a word the picker
reads itself; a server's user:password@ is never shown in the picker, the menu or the dialog."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from editor.dialogs.backends import BackendsDialog
from editor.services.backend_choice import BackendChoice
from runtime.backends.profiles import load_profiles

SECRET_URL = "http://alice:s3cret@10.0.0.5:8080/v1"


def _profiles_file(text: str) -> Path:
    path = Path(os.environ["PARLEY_BACKENDS"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _type(edit, text: str) -> None:
    edit.setText(text)
    edit.textEdited.emit(text)


@pytest.mark.parametrize(("text", "words"), [
    ("[" * 100_000, "nested too deeply"),
    (json.dumps({"version": 1, "backends": [{"name": "x", "kind": "openai", "url": "http://[::1"}]}),
     "backends[0] ('x').url: error: 'http://[::1' is not a server address"),
], ids=["nested too deeply", "not an address"])
def test_the_editor_starts_with_no_profiles_and_shows_why(make_window, qtbot, text, words) -> None:
    """A deeply nested backends.json stopped the editor from starting."""
    path = _profiles_file(text)
    window = make_window()
    assert window.backends.profiles == [] and str(path) in window.backends.load_error
    assert words in window.backends.load_error
    dock = window.conversation_dock
    assert "could not be read" in dock.backend_label.text() and words in dock.backend_label.toolTip()
    d = BackendsDialog(window.backends)
    qtbot.addWidget(d)
    assert not d.file_error.isHidden() and words in d.file_error.text()
    d.reject()


def test_the_dialog_refuses_a_name_the_picker_reads_itself(qtbot) -> None:
    _profiles_file(json.dumps({"version": 1, "backends": []}))
    d = BackendsDialog(BackendChoice())
    qtbot.addWidget(d)
    d.show()
    d.add_profile()
    for name in ("llama", "scripted", "embedded"):
        _type(d.name_edit, name)
        assert f"'{name}' is reserved" in d.errors["name"].text()
        assert not d.save()
    d.reject()


def test_credentials_in_an_address_are_never_shown_and_kept_unless_dropped(make_window, qtbot, tmp_path) -> None:
    path = _profiles_file(json.dumps({"version": 1, "backends": [
        {"name": "gpu", "kind": "openai", "url": SECRET_URL}]}))
    window = make_window()
    assert window.backends.choose("gpu") == ""
    combo = window.conversation_dock.backend_combo
    shown = [window.backends.description, window.conversation_dock.backend_label.text(),
             *(str(combo.itemData(i, 3)) for i in range(combo.count())),  # tooltips
             *(a.statusTip() for a in window.backend_menu.actions())]
    assert any("10.0.0.5:8080" in text for text in shown)
    assert not [text for text in shown if "s3cret" in text or "alice" in text]

    d = BackendsDialog(window.backends)
    qtbot.addWidget(d)
    d.show()
    assert d.select("gpu")
    assert d.url_edit.text() == "http://10.0.0.5:8080/v1" and d.keep_credentials.isVisible()
    d.check.start = lambda profile: True  # no server is asked: only what the dialog says while it asks
    assert d.check_connection() and "s3cret" not in d.check_result.text() and "10.0.0.5" in d.check_result.text()
    d.grab().save(str(tmp_path / "credentials.png"))
    _type(d.url_edit, "http://10.0.0.6:8080/v1")
    assert d.save()
    assert [p.url for p in load_profiles(path)] == ["http://alice:s3cret@10.0.0.6:8080/v1"]  # kept, host changed

    d = BackendsDialog(window.backends)
    qtbot.addWidget(d)
    d.show()
    assert d.select("gpu")
    d.keep_credentials.setChecked(False)
    assert d.save()
    assert [p.url for p in load_profiles(path)] == ["http://10.0.0.6:8080/v1"]  # dropped
