"""``parley serve`` as the game's child: it ends when the game does (``--exit-with-parent``), and how
long it takes to end.

A game that crashes cannot stop its server, so the server watches two things that end with the game
whatever way it ends: its standard input (a pipe the game holds: EOF once the game is gone, on every
system) and its parent process (Linux: a pidfd; Windows: a handle waited on; elsewhere the parent id
checked four times a second). Either calls ``on_gone`` once, with why.
"""

from __future__ import annotations

import logging
import os
import select
import stat
import sys
import threading
from collections.abc import Callable
from typing import BinaryIO

log = logging.getLogger("parley.serve")

SHUTDOWN_SECONDS = 2.0  # SIGTERM or POST /v1/shutdown to exit: turns cancelled, streams closed, process gone
PARENT_POLL_SECONDS = 0.25  # where the parent can only be asked for (not waited on)


def watch_parent(on_gone: Callable[[str], None], stdin: BinaryIO | None = None) -> list[threading.Thread]:
    """Call ``on_gone(why)`` once, when standard input reaches EOF (if it is a pipe or a socket: a
    game that gives no pipe, /dev/null say, is not taken for gone) or when the parent process ends.
    The watchers are daemon threads (returned: they end with the process)."""
    once = threading.Lock()
    told = False

    def gone(why: str) -> None:
        nonlocal told
        with once:
            if told:
                return
            told = True
        on_gone(why)

    threads = []
    stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
    if stream is not None and _is_pipe(stream):
        threads.append(threading.Thread(target=_until_eof, args=(stream, gone), name="parley-stdin", daemon=True))
    else:
        log.info("--exit-with-parent: standard input is not a pipe, so only the parent process is watched")
    threads.append(threading.Thread(target=_until_parent_ends, args=(os.getppid(), gone), name="parley-parent",
                                    daemon=True))
    for thread in threads:
        thread.start()
    return threads


def _is_pipe(stream: BinaryIO) -> bool:
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _until_eof(stream: BinaryIO, gone: Callable[[str], None]) -> None:
    try:
        while stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
            pass  # what the game writes is not read as anything
    except (OSError, ValueError):
        pass
    gone("its standard input reached its end (the game closed it or ended)")


def _until_parent_ends(parent: int, gone: Callable[[str], None]) -> None:
    why = f"its parent process ({parent}) ended"
    if sys.platform == "win32":
        if _wait_windows(parent):
            gone(why)
        return
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(parent)
        except OSError:
            fd = None  # an old kernel: asked for below
        if fd is not None:
            try:
                select.select([fd], [], [])  # readable once the process has ended
            finally:
                os.close(fd)
            gone(why)
            return
    stop = threading.Event()
    while os.getppid() == parent:  # the parent's end re-parents this process (to init or a subreaper)
        stop.wait(PARENT_POLL_SECONDS)
    gone(why)


def _wait_windows(parent: int) -> bool:
    """Wait for process ``parent`` to end (its handle keeps its id from being reused meanwhile)."""
    import ctypes

    synchronize, infinite = 0x00100000, 0xFFFFFFFF
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    handle = kernel32.OpenProcess(synchronize, False, parent)
    if not handle:
        log.warning("--exit-with-parent: the parent process (%d) cannot be watched; only standard input is", parent)
        return False
    try:
        kernel32.WaitForSingleObject(handle, infinite)
    finally:
        kernel32.CloseHandle(handle)
    return True
