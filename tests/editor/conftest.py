"""Fixtures for editor tests: offscreen Qt, a private settings folder, and a check that
no test leaves a QThread, a thread job or a window's QTimer running (napari does the same)."""

from __future__ import annotations

import os
import weakref

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_PREFERRED_BINDING", "PySide6")

import pytest
from PySide6.QtCore import QThread, QTimer


@pytest.fixture(autouse=True)
def private_settings(tmp_path, monkeypatch):
    """Settings, backend profiles and recovery files in a temporary folder, never the designer's own."""
    monkeypatch.setenv("PARLEY_STUDIO_SETTINGS", str(tmp_path / "settings" / "parley-studio.ini"))
    monkeypatch.setenv("PARLEY_STUDIO_RECOVERY", str(tmp_path / "recovery"))
    monkeypatch.setenv("PARLEY_BACKENDS", str(tmp_path / "settings" / "backends.json"))
    monkeypatch.setenv("PARLEY_TEST_RUNS", str(tmp_path / "test-runs"))
    return tmp_path


@pytest.fixture(autouse=True)
def no_running_threads(monkeypatch):
    started: list[weakref.ref] = []
    original = QThread.start

    def tracking_start(self, *args, **kwargs):
        started.append(weakref.ref(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(QThread, "start", tracking_start)
    yield
    from editor.threads.thread_job import running_jobs

    jobs = [job.name for job in running_jobs()]
    running = []
    for ref in started:
        thread = ref()
        try:
            if thread is not None and thread.isRunning():
                running.append(thread)
        except RuntimeError:
            pass  # the C++ object is gone, so the thread is too
    assert not running, f"test left {len(running)} QThread(s) running: stop and wait() them in teardown"
    # A job neither stopped nor heard to finish (its thread ended, its finished never reached the UI)
    assert not jobs, f"test left thread job(s) {jobs} unfinished: stop() them, or wait for finished"


_windows: list[weakref.ref] = []


def _active_timers(window) -> list[QTimer]:
    try:
        return [t for t in window.findChildren(QTimer) if t.isActive()]
    except RuntimeError:
        return []


@pytest.fixture
def make_window(qtbot):
    """Build main windows; on teardown they are closed without questions and must
    have stopped every timer of their own."""
    from editor.window.main_window import MainWindow

    made: list[MainWindow] = []

    def make(**kwargs) -> MainWindow:
        window = MainWindow(**kwargs)
        # Not qtbot.addWidget: pytest-qt closes those before fixtures tear down, and a
        # window with unsaved changes would ask its question in the middle of teardown.
        window.show()
        made.append(window)
        return window

    yield make
    for window in made:
        try:
            window.document.undo_stack.setClean()
            window.close()
            window.deleteLater()
        except RuntimeError:
            continue
        leftover = _active_timers(window)
        names = [(t.objectName(), type(t.parent()).__name__) for t in leftover]
        assert not leftover, f"a closed window left {len(leftover)} QTimer(s) running: {names}"


@pytest.fixture
def window(make_window):
    return make_window()
