"""Real inference servers on 127.0.0.1 for tests and benchmarks (no mocked HTTP).

- llama.cpp's server: ``llama-server`` built from the llama.cpp that llama-cpp-python vendors
  (``packaging/build_llama_server.py``; built on first use, about 5 minutes, then cached).
- An OpenAI-compatible server: llama-cpp-python's own (``python -m llama_cpp.server``, from
  PyPI with the ``server`` extra).

Both serve the sample model. Each runs as a child process on a free port and is stopped (and
waited for) when its ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packaging"))
import build_llama_server

sys.path.pop(0)

STARTUP_SECONDS = 60


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen
    log: Path

    def kill(self) -> None:
        """Die at once, as a crashed server would."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_server_binary() -> Path:
    return build_llama_server.build(log=lambda m: print(m, file=sys.stderr))


@contextlib.contextmanager
def llama_server(model: Path, log_dir: Path, *, slots: int = 4, context: int = 2048, threads: int = 1,
                 threads_batch: int | None = None, port: int | None = None) -> Iterator[RunningServer]:
    """llama.cpp's server with ``slots`` slots of ``context`` tokens each, generating on ``threads``
    threads and reading prompts on ``threads_batch`` (default: the same)."""
    port = port or free_port()
    command = [str(llama_server_binary()), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "--parallel", str(slots), "--ctx-size", str(context * slots), "--threads", str(threads),
               "--threads-batch", str(threads_batch or threads), "--no-webui", "--no-warmup", "--no-kv-unified"]
    with _running(command, f"http://127.0.0.1:{port}", "/health", log_dir / f"llama-server-{port}.log") as server:
        yield server


# llama-cpp-python's server with the runtime's AMX guard (runtime.backends.llama_build): its Llama takes
# llama.cpp's default model parameters, whose extra weight buffers crash on some AMX hosts.
GUARDED_OPENAI_SERVER = """
import runpy, sys
import llama_cpp.llama_cpp as bindings
from runtime.backends.llama_build import use_extra_buffers
defaults = bindings.llama_model_default_params
def guarded():
    params = defaults()
    params.use_extra_bufts = use_extra_buffers()
    return params
bindings.llama_model_default_params = guarded
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


@contextlib.contextmanager
def openai_server(model: Path, log_dir: Path, *, context: int = 2048, threads: int = 1,
                  port: int | None = None) -> Iterator[RunningServer]:
    """llama-cpp-python's OpenAI-compatible server (with the AMX guard)."""
    port = port or free_port()
    command = [sys.executable, "-c", GUARDED_OPENAI_SERVER, "--model", str(model), "--host", "127.0.0.1",
               "--port", str(port), "--n_ctx", str(context), "--n_threads", str(threads),
               "--n_threads_batch", str(threads)]
    with _running(command, f"http://127.0.0.1:{port}", "/v1/models", log_dir / f"openai-server-{port}.log") as server:
        yield server


@contextlib.contextmanager
def _running(command: list[str], url: str, ready_path: str, log: Path) -> Iterator[RunningServer]:
    from runtime.backends.http import ServerConnection, wait_until_ready
    from runtime.problems import BackendError

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    server = RunningServer(url, process, log)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[0]} exited ({process.returncode}) while starting:\n{server.output()}")
            try:
                wait_until_ready(ServerConnection(url, timeout=5), ready_path, 0.5)
                break
            except BackendError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not start in {STARTUP_SECONDS} s:\n{server.output()}") from None
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


# --- parley serve as a process of its own (the client tests) -------------------------------------

LISTENING = re.compile(r"parley serve: listening on (http://\S+)")
SERVE_START_SECONDS = 120.0  # a deadline for the server's address line (a busy 2-core machine)
# Runs `parley ARGS` after a test's patch (python -c PATCH + this): the patch changes the server from inside.
RUN_PARLEY = "\nimport sys\nfrom runtime.cli import main\nsys.exit(main(sys.argv[1:]))\n"


@dataclass
class ServeProcess:
    """A ``parley serve`` process: its address, the process, and what it logged (stderr) so far."""

    url: str
    process: subprocess.Popen
    _log: IO[str]

    def log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()


@contextlib.contextmanager
def parley_serve(*args: str, token: str | None = None) -> Iterator[str]:
    """``parley serve --port 0 ARGS`` as a process of its own; yields the address it prints."""
    with parley_serve_process(*args, token=token) as served:
        yield served.url


@contextlib.contextmanager
def parley_serve_process(*args: str, token: str | None = None, patch: str = "",
                         stdin: int | None = None) -> Iterator[ServeProcess]:
    """``parley serve --port 0 ARGS`` as a process of its own, once it prints its address; ``patch`` is
    Python it runs first, ``stdin`` its standard input (subprocess.PIPE: ``process.stdin``). Stopped
    with SIGTERM (and waited for) at the end, unless it ended already."""
    env = {k: v for k, v in os.environ.items() if k != "PARLEY_SERVE_TOKEN"}
    if token is not None:
        env["PARLEY_SERVE_TOKEN"] = token
    start = [sys.executable, "-c", patch + RUN_PARLEY] if patch else [sys.executable, "-m", "runtime"]
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as log:
        process = subprocess.Popen([*start, "serve", "--port", "0", *args], cwd=ROOT, stdin=stdin,
                                   env=env, stdout=subprocess.PIPE, stderr=log, text=True, encoding="utf-8")
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:  # keeps stdout drained, so the server never blocks on a full pipe
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            url = None
            while url is None:
                try:
                    line = lines.get(timeout=SERVE_START_SECONDS)
                except queue.Empty:
                    line = None
                if line is None:
                    log.seek(0)
                    pytest.fail(f"parley serve printed no address (exit {process.poll()}):\n{log.read()[-4000:]}")
                match = LISTENING.search(line)
                url = match.group(1) if match else None
            yield ServeProcess(url, process, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
