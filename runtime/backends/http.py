"""Talking to an inference server over HTTP: JSON requests and server-sent-event streams.

The standard library's ``http.client`` only, so the desktop build needs nothing more. Every
failure is a :class:`BackendError` that names the server (its profile name and address):
:class:`ServerUnavailable` when the server cannot be reached or stopped answering (a fleet run
moves the conversation to another server), :class:`ServerRefused` for an HTTP error status,
and a plain ``BackendError`` for a malformed or truncated answer.

Stop: a streaming request watches its ``cancel`` event and, once it is set, shuts the socket
down, so a read blocked on a slow server returns at once and the server sees the client leave
(llama.cpp's server then frees the slot).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from runtime.problems import BackendError

# How often a streaming request looks at its cancel event (Stop closes the request within this).
CANCEL_POLL_SECONDS = 0.02
CONNECT_TIMEOUT = 5.0
MAX_ERROR_BODY = 4000  # characters of an error answer quoted in the message
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one SSE line longer than this is not a server we understand


class ServerUnavailable(BackendError):
    """The server could not be reached, timed out, or dropped the connection. Another server may do."""


class ServerRefused(BackendError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class Cancelled(Exception):
    """The caller's cancel event was set while the request ran."""


class ServerConnection:
    """One inference server at ``url`` (http or https). ``name`` is how errors name it (a profile's
    name, or the address). ``api_key`` goes in an ``Authorization: Bearer`` header. ``timeout`` is
    the longest wait for the server's next byte (a long prompt may take a while to read)."""

    def __init__(self, url: str, name: str = "", *, api_key: str = "", timeout: float = 120.0,
                 shown_url: str = "") -> None:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BackendError(f"{url!r} is not a server address; write it as http://HOST:PORT")
        try:
            port = parts.port
        except ValueError:
            raise BackendError(f"{url!r}: the port is not a number from 0 to 65535") from None
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port
        self.base_path = parts.path.rstrip("/")
        self.name = name or self.url
        self.shown_url = shown_url or self.url  # the address errors show (an API's root, not its /v1)
        self.api_key = api_key
        self.timeout = timeout
        self._local = threading.local()  # one kept-alive connection per thread

    @property
    def label(self) -> str:
        return self.name if self.name in (self.url, self.shown_url) else f"{self.name} ({self.shown_url})"

    # --- plain requests ---------------------------------------------------------------------

    def get_json(self, path: str) -> Any:
        return self._json("GET", path, None)

    def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return self._json("POST", path, body)

    def _json(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        # A kept-alive connection the server closed meanwhile fails at once: retry once on a new one.
        for attempt in (0, 1):
            conn = self._connection()
            try:
                response = self._send(conn, method, path, body)
                data = response.read()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as exc:
                self._drop()
                if attempt == 0 and not isinstance(exc, ConnectionRefusedError):
                    continue
                raise self._unavailable(path, exc) from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise self._unavailable(path, exc) from None
            if response.status >= 400:
                raise self._refused(path, response.status, data)
            try:
                return json.loads(data)
            except (ValueError, UnicodeDecodeError):
                raise BackendError(f"{self.label}: {path} answered with something that is not JSON: "
                                   f"{_quote(data)}") from None
        raise AssertionError("unreachable")

    # --- streams ----------------------------------------------------------------------------

    def stream(self, path: str, body: dict[str, Any], cancel: threading.Event | None = None) -> Iterator[Any]:
        """POST ``body`` and yield each server-sent event's JSON (``data: [DONE]`` ends it). Raises
        :class:`Cancelled` once ``cancel`` is set (the connection is closed), a BackendError on
        anything else. Closing the generator early closes the connection."""
        conn = self._new_connection()  # never kept: a stream that is cut leaves it unusable
        done = threading.Event()
        watcher = None
        try:
            try:
                conn.connect()
                if cancel is not None:  # from now on, Stop shuts the socket (also while waiting for headers)
                    watcher = threading.Thread(target=_close_on_cancel, args=(conn, cancel, done),
                                               name="parley-http-cancel", daemon=True)
                    watcher.start()
                response = self._send(conn, "POST", path, body, accept="text/event-stream")
            except (OSError, http.client.HTTPException) as exc:
                if cancel is not None and cancel.is_set():
                    raise Cancelled() from None
                raise self._unavailable(path, exc) from None
            if response.status >= 400:
                raise self._refused(path, response.status, response.read())
            yield from self._events(path, response, cancel)
        finally:
            done.set()
            if watcher is not None:
                watcher.join()
            conn.close()

    def _events(self, path: str, response: http.client.HTTPResponse,
                cancel: threading.Event | None) -> Iterator[Any]:
        data_lines: list[bytes] = []
        while True:
            try:
                line = response.readline(MAX_EVENT_BYTES + 1)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                if cancel is not None and cancel.is_set():
                    raise Cancelled() from None
                raise self._unavailable(path, exc, streaming=True) from None
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            if not line:
                if data_lines:  # an event without its closing blank line: cut off
                    raise self._truncated(path)
                return
            if len(line) > MAX_EVENT_BYTES:
                raise BackendError(f"{self.label}: {path} sent an event longer than "
                                   f"{MAX_EVENT_BYTES // (1024 * 1024)} MB")
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data_lines.append(line[5:].removeprefix(b" "))
                continue
            if line.startswith(b"error:"):  # llama.cpp's server names an error event so
                data_lines.append(line[6:].removeprefix(b" "))
                continue
            if line or not data_lines:
                continue  # comments (": ping"), event names, ids, blank lines between events
            payload = b"\n".join(data_lines)
            data_lines = []
            if payload.strip() == b"[DONE]":
                return
            try:
                event = json.loads(payload)
            except (ValueError, UnicodeDecodeError):
                raise BackendError(f"{self.label}: {path} sent a malformed event: {_quote(payload)}") from None
            if isinstance(event, dict) and "error" in event:
                raise self._event_error(path, event["error"])
            yield event

    def _truncated(self, path: str) -> BackendError:
        return ServerUnavailable(f"{self.label}: the answer from {path} ended before it was complete "
                                 "(the connection was cut or the server stopped)")

    def _event_error(self, path: str, error: Any) -> BackendError:
        message = error.get("message", error) if isinstance(error, dict) else error
        return BackendError(f"{self.label}: {path} reported an error: {str(message)[:MAX_ERROR_BODY]}")

    # --- plumbing ---------------------------------------------------------------------------

    def _new_connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=CONNECT_TIMEOUT,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT)

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._new_connection()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Close this thread's kept-alive connection (others close when their threads end)."""
        self._drop()

    def _send(self, conn: http.client.HTTPConnection, method: str, path: str, body: dict[str, Any] | None,
              accept: str = "application/json") -> http.client.HTTPResponse:
        headers = {"Accept": accept}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        payload = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            payload = json.dumps(body, ensure_ascii=True).encode("ascii")  # lone surrogates survive as \ud800
        if conn.sock is None:
            conn.connect()
        conn.sock.settimeout(self.timeout)
        conn.request(method, self.base_path + path, body=payload, headers=headers)
        return conn.getresponse()

    def _unavailable(self, path: str, exc: BaseException, streaming: bool = False) -> ServerUnavailable:
        if isinstance(exc, ConnectionRefusedError):
            why = "the connection was refused (is the server running?)"
        elif isinstance(exc, (TimeoutError, socket.timeout)):
            why = f"no answer within {self.timeout:g} s"
        elif isinstance(exc, socket.gaierror):
            why = f"the host name {self.host!r} is not known"
        elif streaming or isinstance(exc, (ConnectionError, http.client.HTTPException)):
            why = f"the connection was cut ({type(exc).__name__}: {exc})" if str(exc) else "the connection was cut"
        else:
            why = f"{type(exc).__name__}: {exc}"
        return ServerUnavailable(f"{self.label}: {path}: {why}")

    def _refused(self, path: str, status: int, data: bytes) -> ServerRefused:
        detail = _error_text(data)
        reason = http.client.responses.get(status, "")
        hint = ""
        if status in (401, 403):
            hint = "; check the API key (the environment variable the backend profile names)"
        elif status == 404:
            hint = "; is this the right kind of server for the profile?"
        return ServerRefused(f"{self.label}: {path} answered HTTP {status} {reason}: {detail}{hint}", status, detail)


def _close_on_cancel(conn: http.client.HTTPConnection, cancel: threading.Event, done: threading.Event) -> None:
    while not done.is_set():
        if cancel.wait(CANCEL_POLL_SECONDS):
            sock = conn.sock
            if sock is not None and not done.is_set():
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return


def _error_text(data: bytes) -> str:
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return _quote(data)
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        error = error.get("message") or error.get("detail") or error
    if isinstance(body, dict) and "detail" in body and error is body:
        error = body["detail"]
    return str(error)[:MAX_ERROR_BODY]


def _quote(data: bytes) -> str:
    text = data[:MAX_ERROR_BODY].decode("utf-8", errors="replace").strip()
    return repr(text) if text else "(nothing)"


def wait_until_ready(connection: ServerConnection, path: str, seconds: float) -> None:
    """Poll ``path`` until the server answers it (a model may still be loading); raise the last error."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            connection.get_json(path)
            return
        except BackendError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
