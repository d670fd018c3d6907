"""Garbage cycles are collected on the UI thread only, once a window exists (a worker thread that
collected a closed window's Qt objects hung or crashed Qt)."""

from __future__ import annotations

import gc
import threading
import weakref


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_cycles_are_collected_by_the_ui_thread_and_never_by_a_worker(window, qtbot):
    assert not gc.isenabled(), "automatic collection, which runs in any thread, is off"
    collected_in: list[str] = []

    def note(phase, _info) -> None:
        if phase == "start":
            collected_in.append(threading.current_thread().name)

    def allocate() -> None:  # far past every threshold: automatic collection would run here
        for _ in range(100_000):
            Cycle()

    gc.callbacks.append(note)
    try:
        worker = threading.Thread(target=allocate, name="worker")
        worker.start()
        worker.join()
        probe = Cycle()
        gone = weakref.ref(probe)
        del probe
        qtbot.waitUntil(lambda: gone() is None, timeout=30_000)
    finally:
        gc.callbacks.remove(note)
    assert collected_in and set(collected_in) == {threading.main_thread().name}, collected_in
