"""Python's cycle collector runs on the UI thread only.

Left to itself, the collector runs in whichever thread happens to allocate, so a worker thread
(the runtime's turns, suite reading, a test run) could collect the Qt objects of a closed window
or canvas and destroy them off the UI thread: Qt then hung (in a scene's index, a menu, a show) or
crashed. Automatic collection is switched off once a window exists, and a timer on the UI thread
collects with the collector's own thresholds instead (the recipe Qt applications use for this).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

CHECK_MS = 250  # how often the UI thread looks whether a collection is due


class UiThreadCollector(QObject):
    """Collects garbage cycles from a timer on the UI thread, generation by generation."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect_if_due)
        self.timer.start(CHECK_MS)

    def collect_if_due(self) -> None:
        counts = gc.get_count()
        generation = -1
        for level, (count, threshold) in enumerate(zip(counts, self.thresholds)):
            if count <= threshold:
                break
            generation = level
        if generation >= 0:
            gc.collect(generation)


_collector: UiThreadCollector | None = None


def collect_on_the_ui_thread() -> None:
    """Switch garbage collection to the UI thread for the rest of the process (once)."""
    global _collector
    app = QCoreApplication.instance()
    if _collector is None and app is not None:
        _collector = UiThreadCollector(app)
