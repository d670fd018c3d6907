"""Autosave and crash recovery when the recovery folder is unusable, and several files left by crashes."""

from __future__ import annotations

import json
import pathlib

import pytest
from PySide6.QtWidgets import QMessageBox

from editor import settings as app_settings
from editor.services import recovery as recovery_module
from editor.services.recovery import SUFFIX, left_behind
from runtime.asset.file import asset_to_dict
from runtime.asset.model import Asset, new_node


def _leave(folder: pathlib.Path, name: str, saved_at: float, original: str = "", **asset_fields) -> pathlib.Path:
    """A recovery file as a crashed session (a process that no longer runs) leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    asset = Asset(name=name, nodes=[new_node("Generate", "reply")], start_node="reply", **asset_fields)
    file = folder / f"999999999-{name}{SUFFIX}"
    file.write_text(json.dumps({"original_path": original, "saved_at": saved_at, "asset": asset_to_dict(asset)}),
                    encoding="utf-8")
    return file


def test_the_editor_starts_when_the_recovery_folder_is_a_file(make_window, private_settings, monkeypatch, qtbot):
    """Defect 3: PARLEY_STUDIO_RECOVERY naming a file stopped the editor from starting."""
    a_file = private_settings / "not-a-folder"
    a_file.write_text("keep me", encoding="utf-8")
    monkeypatch.setenv(app_settings.RECOVERY_ENV, str(a_file))
    assert app_settings.recovery_dir() == a_file
    window = make_window(autosave_ms=10)
    assert window.offer_recovery() is False
    failures: list[str] = []
    window.autosave.failed.connect(failures.append)
    window.canvas.add_node("Generate", (0, 0))
    qtbot.wait(100)  # the timer fires several times; nothing escapes it
    assert window.autosave.save_now() is False
    assert len(failures) == 1, "the same reason is reported once, not on every tick"
    assert failures[0].startswith(f"Autosave failed: cannot write a recovery file in {a_file}")
    assert "PARLEY_STUDIO_RECOVERY" in window.autosave.problem
    window.autosave.stop()
    assert a_file.read_text(encoding="utf-8") == "keep me"


def test_an_unwritable_recovery_folder_neither_stops_the_editor_nor_escapes_the_timer(
        make_window, private_settings, monkeypatch, qtbot):
    """Defect 3: PermissionError from mkdir at start, and from the autosave timer."""
    folder = private_settings / "locked"
    original_mkdir = pathlib.Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(folder)):
            raise PermissionError(13, "Permission denied", str(self))
        return original_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    monkeypatch.setenv(app_settings.RECOVERY_ENV, str(folder))
    window = make_window(autosave_ms=10)
    window.canvas.add_node("Generate", (0, 0))
    qtbot.wait(100)
    assert "Permission denied" in window.autosave.problem

    # The folder becomes writable again: the next tick writes the file and the problem is gone.
    monkeypatch.setattr(pathlib.Path, "mkdir", original_mkdir)
    qtbot.waitUntil(lambda: window.autosave.file.exists(), timeout=2000)
    assert window.autosave.problem == ""


def test_an_autosave_that_cannot_be_written_reports_instead_of_raising(window, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(recovery_module, "atomic_write_text", refuse)
    window.canvas.add_node("Generate", (0, 0))
    assert window.autosave.save_now() is False
    assert "Permission denied" in window.autosave.problem


def test_a_lone_surrogate_in_the_asset_is_autosaved_exactly(window, private_settings, monkeypatch):
    """Defect 4: autosave raised UnicodeEncodeError on an asset holding "\\ud800"; it keeps it exactly."""
    node = window.canvas.add_node("Generate", (0, 0))
    window.document.set_node_field(node, "system_prompt", "odd \ud800 text")
    assert window.autosave.save_now()
    file = window.autosave.file
    file.rename(file.with_name(f"999999999-crashed{SUFFIX}"))
    (found,) = left_behind(app_settings.recovery_dir())
    assert found.asset.nodes[0].system_prompt == "odd \ud800 text"


def test_several_leftover_files_are_offered_in_one_dialog(window, private_settings, monkeypatch):
    """Defect 19: each leftover recovery file opened its own dialog."""
    folder = app_settings.recovery_dir()
    old = _leave(folder, "old", 1_000, "/assets/old.json")
    new = _leave(folder, "new", 2_000)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: pytest.fail("one dialog lists them all"))
    shown: list[list[str]] = []

    def pick_second(dialog: recovery_module.RecoveryDialog) -> int:
        shown.append([dialog.list.item(i).text() for i in range(dialog.list.count())])
        dialog.list.setCurrentRow(1)
        dialog.choose(recovery_module.RecoveryDialog.OPEN)
        return 1

    monkeypatch.setattr(recovery_module.RecoveryDialog, "exec", pick_second)
    chosen = recovery_module.offer_left_behind(window, folder)
    assert len(shown) == 1 and shown[0][0].startswith("an untitled asset (autosaved ")
    assert shown[0][1].startswith("/assets/old.json (autosaved ")
    assert chosen is not None and chosen.file == old and chosen.asset.name == "old"
    assert old.exists() and new.exists(), "opening one keeps the others for next time"

    def discard_all(dialog: recovery_module.RecoveryDialog) -> int:
        dialog.choose(recovery_module.RecoveryDialog.DISCARD_ALL)
        return 1

    monkeypatch.setattr(recovery_module.RecoveryDialog, "exec", discard_all)
    assert recovery_module.offer_left_behind(window, folder) is None
    assert not old.exists() and not new.exists()


def test_one_leftover_file_is_asked_about_alone_and_keep_changes_nothing(window, monkeypatch):
    folder = app_settings.recovery_dir()
    only = _leave(folder, "only", 1_000)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Ignore)
    assert recovery_module.offer_left_behind(window, folder) is None and only.exists()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Open)
    assert recovery_module.offer_left_behind(window, folder).file == only


@pytest.mark.parametrize("record", [
    '{"original_path": 5, "saved_at": "soon", "asset": ASSET}',
    '{"saved_at": 1e999, "asset": ASSET}',
    '{"saved_at": 1' + '0' * 400 + ', "asset": ASSET}',
], ids=["wrong-types", "infinite-time", "huge-time"])
def test_damaged_metadata_still_offers_the_asset(private_settings, record):
    folder = app_settings.recovery_dir()
    asset = json.dumps(asset_to_dict(Asset(name="x", nodes=[new_node("Generate", "r")], start_node="r")))
    (folder / f"999999999-x{SUFFIX}").write_text(record.replace("ASSET", asset), encoding="utf-8")
    (found,) = left_behind(folder)
    assert found.asset.name == "x" and found.original_path == "" and found.saved_at == 0.0


def test_a_time_far_in_the_future_is_described_not_raised():
    far = recovery_module.Recovery(pathlib.Path("f"), "", 1.2e29, Asset(name="x"))
    assert recovery_module.describe(far) == "an untitled asset (autosaved at an unknown time)"


@pytest.mark.parametrize("text", ["[]", '"x"', "null", '{"asset": []}', "[" * 5000, "\xff"],
                         ids=["list", "string", "null", "asset-list", "deep", "not-utf8"])
def test_unreadable_recovery_files_are_left_alone(private_settings, text):
    folder = app_settings.recovery_dir()
    file = folder / f"999999999-bad{SUFFIX}"
    file.write_text(text, encoding="latin-1")
    assert left_behind(folder) == [] and file.exists()
