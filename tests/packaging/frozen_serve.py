"""The frozen ``parley-serve`` as a game starts it: a copy of the built folder somewhere else, run with
an environment that has no Python in it, and its address read from the line it prints.

Used by tests/packaging/test_serve_executable.py and bench/bench_serve_executable.py.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers import LISTENING

START_SECONDS = 120.0  # for the address line: a busy 2-core machine; a working start takes a second or two
STOP_SECONDS = 30.0


def copy_of(executable: Path, folder: Path) -> Path:
    """The built folder copied into ``folder`` (links kept as links); returns the copy's executable."""
    copy = folder / executable.parent.name
    shutil.copytree(executable.parent, copy, symlinks=True)
    return copy / executable.name


def bare_env(scratch: Path, **extra: str) -> dict[str, str]:
    """An environment with no Python in it: PATH is an empty folder (the system's python3 sits in
    /usr/bin), no PYTHONPATH, PYTHONHOME or VIRTUAL_ENV, and a home folder of its own, so nothing of
    this machine's user can be read or written."""
    empty, home = scratch / "empty-path", scratch / "home"
    empty.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": str(empty), "HOME": str(home), "LANG": "C.UTF-8"}
    if sys.platform == "win32":  # Windows cannot start a process without these
        env.update({k: os.environ[k] for k in ("SYSTEMROOT", "TEMP", "TMP") if k in os.environ})
    env.update(extra)
    return env


@dataclass
class FrozenServer:
    """A running ``parley-serve``: its process, and what it printed on stdout and stderr so far."""

    process: subprocess.Popen
    started: float  # time.perf_counter() just before the process was started
    stdout: queue.Queue[str | None] = field(default_factory=queue.Queue)
    stderr: list[str] = field(default_factory=list)
    url: str = ""
    listening_seconds: float = 0.0  # from the start to the `listening on` line

    def output(self) -> str:
        return "".join(self.stderr)[-4000:]

    def wait_for_address(self, seconds: float = START_SECONDS) -> str:
        """The address of the `parley serve: listening on URL` line, read within ``seconds``; raises
        AssertionError with what the server said when it ended or stayed silent instead."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                line = self.stdout.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no `listening on` line in {seconds:.0f} s:\n{self.output()}") from None
            if line is None:
                self.process.wait(STOP_SECONDS)
                raise AssertionError(f"parley-serve ended ({self.process.returncode}) without listening:\n"
                                     f"{self.output()}")
            match = LISTENING.search(line)
            if match:
                self.listening_seconds = time.perf_counter() - self.started
                self.url = match.group(1)
                return self.url

    def stop(self) -> int:
        """SIGTERM (Ctrl+Break's equivalent on Windows), then its exit code; killed if it does not end."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_SECONDS)
            raise AssertionError(f"parley-serve did not end within {STOP_SECONDS:.0f} s of SIGTERM:\n"
                                 f"{self.output()}") from None


@contextmanager
def frozen_server(executable: Path, args: list[str], env: dict[str, str]) -> Iterator[FrozenServer]:
    """``executable ARGS`` started in its own folder's parent (nothing of the checkout around it), its
    output read by threads so it never blocks on a full pipe. Stopped at the end if still running."""
    started = time.perf_counter()
    process = subprocess.Popen([str(executable), *args], cwd=executable.parent.parent, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, encoding="utf-8", errors="replace")
    server = FrozenServer(process, started)

    def read_stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            server.stdout.put(line)
        server.stdout.put(None)

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            server.stderr.append(line)

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(STOP_SECONDS)
        for reader in readers:
            reader.join(STOP_SECONDS)
