"""Issue 38: recovery offered "autosaved 16:09" and nothing else. Before Open or Discard, the dialog
shows what the autosave changes in the saved file, node by node and field by field."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QMessageBox

from editor import settings as app_settings
from editor.services import recovery as recovery_module
from editor.services.recovery import SUFFIX, RecoveryDialog, changes_since_saved, left_behind
from runtime.asset.file import asset_to_dict, save_asset
from runtime.asset.model import Asset, new_node


def _asset(prompt: str, *extra) -> Asset:
    return Asset(name="guard", start_node="reply",
                 nodes=[new_node("GenerateAndSpeak", "reply", system_prompt=prompt), *extra])


def test_the_dialog_shows_what_the_autosave_changes_in_the_saved_file(window, tmp_path, monkeypatch):
    saved = tmp_path / "guard.json"
    save_asset(_asset("You are Brann."), saved)
    folder = app_settings.recovery_dir()
    folder.mkdir(parents=True, exist_ok=True)
    autosaved = _asset("You are Brann, the gate guard.", new_node("Generate", "think"))
    (folder / f"999999999-guard{SUFFIX}").write_text(json.dumps(
        {"original_path": str(saved), "saved_at": 1_000, "modified": True, "asset": asset_to_dict(autosaved)}),
        encoding="utf-8")
    (found,) = left_behind(folder)

    text = changes_since_saved(found)
    assert text.startswith(f"2 changes in the autosave since {saved.name} was saved")
    assert "reply \u00b7 system_prompt: 'You are Brann.' \u2192 'You are Brann, the gate guard.'" in text
    assert "think \u00b7 (node): (none) \u2192 'added (Generate)'" in text

    # One file and no crash: still the dialog (a plain question could not show the changes)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Open)
    shown: list[RecoveryDialog] = []

    def look_then_open(dialog: RecoveryDialog) -> int:
        shown.append(dialog)
        assert dialog.changes_button.isVisibleTo(dialog) and not dialog.changes.isVisibleTo(dialog)
        dialog.changes_button.click()
        assert dialog.changes.isVisibleTo(dialog) and dialog.changes.toPlainText() == text
        dialog.grab().save("/tmp/w38/recovery_changes.png")
        dialog.choose(RecoveryDialog.OPEN)
        return 1

    monkeypatch.setattr(RecoveryDialog, "exec", look_then_open)
    assert recovery_module.offer_left_behind(window, folder).file == found.file
    assert len(shown) == 1


def test_nothing_to_compare_says_why(tmp_path):
    found = recovery_module.Recovery(tmp_path / f"x{SUFFIX}", "", 0.0, _asset("Hi."))
    assert changes_since_saved(found) == "An untitled asset: there is no saved file to compare the autosave with."
    gone = recovery_module.Recovery(tmp_path / f"x{SUFFIX}", str(tmp_path / "gone.json"), 0.0, _asset("Hi."))
    assert changes_since_saved(gone).startswith(f"The saved file {tmp_path / 'gone.json'} cannot be read")
    save_asset(_asset("Hi."), tmp_path / "same.json")
    same = recovery_module.Recovery(tmp_path / f"x{SUFFIX}", str(tmp_path / "same.json"), 0.0, _asset("Hi."))
    assert changes_since_saved(same) == f"The autosave and the saved file {tmp_path / 'same.json'} hold the same graph."
