"""Talking to an inference server over HTTP: JSON requests and server-sent-event streams.

The standard library only (``socket``, ``ssl``, ``http.client``'s response parser), so the
desktop build needs nothing more. Every failure is a :class:`BackendError` that names the server
(its profile name and address): :class:`ServerUnavailable` when the server cannot be reached,
stopped answering or ran past a limit of time (a fleet run moves the conversation to another
server), :class:`ServerRefused` for an HTTP error status, and a plain ``BackendError`` for an
answer that is malformed or too large.

Limits. Every request, plain or streamed, is bounded: the wait for each byte (``timeout``,
:data:`READ_TIMEOUT`), the whole request from connecting to its last byte (``deadline``,
:data:`REQUEST_DEADLINE`; a server that drips a byte a second or sends ``: ping`` forever ends
there), a body's size (:data:`MAX_BODY_BYTES`) and one event's size (:data:`MAX_EVENT_BYTES`).
Each is a constructor argument of :class:`ServerConnection` defaulting to the constant.

Stop. This module opens and keeps each request's socket itself. One watchdog thread looks at every
running request's cancel event and deadline every :data:`CANCEL_POLL_SECONDS` and shuts the socket
down from outside, so a read blocked in any state (connecting, sending, waiting for headers,
reading a body, streaming) returns at once and the server sees the client leave (llama.cpp's
server then frees the slot). A request is cancelled by the ``cancel`` it is given, or else by the
one of the innermost :func:`cancel_scope` around the call.

Sessions. A request made inside a :func:`session_scope` (a node's call for a conversation with an
id, ``GenerationRequest.session_id``) carries the ``X-Session-ID`` header, and the backends put the
same key in the generation request's ``user`` field (OpenAI's field for who is asking), so a router
with session affinity in front of several servers keeps a conversation on the one caching its
prompts. Concurrency. Nothing here is locked across a request: a plain request uses its thread's
kept-alive socket and a stream a socket of its own, so calls from several threads (several
conversations) go out at once and the server batches them in its slots.

Text from a server quoted in an error goes through :meth:`ServerConnection.quoted`: the API key and
any password of the address are redacted, control characters escaped (:func:`printable`), the
length cut. Addresses in messages go through :func:`display_url` (no ``user:password@``).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import errno
import http.client
import json
import math
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from runtime.backends.base import (
    CallCancelled,
    GenerationRequest,
    GenerationResult,
    NodeSession,
    TokenCallback,
)
from runtime.problems import BackendError

# --- limits (docs/limits.md lists them) ----------------------------------------------------------
READ_TIMEOUT = 120.0  # s: the longest wait for the server's next byte (a long prompt may take a while to read)
REQUEST_DEADLINE = 600.0  # s: one whole request, connecting to last byte (a whole streamed reply)
MAX_BODY_BYTES = 32 * 1024 * 1024  # one plain answer's body (/props, /tokenize, /v1/models, ...)
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one server-sent event, all its data: lines together
CONNECT_TIMEOUT = 5.0  # s: the longest wait for the server to accept the connection
CANCEL_POLL_SECONDS = 0.02  # how often the watchdog looks at cancel events and deadlines (Stop is this quick)
MAX_ERROR_BODY = 4000  # characters of an error answer quoted in a message
ERROR_BODY_BYTES = 64 * 1024  # bytes of an error answer read (the rest is not needed to say what went wrong)
SESSION_HEADER = "X-Session-ID"  # the conversation's key on every request of its calls (session affinity)
MAX_SESSION_KEY_CHARS = 256  # a session key as sent (parley serve's ids are at most 64 of [A-Za-z0-9_.-])


class ServerUnavailable(BackendError):
    """The server could not be reached, timed out, or dropped the connection. Another server may do."""


class ServerRefused(BackendError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class Cancelled(CallCancelled):
    """The caller's cancel event was set while the request ran."""


# --- what is safe to show --------------------------------------------------------------------------

def display_url(url: str) -> str:
    """``url`` as messages show it: without ``user:password@``. Text that is not an address (a
    profile's name) comes back unchanged."""
    if "://" not in url or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://(address hidden: it is not valid)"
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


_BIDI_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (ANSI escapes, carriage returns,
    newlines, bidirectional overrides) written as ``\\x1b``, ``\\n``, ``\\u202e``."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code < 0xA0 or ch in _BIDI_CONTROLS:
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


# --- cancel scopes and the watchdog ------------------------------------------------------------------

_SCOPE: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("parley_http_cancel", default=None)


@contextlib.contextmanager
def cancel_scope(cancel: threading.Event | None) -> Iterator[None]:
    """Every request made inside (on any :class:`ServerConnection`, in this thread) that is given no
    ``cancel`` of its own stops with :class:`Cancelled` once ``cancel`` is set. A backend wraps a
    node's whole call in it, so the template, tokenizer and model-list requests before the
    generation stop on Stop as the stream does."""
    token = _SCOPE.set(cancel)
    try:
        yield
    finally:
        _SCOPE.reset(token)


_SESSION: contextvars.ContextVar[str] = contextvars.ContextVar("parley_http_session", default="")


def session_key(session_id: str) -> str:
    """``session_id`` as a header and the ``user`` field carry it: unchanged when it is letters,
    digits, ``_``, ``.``, ``-`` and ``~`` (every id ``parley serve`` gives), else percent-encoded (the same
    id always the same key, and never a CR, LF or other byte that could end the header). A
    BackendError when even that is longer than :data:`MAX_SESSION_KEY_CHARS`."""
    key = quote(session_id, safe="")
    if len(key) > MAX_SESSION_KEY_CHARS:
        raise BackendError(f"the session id {printable(session_id[:40])!r}... is too long to send to a server "
                           f"({len(key)} characters as sent; at most {MAX_SESSION_KEY_CHARS})")
    return key


@contextlib.contextmanager
def session_scope(session_id: str) -> Iterator[None]:
    """Every request made inside (in this thread) carries ``X-Session-ID`` with ``session_id``'s
    :func:`session_key`; "" sends none. :func:`current_session_key` gives the key for a body."""
    token = _SESSION.set(session_key(session_id) if session_id else "")
    try:
        yield
    finally:
        _SESSION.reset(token)


def current_session_key() -> str:
    """The key of the innermost :func:`session_scope` ("" outside one, or for a call without a session)."""
    return _SESSION.get()


class _Watch:
    """One running request: its socket, cancel event and deadline. ``fired`` says why the
    watchdog shut the socket ("cancelled" or "deadline"); once ``finish`` ran it touches nothing."""

    __slots__ = ("cancel", "deadline", "done", "fired", "lock", "sock")

    def __init__(self, cancel: threading.Event | None, deadline: float) -> None:
        self.cancel = cancel
        self.deadline = deadline
        self.sock: socket.socket | None = None
        self.lock = threading.Lock()
        self.done = False
        self.fired = ""

    def attach(self, sock: socket.socket) -> None:
        with self.lock:
            self.sock = sock
            if self.fired:
                _shut(sock)

    def look(self, now: float) -> None:
        if self.fired or self.done:
            return
        if self.cancel is not None and self.cancel.is_set():
            self._fire("cancelled")
        elif now >= self.deadline:
            self._fire("deadline")

    def _fire(self, why: str) -> None:
        with self.lock:
            if self.done or self.fired:
                return
            self.fired = why
            if self.sock is not None:
                _shut(self.sock)

    def detach(self, sock: socket.socket) -> None:
        """``sock`` is closed or kept for a later request: never shut it for this one."""
        with self.lock:
            if self.sock is sock:
                self.sock = None

    def finish(self) -> None:
        """The request is over: from now on its socket may be closed or reused, so never shut it."""
        with self.lock:
            self.done = True


def _shut(sock: socket.socket) -> None:
    try:
        # socket.socket's own shutdown, also for an SSLSocket (whose shutdown drops its TLS state
        # under the reading thread's feet): the reader sees the end of the stream at once.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Watchdog:
    """One daemon thread for every running request; it ends after a second with none."""

    IDLE_SECONDS = 1.0

    def __init__(self) -> None:
        self._watches: set[_Watch] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, watch: _Watch) -> None:
        with self._cond:
            self._watches.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="parley-http-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def remove(self, watch: _Watch) -> None:
        watch.finish()
        with self._cond:
            self._watches.discard(watch)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._watches:
                    self._cond.wait(self.IDLE_SECONDS)
                    if not self._watches:
                        self._thread = None
                        return
                watches = list(self._watches)
            now = time.monotonic()
            for watch in watches:
                watch.look(now)
            time.sleep(CANCEL_POLL_SECONDS)


_WATCHDOG = _Watchdog()


# --- the connection ------------------------------------------------------------------------------------

class ServerConnection:
    """One inference server at ``url`` (http or https). ``name`` is how errors name it (a profile's
    name, or the address). ``api_key`` goes in an ``Authorization: Bearer`` header (a
    ``user:password@`` in the address, in a Basic one when there is no key). ``timeout`` is the
    longest wait for the server's next byte, ``deadline`` for a whole request (default: the larger
    of :data:`REQUEST_DEADLINE` and ``timeout``); ``max_body_bytes`` and ``max_event_bytes`` cap an
    answer's size."""

    def __init__(self, url: str, name: str = "", *, api_key: str = "", timeout: float = READ_TIMEOUT,
                 shown_url: str = "", deadline: float | None = None, max_body_bytes: int = MAX_BODY_BYTES,
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        raw = url.strip()
        try:
            parts = urlsplit(raw)
            port = parts.port
        except ValueError:
            raise BackendError(f"{printable(display_url(raw))!r}: the port is not a number from 0 to 65535") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BackendError(f"{printable(display_url(raw))!r} is not a server address; write it as http://HOST:PORT")
        hostport = parts.netloc.rpartition("@")[2]
        self.url = f"{parts.scheme}://{hostport}{parts.path.rstrip('/')}"
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self._host_header = hostport
        self.base_path = parts.path.rstrip("/")
        self.name = printable(display_url(name)) if name else self.url
        self.shown_url = display_url(shown_url) if shown_url else self.url  # an API's root, not its /v1
        self.api_key = api_key
        self._auth = f"Bearer {api_key}" if api_key else ""
        basic = ""
        if not api_key and parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            basic = base64.b64encode(pair).decode("ascii")
            self._auth = f"Basic {basic}"
        # what a server may echo back into an error, longest first (a key may contain the password)
        self._secrets = sorted({s for s in (api_key, parts.password or "", unquote(parts.password or ""), basic)
                                if s}, key=len, reverse=True)
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else max(REQUEST_DEADLINE, timeout)
        self.max_body_bytes = max_body_bytes
        self.max_event_bytes = max_event_bytes
        self._local = threading.local()  # one kept-alive socket per thread

    @property
    def label(self) -> str:
        return self.name if self.name in (self.url, self.shown_url) else f"{self.name} ({self.shown_url})"

    # --- quoting and parsing what the server said ---------------------------------------------------

    def quoted(self, data: bytes | str, limit: int = MAX_ERROR_BODY) -> str:
        """Server text as an error message quotes it: the API key (and the address's password)
        redacted, control characters escaped, at most ``limit`` characters, in quotes."""
        return repr(self.redacted(data, limit)) if data else "(nothing)"

    def redacted(self, data: bytes | str, limit: int = MAX_ERROR_BODY) -> str:
        """Like :meth:`quoted`, without the quotes (for a server's own error message)."""
        window = limit + max((len(s) for s in self._secrets), default=0)  # a key cut at the end is still seen
        text = data[:window * 4].decode("utf-8", errors="replace") if isinstance(data, bytes) else data[:window]
        text = text[:window]
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        text = printable(text.strip())
        return text if len(text) <= limit else text[:limit] + "…"

    def parse_json(self, data: bytes, path: str, event: bool = False) -> Any:
        """``data`` (a body, or an ``event``'s data) as JSON, or a BackendError naming the server and
        what was wrong (never a RecursionError from JSON nested thousands deep)."""
        try:
            return json.loads(data)
        except RecursionError:
            what = "an event with JSON" if event else "JSON"
            raise BackendError(f"{self.label}: {path} sent {what} nested too deeply to read") from None
        except (ValueError, UnicodeDecodeError, OverflowError):
            what = "sent a malformed event" if event else "answered with something that is not JSON"
            raise BackendError(f"{self.label}: {path} {what}: {self.quoted(data)}") from None

    # --- plain requests --------------------------------------------------------------------------------

    def get_json(self, path: str, cancel: threading.Event | None = None) -> Any:
        return self._json("GET", path, None, cancel)

    def post_json(self, path: str, body: dict[str, Any], cancel: threading.Event | None = None) -> Any:
        return self._json("POST", path, body, cancel)

    def _json(self, method: str, path: str, body: dict[str, Any] | None, cancel: threading.Event | None) -> Any:
        cancel = cancel if cancel is not None else _SCOPE.get()
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        watch = _Watch(cancel, time.monotonic() + self.deadline)
        _WATCHDOG.add(watch)
        try:
            # A kept-alive socket the server closed meanwhile fails at once: retry once on a new one.
            for attempt in (0, 1):
                sock = getattr(self._local, "sock", None)
                self._local.sock = None
                reused = sock is not None
                keep = False
                try:
                    if sock is None:
                        sock = self._open(path, watch)
                    else:
                        watch.attach(sock)
                    try:
                        response = self._exchange(sock, method, path, body, "application/json")
                    except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as exc:
                        self._check(watch, path)
                        if reused and attempt == 0 and not isinstance(exc, ConnectionRefusedError):
                            continue
                        raise self._unavailable(path, exc) from None
                    except (OSError, http.client.HTTPException) as exc:
                        self._check(watch, path)
                        raise self._unavailable(path, exc) from None
                    if response.status >= 400:
                        raise self._refused(path, response.status, self._read_error(response, watch))
                    data = self._read_body(response, watch, path)
                    keep = not response.will_close
                finally:
                    if sock is not None:
                        watch.detach(sock)  # before the socket outlives the request, or is closed
                        if keep:
                            self._local.sock = sock
                        else:
                            sock.close()
                return self.parse_json(data, path)
            raise AssertionError("unreachable")
        finally:
            _WATCHDOG.remove(watch)

    # --- streams ---------------------------------------------------------------------------------------

    def stream(self, path: str, body: dict[str, Any], cancel: threading.Event | None = None) -> Iterator[Any]:
        """POST ``body`` and yield each server-sent event's JSON (``data: [DONE]`` ends it). Raises
        :class:`Cancelled` once ``cancel`` (or the :func:`cancel_scope`'s) is set, a BackendError on
        anything else, past the deadline too. Closing the generator early closes the connection."""
        cancel = cancel if cancel is not None else _SCOPE.get()
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        watch = _Watch(cancel, time.monotonic() + self.deadline)
        _WATCHDOG.add(watch)
        sock = None
        try:
            sock = self._open(path, watch)  # never kept: a stream that is cut leaves it unusable
            try:
                response = self._exchange(sock, "POST", path, body, "text/event-stream")
            except (OSError, http.client.HTTPException) as exc:
                self._check(watch, path)
                raise self._unavailable(path, exc) from None
            if response.status >= 400:
                raise self._refused(path, response.status, self._read_error(response, watch))
            yield from self._events(path, response, watch)
        finally:
            _WATCHDOG.remove(watch)  # finishes the watch before the socket is closed
            if sock is not None:
                sock.close()

    def _events(self, path: str, response: http.client.HTTPResponse, watch: _Watch) -> Iterator[Any]:
        data_lines: list[bytes] = []
        size = 0
        limit = self.max_event_bytes
        while True:
            try:
                line = response.readline(limit + 1)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self._check(watch, path)
                raise self._unavailable(path, exc, streaming=True) from None
            self._check(watch, path)  # a shut socket reads as the end of the stream
            if not line:
                if data_lines or response.length:  # an event without its closing blank line: cut off
                    raise self._truncated(path)
                return
            size += len(line)
            if len(line) > limit or (data_lines and size > limit):
                raise BackendError(f"{self.label}: {path} sent an event larger than {_size(limit)} "
                                   "(a server answer this module does not read)")
            line = line.rstrip(b"\r\n")
            if line.startswith(b"data:"):
                data_lines.append(line[5:].removeprefix(b" "))
                continue
            if line.startswith(b"error:"):  # llama.cpp's server names an error event so
                data_lines.append(line[6:].removeprefix(b" "))
                continue
            if line or not data_lines:
                if not data_lines:
                    size = 0
                continue  # comments (": ping"), event names, ids, blank lines between events
            payload = b"\n".join(data_lines)
            data_lines, size = [], 0
            if payload.strip() == b"[DONE]":
                return
            event = self.parse_json(payload, path, event=True)
            if isinstance(event, dict) and "error" in event:
                raise self._event_error(path, event["error"])
            yield event

    def _truncated(self, path: str) -> BackendError:
        return ServerUnavailable(f"{self.label}: the answer from {path} ended before it was complete "
                                 "(the connection was cut or the server stopped)")

    def _event_error(self, path: str, error: Any) -> BackendError:
        message = error.get("message", error) if isinstance(error, dict) else error
        return BackendError(f"{self.label}: {path} reported an error: {self.redacted(str(message))}")

    # --- plumbing --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close this thread's kept-alive connection (others close when their threads end)."""
        sock = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None:
            sock.close()

    def _open(self, path: str, watch: _Watch) -> socket.socket:
        """A connected socket (TLS for https), given to ``watch`` from its creation on: connecting
        stops at once on Stop or at the deadline, too."""
        try:
            addresses = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise self._unavailable(path, exc) from None
        last: OSError | None = None
        for family, kind, proto, _name, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                watch.attach(sock)
                self._connect(sock, address, watch, path)
                sock.settimeout(self.timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.scheme == "https":
                    sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host,
                                                                    do_handshake_on_connect=False)
                    watch.attach(sock)  # the handshake stops on Stop, too
                    sock.do_handshake()
                return sock
            except OSError as exc:
                sock.close()
                self._check(watch, path)
                last = exc
            except BaseException:
                sock.close()
                raise
        raise self._unavailable(path, last or OSError("no address to connect to")) from None

    def _connect(self, sock: socket.socket, address: Any, watch: _Watch, path: str) -> None:
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            raise OSError(code, os.strerror(code))  # ConnectionRefusedError for ECONNREFUSED
        give_up = min(time.monotonic() + CONNECT_TIMEOUT, watch.deadline)
        while code:
            self._check(watch, path)
            left = give_up - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the server did not accept the connection within {CONNECT_TIMEOUT:g} s")
            _, writable, _ = select.select([], [sock], [], min(left, CANCEL_POLL_SECONDS))
            if writable:
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise OSError(code, os.strerror(code))
                break
        sock.setblocking(True)

    def _exchange(self, sock: socket.socket, method: str, path: str, body: dict[str, Any] | None,
                  accept: str) -> http.client.HTTPResponse:
        """Send the request, read the status and headers."""
        head = [f"{method} {self.base_path + path} HTTP/1.1", f"Host: {self._host_header}", f"Accept: {accept}",
                "Accept-Encoding: identity", "User-Agent: parley-studio"]
        if self._auth:
            head.append(f"Authorization: {self._auth}")
        session = _SESSION.get()
        if session:
            head.append(f"{SESSION_HEADER}: {session}")
        payload = b""
        if body is not None:
            payload = json.dumps(body, ensure_ascii=True).encode("ascii")  # lone surrogates survive as \ud800
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        elif method == "POST":
            head.append("Content-Length: 0")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response

    def _read_body(self, response: http.client.HTTPResponse, watch: _Watch, path: str) -> bytes:
        limit = self.max_body_bytes
        if response.length is not None and response.length > limit:
            raise self._too_large(path, response.length)
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = response.read1(64 * 1024)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self._check(watch, path)
                raise self._unavailable(path, exc, streaming=True) from None
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise self._too_large(path, 0)
            chunks.append(chunk)
        self._check(watch, path)  # a shut socket reads as the end of the body
        if response.length:
            raise self._truncated(path)
        return b"".join(chunks)

    def _read_error(self, response: http.client.HTTPResponse, watch: _Watch) -> bytes:
        """The start of an error answer (what it says is enough; the connection is not kept)."""
        data = b""
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
            while len(data) < ERROR_BODY_BYTES:
                chunk = response.read1(ERROR_BODY_BYTES - len(data))
                if not chunk:
                    break
                data += chunk
        return data

    def _too_large(self, path: str, length: int) -> BackendError:
        said = f" (it says {_size(length)})" if length else ""
        return BackendError(f"{self.label}: {path} answered with more than {_size(self.max_body_bytes)}{said}, "
                            "more than any answer this backend reads")

    def _check(self, watch: _Watch, path: str) -> None:
        """Raise what the watchdog did to the request: Cancelled, or the deadline's error."""
        if watch.fired == "cancelled" or (not watch.fired and watch.cancel is not None and watch.cancel.is_set()):
            raise Cancelled()
        if watch.fired == "deadline" or time.monotonic() >= watch.deadline:
            raise ServerUnavailable(f"{self.label}: {path}: no complete answer within {self.deadline:g} s "
                                    "(the longest a request may take)")

    def _unavailable(self, path: str, exc: BaseException, streaming: bool = False) -> ServerUnavailable:
        if isinstance(exc, ConnectionRefusedError):
            why = "the connection was refused (is the server running?)"
        elif isinstance(exc, (TimeoutError, socket.timeout)):
            why = f"no answer within {self.timeout:g} s"
            if "accept the connection" in str(exc):
                why = printable(str(exc))
        elif isinstance(exc, socket.gaierror):
            why = f"the host name {printable(self.host)!r} is not known"
        elif isinstance(exc, http.client.LineTooLong):
            why = "the server sent a header line too long to read"
        elif streaming or isinstance(exc, (ConnectionError, http.client.HTTPException)):
            text = self.redacted(str(exc), 200)
            why = f"the connection was cut ({type(exc).__name__}: {text})" if text else "the connection was cut"
        else:
            why = f"{type(exc).__name__}: {self.redacted(str(exc), 200)}"
        return ServerUnavailable(f"{self.label}: {path}: {why}")

    def _refused(self, path: str, status: int, data: bytes) -> ServerRefused:
        detail = self._error_text(data)
        reason = http.client.responses.get(status, "")
        hint = ""
        if status in (401, 403):
            hint = "; check the API key (the environment variable the backend profile names)"
        elif status == 404:
            hint = "; is this the right kind of server for the profile?"
        return ServerRefused(f"{self.label}: {path} answered HTTP {status} {reason}: {detail}{hint}", status, detail)

    def _error_text(self, data: bytes) -> str:
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError, RecursionError, OverflowError):
            return self.quoted(data)
        error = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(error, dict):
            error = error.get("message") or error.get("detail") or error
        if isinstance(body, dict) and "detail" in body and error is body:
            error = body["detail"]
        return self.redacted(error if isinstance(error, str) else _short_json(error))


def _short_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)[:MAX_ERROR_BODY * 2]
    except (ValueError, TypeError, RecursionError):
        return "(an error the server did not describe in words)"


def _size(n: int) -> str:
    if n >= 1024 * 1024:
        mb = n / (1024 * 1024)
        return f"{mb:g} MB" if math.isclose(mb, round(mb)) else f"{mb:.1f} MB"
    if n >= 1024:
        return f"{n // 1024} KB"
    return f"{n} bytes"


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


class ServerSession(NodeSession):
    """A node's context on a server: ``generate`` runs the subclass's ``_generate`` in the cancel's
    scope, so Stop ends every request of the call (the template, the tokenizer, the model list, the
    stream), and a call stopped before the reply began is a cancelled result. It runs in the
    request's :func:`session_scope` too: every request of the call names the conversation."""

    def generate(self, request: GenerationRequest, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        started = time.perf_counter()
        with cancel_scope(cancel), session_scope(request.session_id):
            try:
                return self._generate(request, on_token, cancel)
            except Cancelled:  # before the reply began
                return GenerationResult(text="", prompt_tokens=0, reused=0, evaluated=0, generated=0,
                                        cancelled=True, finish_reason="cancelled",
                                        prompt_ms=(time.perf_counter() - started) * 1000)

    def _generate(self, request: GenerationRequest, on_token: TokenCallback | None,
                  cancel: threading.Event | None) -> GenerationResult:
        raise NotImplementedError
