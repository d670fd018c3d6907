"""The ``parley serve`` servers running on this computer, so a server started with ``--port 0`` is found.

While it serves, each server keeps a small file in ``running/`` under the serve state folder
(``$PARLEY_SERVE_STATE``, else ``serve`` in the user's data folder; not ``--state-dir``, which is the
server's own): ``PID.json`` holding its address, process id, start time, asset folders and whether it
wants a token (never the token). It writes the file once it listens (the same moment it prints
``parley serve: listening on URL``) and removes it as it stops. A file whose process is gone (the
server was killed) is skipped and removed by whoever reads it next. The editor's Attach dialog lists
these, so it needs no port typed in.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

FOLDER_NAME = "running"
MAX_FILE_BYTES = 64 * 1024  # an announcement is a few hundred bytes; a bigger file is not one
MAX_SERVERS = 64  # read at most this many announcements (a folder of thousands is not servers)


@dataclass(frozen=True)
class RunningServer:
    """One ``parley serve`` on this computer, as its announcement says."""

    url: str  # where to reach it from this computer (a server on 0.0.0.0 is reached on 127.0.0.1)
    pid: int
    started: float  # seconds since the epoch
    assets: tuple[str, ...]
    wants_token: bool
    file: Path


def running_folder() -> Path:
    """Where the announcements are (not created here)."""
    from runtime.serve.crash_reports import state_dir

    return state_dir() / FOLDER_NAME


def reachable_url(url: str) -> str:
    """``url`` as a client on this computer reaches it: a server listening on every address (0.0.0.0,
    ::) answers on the loopback one."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in ("0.0.0.0", "::"):
        loopback = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
        return urlunsplit(parts._replace(netloc=f"{loopback}:{parts.port}" if parts.port else loopback))
    return url


def announce(url: str, assets: list[str], wants_token: bool, folder: Path | None = None) -> Path | None:
    """Write this process's announcement; the file, or None when it could not be written (the server
    serves anyway: only finding it without its port is lost)."""
    folder = folder or running_folder()
    path = folder / f"{os.getpid()}.json"
    data = {"url": reachable_url(url), "pid": os.getpid(), "started": time.time(), "assets": assets,
            "wants_token": wants_token}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(data) + "\n", encoding="utf-8")
        os.replace(partial, path)  # a reader never sees half a file
    except OSError:
        return None
    return path


def withdraw(path: Path | None) -> None:
    """Remove an announcement (the server stops)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def running_servers(folder: Path | None = None) -> list[RunningServer]:
    """The servers running on this computer, the latest started first. A file that cannot be read, or
    whose process has ended, is not listed (and one whose process has ended is removed)."""
    folder = folder or running_folder()
    try:
        files = sorted(folder.glob("*.json"))[:MAX_SERVERS]
    except OSError:
        return []
    found = []
    for file in files:
        server = _read(file)
        if server is None:
            continue
        if not _alive(server.pid):
            withdraw(file)  # left by a server that was killed
            continue
        found.append(server)
    return sorted(found, key=lambda s: s.started, reverse=True)


def _read(file: Path) -> RunningServer | None:
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return None
        data = json.loads(file.read_text(encoding="utf-8"))
        url, pid = data["url"], data["pid"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or not isinstance(pid, int):
            return None
        assets = tuple(str(a) for a in data.get("assets", []) if isinstance(a, str))
        started = float(data.get("started", 0.0))
        return RunningServer(url, pid, started, assets, bool(data.get("wants_token", False)), file)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (where that cannot be told, it is taken to)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        try:
            code = ctypes.c_ulong()
            return not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)) or code.value == 259  # STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it runs
    except OSError:
        return True
    return True
