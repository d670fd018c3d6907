"""The Tests dock reads suite files off the UI thread and never hangs on one: a FIFO named like a
suite is listed with why (never opened), a suite nested too deeply shows its located problem, and
a read asked for while another goes on gives the newer files."""

from __future__ import annotations

import json
import os
import threading

from editor.docks.tests.dock import TestsDock
from runtime.suites.file import MAX_SUITE_NESTING
from tests.editor.docks.tests.listing import listed, open_listed
from tests.editor.docks.tests.test_dock import ASSET, SUITE


def suite_texts(dock: TestsDock) -> dict[str, list[str]]:
    tree = dock.tree
    return {tree.topLevelItem(i).text(0): [tree.topLevelItem(i).child(j).text(0)
                                           for j in range(tree.topLevelItem(i).childCount())]
            for i in range(tree.topLevelItemCount())}


def test_a_fifo_beside_the_asset_is_listed_with_why_and_never_opened(window, qtbot, tmp_path):
    (tmp_path / "router.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "router.suite.yaml").write_text(SUITE, encoding="utf-8")
    fifo = tmp_path / "pipe.suite.yaml"
    os.mkfifo(fifo)
    done = threading.Event()

    def unblock() -> None:  # only if something opened the pipe to read it: let that reader go, so the test fails
        if not done.wait(20):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass  # no reader: nothing to let go

    watchdog = threading.Thread(target=unblock, daemon=True)
    watchdog.start()
    try:
        dock = open_listed(qtbot, window, tmp_path / "router.json")
    finally:
        done.set()
        watchdog.join()
    texts = suite_texts(dock)
    assert texts["router.suite.yaml"] == ["impossible", "greets"]
    assert texts["pipe.suite.yaml"] == ["pipe.suite.yaml: not a file but a pipe (FIFO)"]


def test_a_deeply_nested_suite_shows_where_it_goes_too_deep(window, qtbot, tmp_path):
    (tmp_path / "router.json").write_text(json.dumps(ASSET), encoding="utf-8")
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "router.suite.yaml").write_text(f"asset: router.json\ncases:\n  - name: x\n    turns: {deep}\n",
                                                encoding="utf-8")
    dock = open_listed(qtbot, window, tmp_path / "router.json")
    [problem] = suite_texts(dock)["router.suite.yaml"]
    column = 12 + MAX_SUITE_NESTING - 3  # the bracket that opens one level too many (three are above it)
    assert problem.startswith(f"router.suite.yaml, line 4, column {column}: nested too deeply: at most "
                              f"{MAX_SUITE_NESTING} levels")
    assert "cannot be read (1 problem)" in dock.tree.topLevelItem(0).text(1)


def test_suites_are_read_off_the_ui_thread_and_the_newest_read_wins(window, qtbot, tmp_path, monkeypatch):
    import editor.services.suite_run

    (tmp_path / "router.json").write_text(json.dumps(ASSET), encoding="utf-8")
    suite = tmp_path / "router.suite.yaml"
    suite.write_text(SUITE, encoding="utf-8")
    real = editor.services.suite_run.suites_beside
    threads: list[threading.Thread] = []
    release = threading.Event()

    def slow(*args, **kwargs):
        threads.append(threading.current_thread())
        release.wait(20)  # a large suite, still parsing
        return real(*args, **kwargs)

    monkeypatch.setattr(editor.services.suite_run, "suites_beside", slow)
    dock = window.dock(TestsDock)
    emitted: list[int] = []
    dock.suites_listed.connect(lambda: emitted.append(len(dock.entries)))
    with listed(qtbot, dock):
        assert window.open_path(str(tmp_path / "router.json"))
        assert "Reading the test suites beside router.json" in dock.tree.topLevelItem(0).text(0), "the UI goes on"
        (tmp_path / "more.suite.yaml").write_text(SUITE, encoding="utf-8")
        dock.refresh()  # asked while the first read goes on
        release.set()
    assert threads and all(t is not threading.main_thread() for t in threads)
    assert len(threads) == 2 and emitted == [2], "one listing, of the files as they are now"
    assert set(suite_texts(dock)) == {"more.suite.yaml", "router.suite.yaml"}


def test_closing_the_window_mid_read_stops_the_reading_thread(make_window, qtbot, tmp_path, monkeypatch):
    import editor.services.suite_run

    (tmp_path / "router.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "router.suite.yaml").write_text(SUITE, encoding="utf-8")
    started, release = threading.Event(), threading.Event()
    real = editor.services.suite_run.suites_beside

    def slow(*args, **kwargs):
        started.set()
        release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(editor.services.suite_run, "suites_beside", slow)
    window = make_window()
    assert window.open_path(str(tmp_path / "router.json"))
    assert started.wait(20)
    release.set()
    window.close()  # the conftest fails the test if the reading thread is still going
    assert window.suite_run.reading.closed and not window.suite_run.reading.busy
