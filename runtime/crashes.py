"""Crash reports: what a native crash leaves behind, so the next start can say what crashed.

A crash in native code (llama.cpp reading a bad GGUF, an instruction the CPU does not have) kills
the whole process: no exception is raised and no ``finally`` runs. ``CrashWatch`` has
``faulthandler`` write the fatal signal and every thread's Python stack to a crash file of the
process's own (``NAME-PID.crash``), and keeps what is running (a turn, and which node of it) in
``NAME-PID.running`` as it changes. A clean exit deletes both, so files still there after their
process ended were left by a crash: ``left_behind`` reads each one as a ``Crash``.

One watch per process (``faulthandler`` writes to one file). The editor keeps its crash files in
its recovery folder; ``parley serve`` in its state folder.
"""

from __future__ import annotations

import faulthandler
import itertools
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Self

CRASH_SUFFIX = ".crash"
RUNNING_SUFFIX = ".running"
MAX_CRASH_BYTES = 1 << 20  # every thread's stack: a few kB; a larger file is read only this far

log = logging.getLogger("parley.crashes")

# What faulthandler writes: "Fatal Python error: Segmentation fault" (on Windows "Windows fatal
# exception: access violation"), then each thread's frames, innermost first.
_FATAL = re.compile(r"^(?:Fatal Python error|Windows fatal exception): (.+?)\s*$", re.MULTILINE)
_THREAD = re.compile(r"^(Current thread|Thread|Stack)\b.*\(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line (?P<line>\S+) in (?P<function>.+?)\s*$')


def process_running(pid: int) -> bool:
    """Whether a process with this id runs now (one of another user's counts)."""
    if os.name == "nt":  # os.kill(pid, 0) sends CTRL_C_EVENT there
        return _windows_process_running(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # an id no process can have (too large)
        return False
    return True


def _windows_process_running(pid: int) -> bool:  # pragma: no cover - Windows only
    import ctypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return ctypes.get_last_error() == 5  # ERROR_ACCESS_DENIED: it runs, as another user
    try:
        code = ctypes.c_ulong()
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def turn_note(turn: int, of: str, node: str = "", model: str = "") -> str:
    """What runs, as a crash report says it after "while": "node `reply` ran turn 3 of chat.json on
    SmolLM2-135M-Instruct.Q4_1.gguf". ``turn`` counts from 1; without ``node``, the turn is loading
    ``model`` (or has not reached a node yet)."""
    model = Path(model).name if model else ""
    if node:
        return f"node `{node}` ran turn {turn} of {of}" + (f" on {model}" if model else "")
    if model:
        return f"turn {turn} of {of} loaded {model}"
    return f"turn {turn} of {of} started"


class Running:
    """One thing a ``CrashWatch`` notes as running (a turn), until ``done`` or the end of its ``with``."""

    def __init__(self, watch: CrashWatch, key: int) -> None:
        self._watch = watch
        self._key = key

    def say(self, what: str) -> None:
        """What it does now (a turn that moved on to its next node)."""
        self._watch._note(self._key, what)

    def done(self) -> None:
        self._watch._note(self._key, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.done()


class CrashWatch:
    """Writes this process's crash report, if it crashes, to ``folder/NAME-PID.crash``.

    ``start`` turns it on; a folder that cannot be written leaves it off (``problem`` says why, and
    the log) and never stops the program. ``running`` notes what runs, from any thread; what is
    noted is written only while the watch is on. ``stop`` (a clean exit) deletes both files and
    gives ``faulthandler`` back as it was."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = Path(folder)
        self.name = name
        self.file = self.folder / f"{name}-{os.getpid()}{CRASH_SUFFIX}"
        self.running_file = self.folder / f"{name}-{os.getpid()}{RUNNING_SUFFIX}"
        self.problem = ""
        self._stream: IO[str] | None = None
        self._handler_was_on = False
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._notes: dict[int, str] = {}
        self._written = ""

    @property
    def watching(self) -> bool:
        return self._stream is not None

    def start(self) -> bool:
        """Have a fatal signal write its report to ``file``; whether the watch is on."""
        if self._stream is not None:
            return True
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            stream = open(self.file, "w", encoding="utf-8")  # noqa: SIM115 - open until ``stop``
        except OSError as exc:
            self.problem = (f"crash reports are off: cannot write {self.file} ({exc.strerror or exc}); a crash "
                            "will not say what ran")
            log.warning("%s", self.problem)
            return False
        self._handler_was_on = faulthandler.is_enabled()
        faulthandler.enable(stream, all_threads=True)
        self._stream = stream
        self.problem = ""
        with self._lock:
            self._write_notes()
        return True

    def stop(self) -> None:
        """A clean exit: the crash file and the note go, and ``faulthandler`` is as it was before."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        faulthandler.disable()
        if self._handler_was_on and sys.stderr is not None:
            try:
                faulthandler.enable(all_threads=True)
            except (RuntimeError, ValueError, AttributeError, OSError):  # a stderr with no file behind it
                pass
        stream.close()
        with self._lock:
            self._written = ""
        for file in (self.file, self.running_file):
            _delete(file)

    def running(self, what: str) -> Running:
        """Note ``what`` as running (one of several at once) until the returned ``Running`` is done."""
        running = Running(self, next(self._keys))
        running.say(what)
        return running

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _note(self, key: int, what: str | None) -> None:
        with self._lock:
            if what is None:
                self._notes.pop(key, None)
            else:
                self._notes[key] = " ".join(what.split())  # one line each
            self._write_notes()

    def _write_notes(self) -> None:
        """Rewrite the note file (under the lock). A note is written before every turn and every node:
        it must outlive this process, not the machine, so it is renamed into place without an fsync
        (``runtime.files.writing.atomic_write_text`` syncs, and lives a floor above this one)."""
        if self._stream is None:
            return
        text = "\n".join(self._notes.values())
        if text == self._written:
            return
        try:
            if text:
                temporary = self.running_file.with_name(f".{self.running_file.name}.tmp")
                with open(temporary, "w", encoding="utf-8", errors="replace") as out:
                    out.write(text + "\n")
                os.replace(temporary, self.running_file)
            else:
                self.running_file.unlink(missing_ok=True)
        except OSError as exc:
            if not self.problem:
                self.problem = f"cannot note what runs in {self.running_file} ({exc.strerror or exc})"
                log.warning("%s; a crash will not say what ran", self.problem)
            return
        self._written = text


@dataclass(frozen=True)
class Crash:
    """A crash report a process left behind."""

    file: Path
    pid: int
    when: float  # when it crashed (or, killed, when it last noted what ran), seconds since the epoch
    signal: str  # as faulthandler named it ("Segmentation fault"); "" when it ended without a fatal error
    where: str  # "in llama.cpp (runtime/backends/llama.py, line 696, in _decode)"; "" when not known
    note: str  # what was running then, one thing a line; "" when nothing was
    text: str  # the report as faulthandler wrote it: every thread's stack

    @property
    def fatal(self) -> bool:
        return bool(self.signal)

    @property
    def in_llama(self) -> bool:
        return self.where.startswith("in llama.cpp")

    @property
    def running_file(self) -> Path:
        return self.file.with_suffix(RUNNING_SUFFIX)

    def summary(self, detailed: bool = True) -> str:
        """The crash in a sentence, without its subject: "crashed (Segmentation fault) in llama.cpp
        (runtime/backends/llama.py, line 696, in _decode) while node `reply` ran turn 3 of chat.json
        on M.gguf". Not ``detailed``: the place is only "in llama.cpp" when it was there."""
        what = f"crashed ({self.signal})" if self.fatal else "ended without shutting down"
        where = "in llama.cpp" if self.in_llama and not detailed else self.where
        running = "; ".join(self.note.splitlines())
        return " ".join(part for part in (what, where, f"while {running}" if running else "") if part)

    def forget(self) -> None:
        """Delete the report (it was told)."""
        for file in (self.file, self.running_file):
            _delete(file)


def left_behind(folder: Path, name: str) -> list[Crash]:
    """The crash reports in ``folder`` of processes named ``name`` that no longer run, newest first.
    A folder that cannot be read has none; a report that cannot be read is left where it is."""
    found: list[Crash] = []
    try:
        files = sorted(Path(folder).glob(f"{name}-*{CRASH_SUFFIX}"))
    except OSError:
        return []
    for file in files:
        pid = file.name[len(name) + 1:-len(CRASH_SUFFIX)]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        crash = read_crash(file, int(pid))
        # A process whose fatal error is written is dying (writing a core dump, or not reaped yet) even
        # while its id still answers; on Windows faulthandler also writes exceptions that were handled.
        if crash is not None and ((crash.fatal and os.name != "nt") or not process_running(crash.pid)):
            found.append(crash)
    return sorted(found, key=lambda c: c.when, reverse=True)


def read_crash(file: Path, pid: int) -> Crash | None:
    """The report in ``file`` (None when it cannot be read)."""
    try:
        with open(file, "rb") as stream:
            text = stream.read(MAX_CRASH_BYTES).decode("utf-8", errors="replace")
        when = file.stat().st_mtime
    except OSError:
        return None
    note = ""
    running = file.with_suffix(RUNNING_SUFFIX)
    try:
        note = running.read_bytes()[:MAX_CRASH_BYTES].decode("utf-8", errors="replace").strip()
        if not text:  # killed: it never wrote a report, so the note is its last sign of life
            when = max(when, running.stat().st_mtime)
    except OSError:
        pass
    fatal = _FATAL.findall(text)
    return Crash(file, pid, when, fatal[-1] if fatal else "", _where(text), note, text)


def _where(text: str) -> str:
    """Where the crashing thread was: its innermost Python frame. A crash on a thread of llama.cpp's
    own (no Python frames, so faulthandler marks no thread current) is placed in llama.cpp when a
    Python thread was inside it."""
    threads: list[tuple[bool, list[re.Match[str]]]] = []
    for line in text.splitlines():
        heading = _THREAD.match(line)
        if heading:
            threads.append((heading.group(1) != "Thread", []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1][1].append(frame)
    current = [frames for is_current, frames in threads if is_current and frames]
    frames = current[0] if current else next((f for _, f in threads if f and _in_llama(f[0]["path"])), [])
    if not frames:
        return ""
    innermost = frames[0]
    place = f"{_short(innermost['path'])}, line {innermost['line']}, in {innermost['function']}"
    return f"in llama.cpp ({place})" if _in_llama(innermost["path"]) else f"in {place}"


def _in_llama(path: str) -> bool:
    path = path.replace("\\", "/")
    return "/llama_cpp/" in path or path.endswith("runtime/backends/llama.py")


def _short(path: str) -> str:
    """A frame's file as a reader knows it: from the package on (``runtime/backends/llama.py``,
    ``llama_cpp/_internals.py``, ``ctypes/__init__.py``), else the file's name."""
    path = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    found = re.search(r"/((?:runtime|editor|tests)/.+)$", path) or re.search(r"/lib/python[\d.]+/(.+)$", path)
    return found.group(1) if found else path.rsplit("/", 1)[-1]


def _delete(file: Path) -> None:
    try:
        file.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not delete %s: %s", file, exc.strerror or exc)


def describe_when(seconds: float) -> str:
    """A report's time as a person reads it ("2024-05-01 14:03")."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "at an unknown time"
