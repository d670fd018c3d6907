"""Crash reports: a real native crash in a child process is written down with what ran; a report is
read back as a Crash that says what crashed, where and while what; a clean exit leaves nothing."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from runtime.crashes import (
    CRASH_SUFFIX,
    RUNNING_SUFFIX,
    CrashWatch,
    left_behind,
    process_running,
    read_crash,
    turn_note,
)

DEAD = 999_999_999
ROOT = Path(__file__).resolve().parents[2]

LLAMA_REPORT = """Fatal Python error: Segmentation fault

Thread 0x00007f0fc0a2c6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 622 in wait

Current thread 0x00007f0fc6a2cb80 (most recent call first):
  File "/home/ana/.venv/lib/python3.11/site-packages/llama_cpp/_internals.py", line 310 in decode
  File "/home/ana/parley/runtime/backends/llama.py", line 696 in _decode
  File "/home/ana/parley/runtime/agent.py", line 420 in _run_node

Extension modules: numpy._core._multiarray_umath (total: 1)
"""


def _left(folder: Path, report: str, note: str = "", name: str = "parley-serve", pid: int = DEAD) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{name}-{pid}{CRASH_SUFFIX}"
    file.write_text(report, encoding="utf-8")
    if note:
        file.with_suffix(RUNNING_SUFFIX).write_text(note + "\n", encoding="utf-8")
    return file


def test_a_report_says_the_signal_where_it_struck_and_what_ran(tmp_path):
    _left(tmp_path, LLAMA_REPORT, "node `reply` ran turn 3 of chat.json on M.gguf")
    (crash,) = left_behind(tmp_path, "parley-serve")
    assert crash.pid == DEAD and crash.fatal and crash.signal == "Segmentation fault"
    assert crash.where == "in llama.cpp (llama_cpp/_internals.py, line 310, in decode)" and crash.in_llama
    assert crash.summary() == ("crashed (Segmentation fault) in llama.cpp (llama_cpp/_internals.py, line 310, in "
                               "decode) while node `reply` ran turn 3 of chat.json on M.gguf")
    assert crash.summary(detailed=False) == ("crashed (Segmentation fault) in llama.cpp while node `reply` ran turn 3 "
                                             "of chat.json on M.gguf")
    crash.forget()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("frame", "where"), [
    ('  File "/opt/parley/runtime/backends/llama.py", line 696 in _decode',
     "in llama.cpp (runtime/backends/llama.py, line 696, in _decode)"),
    ('  File "C:\\Parley\\runtime\\backends\\llama.py", line 696 in _decode',
     "in llama.cpp (runtime/backends/llama.py, line 696, in _decode)"),
    ('  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at', "in ctypes/__init__.py, line 519, in string_at"),
    ('  File "/opt/parley/editor/canvas/drawing.py", line 40 in paint', "in editor/canvas/drawing.py, line 40, in paint"),
    ('  File "<string>", line 6 in crash', "in <string>, line 6, in crash"),
])
def test_where_is_the_crashing_threads_innermost_frame(tmp_path, frame, where):
    report = ("Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n"
              '  File "/opt/parley/runtime/backends/llama.py", line 1 in elsewhere\n\n'
              f"Current thread 0x2 (most recent call first):\n{frame}\n")
    crash = read_crash(_left(tmp_path, report), DEAD)
    assert crash is not None and crash.signal == "Aborted" and crash.where == where


def test_a_crash_on_a_thread_of_llama_cpps_own_is_placed_in_llama_cpp(tmp_path):
    """A ggml worker thread has no Python frames: no thread is marked current, but the one that called
    into llama.cpp was in it."""
    report = ("Fatal Python error: Illegal instruction\n\nThread 0x1 (most recent call first):\n"
              '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
              "Thread 0x2 (most recent call first):\n"
              '  File "/opt/parley/runtime/backends/llama.py", line 696 in _decode\n')
    crash = read_crash(_left(tmp_path, report), DEAD)
    assert crash is not None and crash.where == "in llama.cpp (runtime/backends/llama.py, line 696, in _decode)"


def test_a_killed_process_ended_without_shutting_down(tmp_path):
    _left(tmp_path, "", "turn 1 of chat.json loaded M.gguf")
    (crash,) = left_behind(tmp_path, "parley-serve")
    assert not crash.fatal and crash.where == ""
    assert crash.summary() == "ended without shutting down while turn 1 of chat.json loaded M.gguf"


def test_reports_of_running_processes_and_of_other_names_are_not_left_behind(tmp_path):
    _left(tmp_path, "", pid=os.getpid())  # this process's own
    _left(tmp_path, "", pid=os.getppid())  # a process that runs
    _left(tmp_path, LLAMA_REPORT, name="parley-studio")
    (tmp_path / "parley-serve-notapid.crash").write_text(LLAMA_REPORT, encoding="utf-8")
    assert left_behind(tmp_path, "parley-serve") == []
    assert [c.pid for c in left_behind(tmp_path, "parley-studio")] == [DEAD]
    assert left_behind(tmp_path / "missing", "parley-serve") == []


def test_a_dying_process_whose_report_is_written_is_left_behind(tmp_path):
    """Its id may still answer (a core dump being written, a parent that has not reaped it)."""
    _left(tmp_path, LLAMA_REPORT, pid=os.getppid())
    assert [c.pid for c in left_behind(tmp_path, "parley-serve")] == [os.getppid()]


def test_process_running():
    assert process_running(os.getpid()) and not process_running(DEAD)


def test_turn_notes():
    assert turn_note(3, "chat.json", "reply", "/models/M.gguf") == "node `reply` ran turn 3 of chat.json on M.gguf"
    assert turn_note(3, "chat.json", "route") == "node `route` ran turn 3 of chat.json"
    assert turn_note(1, "chat.json", model="M.gguf") == "turn 1 of chat.json loaded M.gguf"
    assert turn_note(1, "chat.json") == "turn 1 of chat.json started"


@pytest.fixture
def restore_faulthandler():
    was_on = faulthandler.is_enabled()
    yield
    if was_on:
        faulthandler.enable(all_threads=True)


def test_the_note_holds_every_turn_in_flight_and_a_clean_stop_leaves_nothing(tmp_path, restore_faulthandler):
    faulthandler.enable()
    watch = CrashWatch(tmp_path / "state", "parley-serve")
    first = watch.running("node `a` ran turn 1 of session one (chat.json)")  # noted before the watch is on
    assert watch.start() and watch.file.exists()
    assert watch.running_file.read_text(encoding="utf-8") == "node `a` ran turn 1 of session one (chat.json)\n"
    with watch.running("turn 4 of session two (chat.json) started") as second:
        second.say("node `b`\nran turn 4 of session two (chat.json)")
        assert watch.running_file.read_text(encoding="utf-8").splitlines() == [
            "node `a` ran turn 1 of session one (chat.json)", "node `b` ran turn 4 of session two (chat.json)"]
    first.done()
    assert not watch.running_file.exists(), "nothing runs: no note"
    watch.stop()
    assert list((tmp_path / "state").iterdir()) == []
    assert faulthandler.is_enabled(), "faulthandler is given back as it was"


def test_a_folder_that_cannot_be_written_leaves_the_watch_off(tmp_path, caplog, restore_faulthandler):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("keep me", encoding="utf-8")
    watch = CrashWatch(a_file, "parley-serve")
    assert watch.start() is False and not watch.watching
    assert str(watch.file) in watch.problem and "crash reports are off" in caplog.text
    with watch.running("turn 1 of chat.json started"):
        pass  # notes are kept in memory only
    watch.stop()
    assert a_file.read_text(encoding="utf-8") == "keep me"


CRASHING_CHILD = """
import ctypes, sys, threading
from pathlib import Path
from runtime.crashes import CrashWatch

watch = CrashWatch(Path(sys.argv[1]), "parley-serve")
watch.start()
idle = threading.Event()
threading.Thread(target=idle.wait, name="idle", daemon=True).start()
with watch.running("node `reply` ran turn 2 of chat.json on M.gguf"):
    ctypes.string_at(0)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_real_native_crash_is_written_down(tmp_path):
    child = subprocess.run([sys.executable, "-c", CRASHING_CHILD, str(tmp_path)], check=False, cwd=ROOT,
                           capture_output=True,
                           text=True, timeout=60)
    assert child.returncode == -signal.SIGSEGV, child.stderr
    (crash,) = left_behind(tmp_path, "parley-serve")
    assert crash.signal == "Segmentation fault" and crash.note == "node `reply` ran turn 2 of chat.json on M.gguf"
    assert crash.where == "in ctypes/__init__.py, line " + crash.where.split("line ")[1]
    assert crash.where.endswith(", in string_at")
    assert crash.text.count("(most recent call first)") == 2, "every thread's stack"


def test_notes_from_many_threads_at_once_are_all_kept(tmp_path, restore_faulthandler):
    watch = CrashWatch(tmp_path, "parley-serve")
    assert watch.start()
    try:
        ready = threading.Barrier(8)
        noted: list = []

        def turn(number: int) -> None:
            ready.wait()
            noted.append(watch.running(f"turn {number} of session s{number} (chat.json) started"))

        threads = [threading.Thread(target=turn, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(watch.running_file.read_text(encoding="utf-8").splitlines()) == 8
        for running in noted:
            running.done()
        assert not watch.running_file.exists()
    finally:
        watch.stop()
