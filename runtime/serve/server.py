"""Running the app on uvicorn: ``parley serve`` in the foreground, ``running_server`` in a thread
(tests, benchmarks, an editor that serves its own agents)."""

from __future__ import annotations

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

from runtime.backends.base import Backend
from runtime.serve.app import create_app
from runtime.serve.npcs import Limits, NPCs

log = logging.getLogger("parley.serve")

TOKEN_ENV = "PARLEY_SERVE_TOKEN"
MAX_CONNECTIONS = 4096  # open connections and running requests; past it uvicorn answers 503
KEEP_ALIVE_SECONDS = 5  # an idle keep-alive connection is closed after this


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
        raise ServeConfigError(f"--host {config.host} is reachable from other computers: set a token in the "
                               f"environment variable named by --token-env (default {TOKEN_ENV}) first")
    if config.token is not None and len(config.token) < 16:
        raise ServeConfigError("the token is shorter than 16 characters; use a long random one")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def make_server(config: ServeConfig, backend: Backend) -> tuple[uvicorn.Server, NPCs]:
    check_config(config)
    npcs = NPCs(backend, config.asset_dirs, config.limits, workers=config.workers)
    app = create_app(npcs, config.token)
    server = uvicorn.Server(uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", limit_concurrency=MAX_CONNECTIONS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS, h11_max_incomplete_event_size=64 * 1024, server_header=False,
    ))
    return server, npcs


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


@contextlib.contextmanager
def running_server(backend: Backend, asset_dirs: list[Path] | list[str], *, token: str | None = None,
                   limits: Limits | None = None, host: str = "127.0.0.1", port: int = 0,
                   workers: int = 8, start_seconds: float = 30.0) -> Iterator[str]:
    """Serve in a thread of this process; yields the base URL once it accepts connections. The
    backend stays the caller's (not closed here)."""
    config = ServeConfig(host, port, [Path(d) for d in asset_dirs], token, limits or Limits(), workers)
    server, npcs = make_server(config, backend)
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


def serve_forever(config: ServeConfig, backend: Backend, announce=print) -> None:
    server, npcs = make_server(config, backend)
    sock = bind(config.host, config.port)

    startup = server.startup

    async def announced_startup(sockets=None):
        await startup(sockets)
        announce(f"parley serve: listening on {url_of(sock)}", flush=True)

    server.startup = announced_startup  # type: ignore[method-assign]
    try:
        server.run(sockets=[sock])
    finally:
        npcs.close()
        sock.close()


def token_from(env: str) -> str | None:
    value = os.environ.get(env)
    return value or None
