"""A server's death on cue, for a client under test in another language: ``POST`` to ``url`` kills the
process (SIGKILL, as a crash or ``kill -9`` would) and answers ``204`` only once it is gone, so the client
asks for it in the middle of a turn (from its onEvent) and the turn's stream then dies with the server.
``kills`` counts the kills done. A closed port (``closed_url``) is the server that never started."""

from __future__ import annotations

import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from tests.servers import free_port

DEADLINE = 60.0  # seconds for a killed process to be gone; only a hang reaches it


def closed_url() -> str:
    """An address nobody listens on: a port bound once and closed."""
    return f"http://127.0.0.1:{free_port()}"


class KillSwitch:
    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.kills = 0
        switch = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name for it
                if switch.process.poll() is None:
                    switch.process.kill()
                    switch.process.wait(DEADLINE)
                    switch.kills += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/kill"
        self.thread = threading.Thread(target=self.http.serve_forever, name="kill-switch", daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(DEADLINE)
