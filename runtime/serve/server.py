"""Running the app on uvicorn: ``parley serve`` in the foreground, ``running_server`` in a thread
(tests, benchmarks, an editor that serves its own agents)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from runtime.backends.base import Backend
from runtime.crashes import CrashWatch
from runtime.serve.app import BODY_SECONDS, MAX_REQUESTS, Guard, create_app
from runtime.serve.npcs import Limits, NPCs
from runtime.serve.protocol import PreviousCrash
from runtime.serve.store import SessionStore

log = logging.getLogger("parley.serve")

TOKEN_ENV = "PARLEY_SERVE_TOKEN"
KEEP_ALIVE_SECONDS = 5  # an idle keep-alive connection is closed after this
HEADER_SECONDS = 30.0  # for a request's header to arrive, from the connection or the previous answer


class ServeConfigError(ValueError):
    """A setting ``parley serve`` refuses before it binds anything."""


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    asset_dirs: list[Path] = field(default_factory=list)
    token: str | None = field(default=None, repr=False)  # never shown: a config may be printed or logged
    limits: Limits = field(default_factory=Limits)
    workers: int = 8  # turns that run at once (the rest wait); one model's calls run one at a time anyway
    header_seconds: float = HEADER_SECONDS
    body_seconds: float = BODY_SECONDS
    max_requests: int = MAX_REQUESTS
    token_env: str = TOKEN_ENV  # the environment variable the token came from (named in errors)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_config(config: ServeConfig) -> None:
    if not config.asset_dirs:
        raise ServeConfigError("give at least one --assets folder: the server loads assets from those only")
    for folder in config.asset_dirs:
        if not folder.is_dir():
            raise ServeConfigError(f"--assets {folder}: not a folder")
    if not is_loopback(config.host) and not config.token:
        raise ServeConfigError(f"--host {config.host} is reachable from other computers: set a long random token "
                               f"in the environment variable {config.token_env} (named by --token-env) first")
    if config.token is not None and len(config.token) < 16:
        raise ServeConfigError("the token is shorter than 16 characters; use a long random one")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP (and the
    # protocol sets it again on each connection, whatever socket it came from)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Send each write at once. uvicorn writes an answer's header and its body apart; with Nagle's
    algorithm on, the body waits for the client's delayed ACK of the header, about 40 ms on every
    plain request of a kept-alive connection."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HeaderDeadline(H11Protocol):
    """uvicorn closes a kept-alive connection left idle, but never one that has not yet sent a whole
    request header: a client that connects and sends nothing (or a byte at a time) would hold its
    connection for ever, and enough of them would use up the server's files. This closes a
    connection whose header has not arrived ``header_seconds`` after it opened or after its last
    answer; a request that is being answered (a turn's stream) is never cut."""

    header_seconds = HEADER_SECONDS
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        no_delay(transport)
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's header arrived
            self._disarm()

    def on_response_complete(self) -> None:
        self._arm()  # first: the next request, pipelined, may start (and disarm) within
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_seconds, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def make_server(config: ServeConfig, backend: Backend, crash_watch: CrashWatch | None = None,
                previous_crash: PreviousCrash | None = None,
                store: SessionStore | None = None) -> tuple[uvicorn.Server, NPCs]:
    """The server and its sessions; ``crash_watch`` notes each turn in flight (``runtime.crashes``), and
    ``GET /v1/health`` tells ``previous_crash``. The sessions ``store`` holds are served again."""
    check_config(config)
    npcs = NPCs(backend, config.asset_dirs, config.limits, workers=config.workers, crash_watch=crash_watch,
                store=store)
    npcs.restore()
    app = create_app(npcs, config.token, previous_crash)
    if isinstance(app, Guard):
        app.max_requests, app.body_seconds = config.max_requests, config.body_seconds
        app.local_only = config.token is None and is_loopback(config.host)
    protocol = type("HeaderDeadline", (_HeaderDeadline,), {"header_seconds": config.header_seconds})
    server = uvicorn.Server(uvicorn.Config(
        # no limit_concurrency: uvicorn's counts idle connections and answers plain text; the guard
        # limits requests being answered, and the header deadline idle connections
        app, http=protocol, log_level="warning", access_log=False, lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_SECONDS, h11_max_incomplete_event_size=64 * 1024, server_header=False,
    ))
    return server, npcs


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


@contextlib.contextmanager
def running_server(backend: Backend, asset_dirs: list[Path] | list[str], *, token: str | None = None,
                   limits: Limits | None = None, host: str = "127.0.0.1", port: int = 0,
                   workers: int = 8, start_seconds: float = 30.0, header_seconds: float = HEADER_SECONDS,
                   body_seconds: float = BODY_SECONDS, max_requests: int = MAX_REQUESTS,
                   store: SessionStore | None = None) -> Iterator[str]:
    """Serve in a thread of this process; yields the base URL once it accepts connections. The
    backend stays the caller's (not closed here)."""
    config = ServeConfig(host, port, [Path(d) for d in asset_dirs], token, limits or Limits(), workers,
                         header_seconds, body_seconds, max_requests)
    server, npcs = make_server(config, backend, store=store)
    sock = bind(host, port)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="parley-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_seconds
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("parley serve did not start")
        time.sleep(0.01)  # polling uvicorn's own flag: it has no event to wait on
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        npcs.close()
        thread.join(30)
        sock.close()


def serve_forever(config: ServeConfig, backend: Backend, announce=print, crash_watch: CrashWatch | None = None,
                  previous_crash: PreviousCrash | None = None, store: SessionStore | None = None) -> None:
    server, npcs = make_server(config, backend, crash_watch, previous_crash, store)
    sock = bind(config.host, config.port)

    startup = server.startup

    async def announced_startup(sockets=None):
        await startup(sockets)
        announce(f"parley serve: listening on {url_of(sock)}", flush=True)

    server.startup = announced_startup  # type: ignore[method-assign]
    shutdown = server.shutdown

    async def marked_shutdown(sockets=None):
        npcs.closing = True  # not ready from the first moment of a shutdown
        await shutdown(sockets)

    server.shutdown = marked_shutdown  # type: ignore[method-assign]
    try:
        server.run(sockets=[sock])
    finally:
        npcs.close()
        sock.close()


def token_from(env: str) -> str | None:
    value = os.environ.get(env)
    return value or None
