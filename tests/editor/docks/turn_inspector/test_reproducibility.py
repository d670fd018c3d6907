"""The Turn Inspector says when the backend that ran a turn is not reproducible (so a changed reply
may be numerics), and shows the embedded backend's cache snapshots against the budget the designer
sets under Backend → Cache Snapshot Budget."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import ClassVar

import pytest
from PySide6.QtWidgets import QApplication

from editor import settings as app_settings
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.session.record import SnapshotUse
from runtime.asset.model import Asset
from runtime.backends.base import Reproducibility
from runtime.backends.scripted import ScriptedBackend
from runtime.models.memory import MIB
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model, talk

SHOTS = Path("/tmp/parley-reproducibility-shots")

ASSET = {
    "version": 1, "name": "hello", "default_model": "m.gguf", "start_node": "hello",
    "nodes": [{"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet."}],
}
FUZZY_NOTE = "this server reuses its prompt cache, which changes the numbers from one call to the next"


class _Fuzzy(ScriptedBackend):
    """A backend that does not promise the same reply again (as llama.cpp's server with cache_prompt)."""

    label = "fuzzy-box (http://127.0.0.1:1) \u00b7 llama.cpp server \u00b7 tiny.gguf"

    def reproducibility(self) -> Reproducibility:
        return Reproducibility(False, False, FUZZY_NOTE)


class _Snapshots:
    """Stands in for ``TurnSnapshots``: the numbers, and the threads its budget was set on."""

    def __init__(self) -> None:
        self.budget = 256 * MIB
        self.bytes = 3 * MIB
        self.taken, self.restored = 2, 1
        self.set_on: list[int] = []

    def __len__(self) -> int:
        return 2 if self.budget else 0

    def set_budget(self, budget: int) -> None:
        self.set_on.append(threading.get_ident())
        self.budget = budget
        if budget < self.bytes:
            self.bytes = 0


class _WithSnapshots(ScriptedBackend):
    made: ClassVar[list[_WithSnapshots]] = []

    def __init__(self) -> None:
        super().__init__()
        self.snapshots = _Snapshots()
        _WithSnapshots.made.append(self)


def shot(widget, name: str) -> Path:
    for _ in range(3):
        QApplication.processEvents()  # pending layouts first
    SHOTS.mkdir(parents=True, exist_ok=True)
    out = SHOTS / name
    assert widget.grab().save(str(out))
    return out


def say(qtbot, conversation, line: str):
    with qtbot.waitSignal(conversation.turn_finished, timeout=10_000) as finished:
        assert conversation.say(line)
    qtbot.waitUntil(lambda: not conversation.busy, timeout=10_000)
    return finished.args[0]


def compare(inspector: TurnInspectorDock, turn_id: int, with_id: int) -> str:
    inspector.turn_picker.setCurrentIndex(inspector.turn_picker.findData(turn_id))
    inspector.compare_picker.setCurrentIndex(inspector.compare_picker.findData(with_id))
    return inspector.diff_view.toPlainText()


def test_a_backend_that_is_not_exact_is_named_on_its_turns_and_in_the_diff(window, qtbot):
    conversation = window.conversation
    inspector = window.dock(TurnInspectorDock)
    window.set_asset(Asset.model_validate(ASSET))
    conversation.worker._make_backend = ScriptedBackend
    exact = [say(qtbot, conversation, "hello there"), say(qtbot, conversation, "and again")]

    assert exact[1].reproducibility == ScriptedBackend().reproducibility()
    assert conversation.reproducibility_of(exact[1].turn_id).exact
    assert inspector.repro_label.isHidden(), "an exact backend: no line"
    diff = compare(inspector, exact[1].turn_id, exact[0].turn_id)
    assert "reproducible" not in diff and "numerics" not in diff and "different backends" not in diff
    assert inspector.snapshots_label.isHidden(), "a backend without snapshots shows no snapshot use"

    assert conversation.use_backend(_Fuzzy)
    fuzzy = [say(qtbot, conversation, "are you there?"), say(qtbot, conversation, "hello?")]
    inspector.turn_picker.setCurrentIndex(inspector.turn_picker.findData(fuzzy[1].turn_id))
    assert not inspector.repro_label.isHidden()
    assert "Not reproducible" in inspector.repro_label.text() and _Fuzzy.label in inspector.repro_label.text()
    assert inspector.repro_label.toolTip() == FUZZY_NOTE, "the backend's own note, as the tooltip"
    assert conversation.reproducibility_of(fuzzy[0].turn_id) == _Fuzzy().reproducibility()

    diff = compare(inspector, fuzzy[1].turn_id, fuzzy[0].turn_id)
    assert f"{_Fuzzy.label} is not reproducible ({FUZZY_NOTE})" in diff and "numerics" in diff
    assert "different backends" not in diff
    # One side exact, the other not: still a warning, and the backends differ.
    diff = compare(inspector, fuzzy[0].turn_id, exact[1].turn_id)
    assert "not reproducible" in diff and "different backends" in diff
    shot(inspector, "inspector-not-reproducible.png")
    inspector.tabs.setCurrentWidget(inspector.diff_view)
    inspector.setFloating(True)
    inspector.resize(900, 640)
    shot(inspector, "inspector-diff-not-reproducible.png")

    # Back on a turn of the exact backend, the line goes.
    inspector.turn_picker.setCurrentIndex(inspector.turn_picker.findData(exact[0].turn_id))
    assert inspector.repro_label.isHidden()

    # A new conversation forgets what the turns' backends promised.
    with qtbot.waitSignal(conversation.history_changed, timeout=10_000):
        conversation.restart()
    assert conversation.turn_reproducibility == {}


def test_the_budget_is_set_from_the_settings_and_live_on_the_worker_thread(make_window, qtbot):
    app_settings.set_snapshot_budget_mib(100)
    window = make_window()
    conversation = window.conversation
    inspector = window.dock(TurnInspectorDock)
    window.set_asset(Asset.model_validate(ASSET))
    _WithSnapshots.made.clear()
    conversation.worker._make_backend = _WithSnapshots
    record = say(qtbot, conversation, "hello there")
    assert record.snapshots == SnapshotUse(3 * MIB, 100 * MIB, 2, 2, 1), "the setting, applied when the backend was made"
    assert conversation.snapshot_use == record.snapshots
    assert not inspector.snapshots_label.isHidden()
    assert inspector.snapshots_label.text() == "snapshots: 3 MiB of 100 MiB"
    assert "2 snapshots kept" in inspector.snapshots_label.toolTip()

    assert window.snapshot_budget_action in window.backend_menu.actions()
    dialog = window.snapshot_budget_dialog()
    assert dialog.budget.value() == 100
    assert "3 MiB of 100 MiB" in dialog.use_label.text()
    shot(dialog, "snapshot-budget-dialog.png")
    dialog.budget.setValue(0)
    with qtbot.waitSignal(conversation.snapshots_changed, timeout=10_000) as changed:
        dialog.accept()
    assert changed.args[0].budget == 0 and changed.args[0].bytes == 0, "set live: the snapshots went at once"
    assert "off" in dialog.use_label.text(), "the dialog follows what the worker reports"
    backend = _WithSnapshots.made[-1]
    assert backend.snapshots.set_on and threading.get_ident() not in backend.snapshots.set_on, \
        "the budget is set on the worker thread, never the UI thread"
    assert app_settings.snapshot_budget_mib() == 0, "and remembered"
    record = say(qtbot, conversation, "and again")
    assert inspector.snapshots_label.text() == "snapshots: off"


def test_a_bad_budget_in_the_settings_file_falls_back_to_the_default_and_says_where(caplog):
    store = app_settings.app_settings()
    store.setValue(app_settings.SNAPSHOT_BUDGET_KEY, "lots")
    store.sync()
    assert app_settings.snapshot_budget_mib() == app_settings.default_snapshot_budget_mib() == 256
    assert app_settings.SNAPSHOT_BUDGET_KEY in caplog.text and store.fileName() in caplog.text
    with pytest.raises(ValueError, match="0 to"):
        app_settings.set_snapshot_budget_mib(-1)


@pytest.mark.model
def test_turns_on_the_sample_model_bring_their_snapshots_and_reproducibility(make_window, qtbot):
    """Three turns, a rewind to the start and another line on the real backend: the rewind cuts cells
    the second and third turns' calls read, so the backend takes a snapshot first, whose bytes arrive with the turn;
    the embedded backend is exact, so no line says otherwise."""
    app_settings.set_snapshot_budget_mib(64)
    window = make_window()
    conversation = window.conversation
    inspector = window.dock(TurnInspectorDock)
    window.set_asset(example("chat", sample_model(), reply={"max_tokens": 24, "seed": 5}))
    first = talk(qtbot, conversation, "Good evening! Is there a room free tonight?")
    assert first.reproducibility is not None and first.reproducibility.exact
    assert "exact" in first.reproducibility.note
    assert first.snapshots is not None and first.snapshots.budget == 64 * MIB, "the setting reached the backend"
    assert inspector.repro_label.isHidden()
    talk(qtbot, conversation, "What is the best dish on the menu?")
    # the third turn reads from past the second's reading, so going back to the start cuts cells
    # earlier calls read (the second turn's alone would cost one turn to read again: no snapshot)
    talk(qtbot, conversation, "And how much is a bowl of stew?")

    with qtbot.waitSignal(conversation.history_changed, timeout=TURN_TIMEOUT_MS):
        assert conversation.rewind(0)
    third = talk(qtbot, conversation, "Do you have stables for my horse?")
    use = third.snapshots
    assert use.taken >= 1 and use.bytes > 0, use
    assert use.bytes <= use.budget == 64 * MIB
    assert inspector.snapshots_label.text() == use.text and use.text.endswith(" of 64 MiB")
    shot(inspector, "inspector-snapshots-sample-model.png")

    # Off, live: the snapshots taken go at once.
    with qtbot.waitSignal(conversation.snapshots_changed, timeout=TURN_TIMEOUT_MS) as changed:
        dialog = window.snapshot_budget_dialog()
        dialog.budget.setValue(0)
        dialog.accept()
    assert changed.args[0] == SnapshotUse(0, 0, 0, use.taken, use.restored)
