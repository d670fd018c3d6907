"""Several ``parley serve`` replicas on one PostgreSQL behind HAProxy, for tests and benchmarks, and a
player that says a line through them the way a game would (resuming a stream that broke).

HAProxy hashes each request on its session id (``balance uri depth 3``: ``/v1/sessions/ID``) over a
consistent ring, so a session stays on one replica and only the sessions of a replica that dies move;
its health checks (``GET /v1/health/ready`` every 200 ms) take a dead replica out after one miss.
Each replica is a ``parley serve --port 0`` process of its own (tests/servers.py) with a state folder
of its own. A machine without HAProxy gets it from apt first, as tests/postgres.py gets PostgreSQL.
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from runtime.serve.client import ParleyClient, ParleyError, TurnFailed
from runtime.serve.protocol import PREFIX
from tests.postgres import apt_install
from tests.servers import ServeProcess, free_port, parley_serve_process

READY_SECONDS = 60.0  # HAProxy sees every replica up (a busy 2-core machine; it takes well under a second)
RESUME_SECONDS = 30.0  # a player keeps reconnecting to a broken turn's run this long
SERVED_BY = "X-Served-By"  # the replica HAProxy sent a request to (its server name, r1, r2, ...)

# The configuration the tests run, and docs/serving.md shows annotated.
HAPROXY_CONFIG = """\
global
    maxconn 4096
    stats socket {stats} mode 600 level admin

defaults
    mode http
    timeout connect 250ms
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout http-keep-alive 10s
    option redispatch 1
    retries 3
    no option http-buffer-request

frontend players
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance uri depth 3
    hash-type consistent
    option httpchk GET /v1/health/ready
    http-check expect status 200
    http-response set-header {served_by} %s
    default-server inter 200ms fall 1 rise 1
{servers}
"""


def haproxy_binary() -> str:
    """HAProxy's program, installed with apt where there is none (as root); else the test skips."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if found is None and apt_install("haproxy"):
        found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if found is None:
        pytest.skip("HAProxy is not installed (apt-get install haproxy) and cannot be installed here")
    return found


@dataclass
class Replicas:
    """Replicas behind HAProxy: ``url`` is HAProxy's (what players use); ``replicas`` by server name."""

    url: str
    replicas: dict[str, ServeProcess]
    haproxy: subprocess.Popen
    stats: Path

    def served_by(self, session_id: str) -> str:
        """The replica HAProxy sends ``session_id``'s requests to now."""
        response = httpx.get(f"{self.url}{PREFIX}/sessions/{session_id}", timeout=30)
        response.raise_for_status()
        return response.headers[SERVED_BY]

    def kill(self, name: str) -> float:
        """``kill -9`` replica ``name``; the monotonic time it died."""
        process = self.replicas[name].process
        process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        process.wait(30)
        return killed

    def states(self) -> dict[str, str]:
        """Each replica's state as HAProxy's health checks see it (UP, DOWN, ...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.stats))
            s.sendall(b"show stat\n")
            raw = b"".join(iter(lambda: s.recv(65536), b""))
        rows = csv.DictReader(io.StringIO(raw.decode().lstrip("# ")))
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "replicas" and r["svname"] in self.replicas}

    def wait_until(self, name: str, state: str, seconds: float = READY_SECONDS) -> float:
        """Wait until HAProxy has replica ``name`` in ``state`` (UP, DOWN); the monotonic time it saw it."""
        deadline = time.monotonic() + seconds
        while (now := self.states().get(name)) != state:
            if time.monotonic() > deadline:
                raise RuntimeError(f"HAProxy has {name} {now}, not {state}, after {seconds:g} s")
            time.sleep(0.01)
        return time.monotonic()


@contextlib.contextmanager
def running_replicas(*serve_args: str, count: int = 3, patch: str = "") -> Iterator[Replicas]:
    """``count`` replicas of ``parley serve SERVE_ARGS`` (give them ``--store postgresql://...``), each
    with a state folder of its own, behind HAProxy; yields once HAProxy sees every one up."""
    binary = haproxy_binary()
    with tempfile.TemporaryDirectory(prefix="parley-replicas-") as scratch, contextlib.ExitStack() as stack:
        folder = Path(scratch)
        replicas = {}
        for i in range(1, count + 1):
            name = f"r{i}"
            state = folder / name
            replicas[name] = stack.enter_context(parley_serve_process(*serve_args, "--state-dir", str(state),
                                                                      patch=patch))
        port, stats, config = free_port(), folder / "haproxy.sock", folder / "haproxy.cfg"
        servers = "\n".join(f"    server {name} {r.url.removeprefix('http://')} check" for name, r in replicas.items())
        config.write_text(HAPROXY_CONFIG.format(stats=stats, port=port, served_by=SERVED_BY, servers=servers))
        log = stack.enter_context(open(folder / "haproxy.log", "w+"))
        haproxy = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        stack.callback(_stop, haproxy)
        cluster = Replicas(f"http://127.0.0.1:{port}", replicas, haproxy, stats)
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if haproxy.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"haproxy exited ({haproxy.returncode}):\n{log.read()[-4000:]}")
            with contextlib.suppress(OSError):
                if set(cluster.states().values()) == {"UP"} and len(cluster.states()) == count:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"HAProxy did not see every replica up in {READY_SECONDS:g} s")
            time.sleep(0.05)
        yield cluster


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# --- a player ----------------------------------------------------------------------------------


@dataclass
class Said:
    """How one line went. ``reply`` when the turn finished; else ``code`` (turn_lost, unavailable, a
    turn_failed code) and ``line``, the line handed back to say again. ``broken``: its replica died
    under it (the stream broke, or the balancer answered 502), ``resumed``: its end came from a
    reconnection."""

    line: str
    reply: str | None = None
    code: str = ""
    broken: bool = False
    resumed: bool = False
    started: float = 0.0  # monotonic: the request was sent
    ended: float = 0.0
    events: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.reply is not None


def say(client: ParleyClient, session_id: str, line: str,
        on_started: Callable[[str], None] | None = None) -> Said:
    """Say ``line`` and follow its turn to the end. The client resumes a broken stream by itself
    (through the balancer: the session's replica, or the one it moved to): the turn ends in
    turn_finished (it was stored before the replica died), turn_failed, or TurnFailed ``turn_lost``
    with the line handed back (no replica has the turn; or the balancer answered 502 before it began)."""
    said = Said(line, started=time.monotonic())
    starts, resumes = 0, client.resumes
    try:
        for event in client.stream_turn(session_id, line):
            said.events.append(event.kind)
            if event.kind == "turn_started":
                starts += 1
                if on_started is not None and starts == 1:
                    on_started(session_id)
            if event.kind == "turn_finished":
                said.reply = event.data["reply"]
                break
            if event.kind == "turn_failed":
                said.code, said.line = event.data["error"]["code"], event.data.get("line", line)
                break
        else:
            said.code = "truncated"
    except TurnFailed as exc:
        said.code, said.line, said.broken = exc.code, exc.line or line, True
    except ParleyError as exc:  # the balancer had no replica, or none could be reached
        said.code, said.broken = exc.code, exc.code == "unavailable"
    said.resumed = client.resumes > resumes
    said.broken = said.broken or said.resumed
    said.ended = time.monotonic()
    return said


def _error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""
