"""The Backends dialog's connection check on a server that accepts and never answers: closing ends
the check at once, its thread never left running (it waited out the read timeout)."""

from __future__ import annotations

import socket
import threading
import time

from editor.dialogs.backends import ConnectionCheck
from editor.threads.thread_job import threads_left_running
from runtime.backends.profiles import BackendProfile


def test_closing_during_a_check_on_a_silent_server_ends_it_at_once(qtbot):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        held.append(conn)  # never answered
        accepted.set()

    server = threading.Thread(target=accept, daemon=True)
    server.start()
    check = ConnectionCheck()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert check.start(BackendProfile(name="silent", kind="llama-server", url=url))
        assert accepted.wait(30), "the check reached the server"
        started = time.monotonic()
        check.shutdown()
        assert time.monotonic() - started < 3, "closing waited for the server"
        assert threads_left_running() == []
    finally:
        listener.close()
        for conn in held:
            conn.close()
        server.join(30)
