"""Running the app on uvicorn: ``parley serve`` in the foreground, ``running_server`` in a thread
(tests, benchmarks, an editor that serves its own agents)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from runtime.backends.base import Backend
from runtime.crashes import CrashWatch
from runtime.serve import running
from runtime.serve.app import (
    BODY_SECONDS,
    MAX_HEADER_BYTES,
    MAX_REQUESTS,
    RequestGuard,
    cors_origin,
    create_app,
)
from runtime.serve.lifecycle import SHUTDOWN_SECONDS, watch_parent
from runtime.serve.npcs import Limits, NPCs
from runtime.serve.protocol import PreviousCrash, ServeError
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
    exit_with_parent: bool = False  # end when standard input reaches EOF or the parent process ends
    shutdown_seconds: float = SHUTDOWN_SECONDS  # SIGTERM or POST /v1/shutdown to the end of serving
    cors_origins: list[str] = field(default_factory=list)  # web pages' origins a browser may call from


@dataclass
class Stopped:
    """How serving ended: ``turns_ended`` False when a turn's thread was still running at the limit
    (its backend must not be closed under it: the process should just exit)."""

    turns_ended: bool = True


# glibc's malloc, tuned for a process that holds many NPCs' KV snapshots: a fixed mmap threshold
# (by default it rises to the size of each large block freed, so later snapshots come from the heap
# and are never given back) and two arenas (each turn runs on a new thread, and each thread's arena
# kept its own freed snapshots). 40 NPCs taking turns grew the server about 2 MiB a round without it.
MMAP_THRESHOLD = 1 << 20
MALLOC_ARENAS = 2


def keep_memory_flat() -> bool:
    """Tune glibc's malloc so that freed snapshots go back to the system (see above). False where
    the C library is not glibc (macOS, Windows, musl): nothing to tune there."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold, m_arena_max = -3, -8  # malloc.h
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(mallopt(m_arena_max, MALLOC_ARENAS))


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
    if len(config.asset_dirs) > 1:
        # With several folders an asset is named by its folder's name ("npcs/guard.json"): two folders
        # of one name would list the same names, and the first would hide the second's assets.
        named: dict[str, Path] = {}
        for folder in config.asset_dirs:
            other = named.setdefault(folder.resolve().name, folder)
            if other is not folder:
                raise ServeConfigError(f"--assets {other} and {folder}: both folders are called {folder.resolve().name!r}, "
                                       "and a game names an asset by its folder's name (npcs/guard.json), so one "
                                       "would hide the other's: rename one, or serve the folder above them")
    if not is_loopback(config.host) and not config.token:
        raise ServeConfigError(f"--host {config.host} is reachable from other computers: set a long random token "
                               f"in the environment variable {config.token_env} (named by --token-env) first")
    if config.token is not None:
        problem = token_problem(config.token)
        if problem:
            raise ServeConfigError(f"the token {problem}; use a long random one (such as "
                                   "python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    for origin in config.cors_origins:
        try:
            cors_origin(origin)
        except ValueError as exc:
            raise ServeConfigError(str(exc)) from None


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

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse gets the typed JSON error every other refusal gets, not uvicorn's
        plain text (a client dispatches on the code)."""
        import h11

        body = json.dumps(ServeError("bad_request", f"not an HTTP request this server reads: {msg}").body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        try:
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # too broken to answer at all
            pass
        self.transport.close()

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
    keep_memory_flat()
    npcs = NPCs(backend, config.asset_dirs, config.limits, workers=config.workers, crash_watch=crash_watch,
                store=store)
    npcs.restore()
    server: uvicorn.Server | None = None

    def shut_down(why: str) -> None:  # any thread: uvicorn's loop sees the flag within 0.1 s
        log.info("shutting down: %s", why)
        if server is not None:
            server.should_exit = True

    app = create_app(npcs, config.token, previous_crash, shut_down if config.token else None,
                     config.shutdown_seconds)
    if isinstance(app, RequestGuard):
        app.max_requests, app.body_seconds = config.max_requests, config.body_seconds
        app.local_only = config.token is None and is_loopback(config.host)
        app.cors_origins = frozenset(cors_origin(o) for o in config.cors_origins)
    protocol = type("HeaderDeadline", (_HeaderDeadline,), {"header_seconds": config.header_seconds})
    server = uvicorn.Server(uvicorn.Config(
        # no limit_concurrency: uvicorn's counts idle connections and answers plain text; the guard
        # limits requests being answered, and the header deadline idle connections
        app, http=protocol, log_level="warning", access_log=False, lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_SECONDS, h11_max_incomplete_event_size=MAX_HEADER_BYTES, server_header=False,
    ))
    _bound_shutdown(server, npcs, config.shutdown_seconds)
    server.shut_down = shut_down  # type: ignore[attr-defined]
    return server, npcs


def _bound_shutdown(server: uvicorn.Server, npcs: NPCs, seconds: float) -> None:
    """A shutdown (SIGTERM, POST /v1/shutdown, the parent gone) ends within ``seconds``: no new turns,
    running ones cancelled (their sessions stay as before them), tool waits ended and observers'
    streams closed at once, so the connections uvicorn waits for end by themselves; any still open
    at half the limit are cut. ``npcs.close`` waits out the rest for the turns' threads."""
    shutdown = server.shutdown

    async def bounded(sockets=None):
        npcs.deadline = time.monotonic() + seconds
        stopped = npcs.stop_everything()
        log.info("stopping within %g s: %d running turn(s) cancelled", seconds, stopped)
        server.config.timeout_graceful_shutdown = seconds / 2  # type: ignore[assignment]  # asyncio.timeout takes it
        await shutdown(sockets)

    server.shutdown = bounded  # type: ignore[method-assign]


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


@contextlib.contextmanager
def running_server(backend: Backend, asset_dirs: list[Path] | list[str], *, token: str | None = None,
                   limits: Limits | None = None, host: str = "127.0.0.1", port: int = 0,
                   workers: int = 8, start_seconds: float = 30.0, header_seconds: float = HEADER_SECONDS,
                   body_seconds: float = BODY_SECONDS, max_requests: int = MAX_REQUESTS,
                   store: SessionStore | None = None,
                   shutdown_seconds: float = SHUTDOWN_SECONDS, cors_origins: list[str] | None = None) -> Iterator[str]:
    """Serve in a thread of this process; yields the base URL once it accepts connections. The
    backend stays the caller's (not closed here)."""
    config = ServeConfig(host, port, [Path(d) for d in asset_dirs], token, limits or Limits(), workers,
                         header_seconds, body_seconds, max_requests, shutdown_seconds=shutdown_seconds,
                         cors_origins=list(cors_origins or []))
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
        thread.join(30)
        npcs.deadline = None  # the caller may close the backend next: wait for every turn's thread, not 2 s
        npcs.close()
        sock.close()


def serve_forever(config: ServeConfig, backend: Backend, announce=print, crash_watch: CrashWatch | None = None,
                  previous_crash: PreviousCrash | None = None, store: SessionStore | None = None,
                  stopped: Stopped | None = None) -> None:
    """Serve until SIGTERM (or SIGINT), ``POST /v1/shutdown``, or with ``exit_with_parent`` the game's
    end; ``stopped`` says how it ended (a turn still running past the limit)."""
    server, npcs = make_server(config, backend, crash_watch, previous_crash, store)
    sock = bind(config.host, config.port)
    if config.exit_with_parent:
        watch_parent(server.shut_down)  # type: ignore[attr-defined]

    startup = server.startup
    announcement: list[Path | None] = []  # this server's file among those running here (``running``)

    async def announced_startup(sockets=None):
        await startup(sockets)
        # the port (chosen as it bound, with --port 0) for the editor's Attach dialog to find: written
        # before the line, so whoever reads the line finds the file too
        announcement.append(running.announce(url_of(sock), [str(d) for d in config.asset_dirs], bool(config.token)))
        announce(f"parley serve: listening on {url_of(sock)}", flush=True)

    server.startup = announced_startup  # type: ignore[method-assign]
    try:
        server.run(sockets=[sock])
    finally:
        for file in announcement:
            running.withdraw(file)
        ended = npcs.close()
        if not ended:
            log.warning("a turn was still running at the shutdown's limit (%g s): exiting without it",
                        config.shutdown_seconds)
        if stopped is not None:
            stopped.turns_ended = ended
        sock.close()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the system says it), not the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def serve_threads(threads: int | None, threads_batch: int | None, cpus: int | None = None) -> tuple[int, int]:
    """The embedded backend's threads (to generate, to read prompts) for ``parley serve``: those given,
    else a share that leaves the game a core. llama.cpp's threads wait for each other at every step,
    so a thread on a core the game holds slows all of them: on 2 cores with the game busy on one, a
    prompt read on 2 threads took 23 times as long as on 1."""
    cpus = cpus or usable_cpus()
    spare = max(cpus - 1, 1)
    return threads or max(min(cpus // 2, spare), 1), threads_batch or spare


MIN_TOKEN_CHARS = 16
MIN_TOKEN_DISTINCT = 8  # characters: sixteen spaces, or 'aaaa…', are not a secret


def token_problem(token: str) -> str:
    """Why ``token`` is no bearer token to guard the server with, or ''."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"is shorter than {MIN_TOKEN_CHARS} characters"
    if not all("!" <= c <= "~" for c in token):
        return ("holds spaces, control or non-ASCII characters (an HTTP header trims or refuses them): use "
                "letters, digits and punctuation")
    if len(set(token)) < MIN_TOKEN_DISTINCT:
        return f"repeats too few characters ({len(set(token))} different, at least {MIN_TOKEN_DISTINCT})"
    return ""


def token_from(env: str) -> str | None:
    value = os.environ.get(env)
    return value or None
