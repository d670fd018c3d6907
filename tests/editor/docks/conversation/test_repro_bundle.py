"""The Conversation dock's "Export repro bundle…" (a file `parley replay` repeats byte for byte) and its
replay bar, which says when a changed reply may be numerics rather than the graph."""

from __future__ import annotations

import pytest

from editor.docks.conversation import history_files as dock_module
from runtime.asset.file import load_asset
from runtime.backends.base import Backend
from runtime.backends.scripted import ScriptedBackend
from runtime.bundle import file as bundle_file
from runtime.bundle.file import EngineSettings, load_bundle
from runtime.resources import examples_dir
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model, talk


@pytest.fixture(autouse=True)
def private_hash_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_file, "hash_cache_file", lambda: tmp_path / "cache" / "model-sha256.json")


@pytest.mark.model
def test_export_repro_bundle_writes_a_bundle_that_replays_byte_identical(window, qtbot, tmp_path, monkeypatch):
    from runtime.bundle.replay import replay_bundle

    window.set_asset(example("chat", sample_model(), reply={"max_tokens": 8}))
    dock, conversation = window.conversation_dock, window.conversation
    talk(qtbot, conversation, "Good evening! Is there a room free tonight?")
    path = tmp_path / "evening.parley-bundle"
    monkeypatch.setattr(dock_module.QFileDialog, "getSaveFileName", lambda *_a, **_k: (str(path), ""))
    assert dock.export_bundle_action.isEnabled()
    with qtbot.waitSignal(dock.history_file_done, timeout=TURN_TIMEOUT_MS) as done:
        dock.export_bundle_action.trigger()  # Export… ▾ Export repro bundle…, with the file dialog answered
    assert done.args == [True], dock.status.text()
    assert "Wrote a repro bundle of 1 turn to" in dock.status.text() and "parley replay" in dock.status.text()
    dock.grab().save(str(tmp_path / "exported.png"))

    bundle = load_bundle(path)
    assert bundle.settings == EngineSettings.of(conversation.worker.backend), "the settings the turn ran with"
    assert bundle.asset == conversation.running_asset and bundle.conversation == conversation.saved
    assert bundle.conversation.tree.state_after(bundle.conversation.tree.current).journals["reply"].length > 0
    report = replay_bundle(bundle)
    assert report.identical and [t.outcome for t in report.turns] == ["identical"], [t.describe() for t in report.turns]

    assert not dock.export_bundle_to(str(tmp_path)), "a folder is no file to write"
    assert "Could not write" in dock.status.text() and "unchanged" in dock.status.text()


def test_a_bundle_is_refused_for_a_conversation_on_a_backend_that_is_not_the_embedded_engine(window, qtbot,
                                                                                             tmp_path):
    window.set_asset(load_asset(examples_dir() / "chat.json"))
    window.conversation.use_backend(ScriptedBackend)
    talk(qtbot, window.conversation, "Hello")
    dock = window.conversation_dock
    path = tmp_path / "b.parley-bundle"
    assert not dock.start_bundle_export(str(path))
    assert "A repro bundle is for the embedded engine" in dock.status.text() and not path.exists()


class Drifting(ScriptedBackend):
    """Scripted replies that change every call, from a backend that promises exact replays (or not)."""

    exact = True
    calls = 0

    def __init__(self) -> None:
        super().__init__(reply=self._next)

    def _next(self, _prompt, _request) -> str:
        Drifting.calls += 1
        return f"reply {Drifting.calls}"

    def reproducibility(self):
        return super().reproducibility() if self.exact else Backend.reproducibility(self)


class Loose(Drifting):
    exact = False
    label = "a test server"


@pytest.mark.parametrize("backend", [Drifting, Loose])
def test_the_replay_bar_says_when_a_changed_reply_may_be_numerics(window, qtbot, tmp_path, backend):
    window.set_asset(load_asset(examples_dir() / "chat.json"))
    conversation, dock = window.conversation, window.conversation_dock
    conversation.use_backend(backend)
    for line in ("Hello", "Any rooms?"):
        talk(qtbot, conversation, line)
    assert conversation.replay(0)
    qtbot.waitUntil(lambda: conversation.replaying is not None and not conversation.replaying.pending
                    and not conversation.busy, timeout=TURN_TIMEOUT_MS)
    text = dock.replay_label.text()
    assert "2 replies changed" in text
    dock.grab().save(str(tmp_path / "replay-bar.png"))
    if backend is Loose:
        assert ("not a sure sign: a test server does not say whether it repeats itself: a replayed reply may change "
                "with the same graph and seed") in text
    else:
        assert "not a sure sign" not in text
