"""A TCP proxy between a client under test and ``parley serve`` that breaks turn streams on purpose, so
the clients' resume is tested against a real server with real broken connections.

Each connection carries one request: the proxy adds ``Connection: close`` to every request it passes on,
so the server closes the connection after its answer. What it does to a request is read from the
session id in its path (``/v1/sessions/ID/...``):

- ``cut.KIND.*``: the answer to a POST .../turns (or .../regenerate) is passed on up to the end of its
  first KIND event, and then the connection is closed (the client sees the stream end mid-turn; the
  server's turn runs on).
- ``half.KIND.*``: the same, but the connection is closed in the middle of that event's data line, so
  the client holds half an event it must drop.
- ``cut.head.*``: only the answer's head is passed on, none of its body: the stream breaks before
  any event reaches the client (which knows the run from the ``Parley-Run`` header alone).
- ``lost.KIND.*``: cut as ``cut.``, and the client's resume (GET .../runs/...) goes to the ``other``
  server, which does not know the run (it answers unknown_run, as a replica that did not run the turn would).

Everything else passes through untouched. ``cuts`` counts the connections cut, ``resumes`` the resume
requests seen (per session id)."""

from __future__ import annotations

import re
import socket
import threading
from collections import Counter
from typing import Self
from urllib.parse import unquote, urlsplit

SESSION = re.compile(rb"^[A-Z]+ /v1/sessions/([^/ ?]+)(/[^ ?]*)?")
RULE = re.compile(r"^(cut|half|lost)\.([a-z_]+)\.")
SECONDS = 60.0  # a socket that says nothing this long is closed (no test waits that long)


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    return parts.hostname, parts.port


class CuttingProxy:
    def __init__(self, upstream: str, other: str | None = None) -> None:
        self.upstream, self.other = _address(upstream), _address(other) if other else None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.cuts: Counter[str] = Counter()
        self.resumes: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._accept, name="cutting-proxy", daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone would not, on Linux)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(SECONDS)

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = None
        try:
            client.settimeout(SECONDS)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            header, _, rest = head.partition(b"\r\n\r\n")
            lines = [line for line in header.split(b"\r\n") if not line.lower().startswith(b"connection:")]
            request = b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + rest
            found = SESSION.match(lines[0])
            session = unquote(found.group(1).decode()) if found else ""
            route = found.group(2).decode() if found and found.group(2) else ""
            rule = RULE.match(session)
            method = lines[0].split(b" ", 1)[0]
            resuming = method == b"GET" and route.startswith("/runs/")
            if resuming:
                with self.lock:
                    self.resumes[session] += 1
            target = self.other if rule and rule.group(1) == "lost" and resuming and self.other else self.upstream
            upstream = socket.create_connection(target, timeout=SECONDS)
            upstream.sendall(request)
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            cut = rule is not None and method == b"POST" and route in ("/turns", "/regenerate")
            self._answer(upstream, client, (rule.group(1), rule.group(2), session) if cut and rule else None)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        """The rest of the request (its body) to the server; when the client goes, the server sees it go."""
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        try:
            sink.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _answer(self, upstream: socket.socket, client: socket.socket, cut: tuple[str, str, str] | None) -> None:
        """The server's answer to the client; with ``cut`` (how, KIND, session), up to the cut only."""
        seen = b""
        while chunk := upstream.recv(65536):
            if cut is None:
                client.sendall(chunk)
                continue
            seen += chunk
            at = self._cut_at(seen, cut[0], cut[1])
            if at is None:
                continue  # held until the cut's event has come whole: what goes out is decided by the cut alone
            client.sendall(seen[:at])
            with self.lock:
                self.cuts[cut[2]] += 1
            client.shutdown(socket.SHUT_RDWR)
            return
        if seen:
            client.sendall(seen)  # the stream ended without the cut's event: passed on whole

    @staticmethod
    def _cut_at(seen: bytes, how: str, kind: str) -> int | None:
        if kind == "head":
            end = seen.find(b"\r\n\r\n")
            return None if end < 0 else end + 4
        start = seen.find(f"event: {kind}\n".encode())
        if start < 0:
            return None
        end = seen.find(b"\n\n", start)
        if end < 0 or len(seen) < end + 4:
            return None  # the event, and the chunk's CRLF after it, not all here yet
        if how == "half":
            data = seen.find(b"data: ", start)
            return data + (end - data) // 2
        return end + 2 + (2 if seen[end + 2:end + 4] == b"\r\n" else 0)
