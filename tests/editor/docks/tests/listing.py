"""Waiting for the Tests dock to list the suites: it reads them off the UI thread."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from editor.docks.tests.dock import TestsDock

LISTING_TIMEOUT_MS = 30_000


@contextmanager
def listed(qtbot, dock: TestsDock):
    """Wait, after the block, until the dock shows the suite files as they are now."""
    with qtbot.waitSignal(dock.suites_listed, timeout=LISTING_TIMEOUT_MS):
        yield


def open_listed(qtbot, window, path: str | Path) -> TestsDock:
    """Open an asset in ``window`` and wait until its Tests dock lists the suites beside it."""
    dock = window.dock(TestsDock)
    with listed(qtbot, dock):
        assert window.open_path(str(path))
    return dock
