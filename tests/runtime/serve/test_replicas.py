"""Three ``parley serve`` replicas on one PostgreSQL behind HAProxy: players talk to many sessions at
once, one replica is killed (``kill -9``) in the middle of a turn, and no turn a player heard finish is
lost, every turn that was running there ends (finished, or failed with its line handed back), and
every session goes on saying exactly what one plain server says to the same lines."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from runtime.serve.server import running_server
from tests.replicas import Replicas, Said, running_replicas, say
from tests.runtime.serve.test_serve_real_model import assets  # noqa: F401 - the sample model's assets fixture
from tests.runtime.serve.test_store import whole_prompt

pytestmark = [pytest.mark.replicas,
              pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals, HAProxy")]

LINES = ["Good evening. Is there a room?", "What is the soup today?", "And the price?", "Is the road north safe?",
         "Who keeps the stables?", "Goodnight then."]
AFTER = ["One more thing.", "Thank you."]  # said by every session once the replica is dead
# Replies depend on the whole prompt (a session read back with less than its history answers otherwise),
# and each model call takes 250 ms, so the turn that has just started there when the replica is
# killed is still running (a player thread slowed by a busy machine does not see it end first).
SLOW_WHOLE_PROMPT = ("import time\nfrom runtime.backends import scripted\n"
                     "from tests.runtime.serve.test_store import whole_prompt\n"
                     "def slow(key, request):\n    time.sleep(0.25)\n    return whole_prompt(key, request)\n"
                     "scripted.default_reply = slow\n")
WAIT = 300.0


class Game:
    """Players on threads, each saying its sessions' lines in turn through the balancer (a line that
    failed is said again, as a game would); the replica holding ``victim`` is killed as one of its
    turns has just started, once ``kill_after`` turns have finished."""

    def __init__(self, cluster: Replicas, sessions: list[str], lines: list[str], players: int,
                 victim: str, kill_after: int, timeout: float = 30.0) -> None:
        self.cluster, self.sessions, self.lines, self.timeout = cluster, sessions, lines, timeout
        self.held = {s: cluster.served_by(s) for s in sessions}
        self.victim = self.held[victim]
        self.kill_after = kill_after
        self.said: dict[str, list[Said]] = {s: [] for s in sessions}
        self.in_flight: list[Said] = []  # turns running on the victim when it died
        self.killed_at: float | None = None
        self._finished = 0
        self._lock = threading.Lock()
        self._players = [sessions[i::players] for i in range(players)]
        self.errors: list[BaseException] = []

    def play(self) -> None:
        threads = [threading.Thread(target=self._player, args=(own,)) for own in self._players]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads), "a player is stuck"
        assert not self.errors, self.errors

    def _player(self, own: list[str]) -> None:
        try:
            with ParleyClient(self.cluster.url, timeout=self.timeout) as client:
                for n in range(len(self.lines)):
                    for session in own:
                        self._say(client, session, self.lines[n])
        except BaseException as exc:  # noqa: BLE001 - reported by play()
            self.errors.append(exc)

    def _say(self, client: ParleyClient, session: str, line: str) -> None:
        for _ in range(5):
            killer = self._maybe_kill if self.held[session] == self.victim else None
            said = say(client, session, line, killer)
            self.said[session].append(said)
            if said.broken:
                with self._lock:
                    self.in_flight.append(said)
            if said.finished:
                with self._lock:
                    self._finished += 1
                return
            line = said.line  # handed back: say it again
        raise AssertionError(f"{session}: {line!r} failed 5 times: {[s.code for s in self.said[session][-5:]]}")

    def _maybe_kill(self, _session: str) -> None:
        with self._lock:
            if self.killed_at is None and self._finished >= self.kill_after:
                self.killed_at = self.cluster.kill(self.victim)  # this turn has just started there

    def finished(self, session: str) -> list[tuple[str, str]]:
        return [(s.line, s.reply) for s in self.said[session] if s.reply is not None]


def reference(backend, assets_dir: Path, asset: str, conversations: dict[str, list[str]]) -> dict[str, list[str]]:
    """The replies one plain server (in-process, no store) gives to each session's lines."""
    with running_server(backend, [assets_dir]) as url, ParleyClient(url, timeout=WAIT) as client:
        out = {}
        for session, lines in conversations.items():
            client.create_session(asset, id=session, variables={"player_name": session})
            out[session] = [client.turn(session, line).reply for line in lines]
        return out


def check_failover(cluster: Replicas, game: Game, asset_dir: Path, asset: str, backend,
                   timeout: float = 30.0) -> None:
    assert game.killed_at is not None, "the replica was never killed"
    assert game.cluster.replicas[game.victim].process.returncode == -9
    cluster.wait_until(game.victim, "DOWN")
    moved = [s for s in game.sessions if game.held[s] == game.victim]
    assert moved and len(moved) < len(game.sessions), "the victim held some sessions, not all"
    assert game.in_flight, "a turn was running on the replica when it died"
    for said in game.in_flight:  # each ended: resumed to its end, or failed with its line handed back
        assert said.finished or (said.code and said.line), said
    with ParleyClient(cluster.url, timeout=timeout) as client:
        for session in game.sessions:
            kept = [(t.line, t.reply) for t in client.turns(session)]
            assert kept == game.finished(session), f"{session}: the stored history is what its player heard finish"
            assert [t["player"] for t in client.export_history(session)["turns"]] == [k[0] for k in kept]
            assert [k[0] for k in kept] == game.lines, f"{session}: every line was said once, in order"
            assert cluster.served_by(session) != game.victim
        after = {s: [client.turn(s, line).reply for line in AFTER] for s in game.sessions}
    expected = reference(backend, asset_dir, asset, {s: game.lines + AFTER for s in game.sessions})
    for session in game.sessions:
        assert [r for _, r in game.finished(session)] + after[session] == expected[session], session


def test_kill_9_of_a_replica_behind_haproxy_loses_no_turn_and_sessions_go_on_byte_for_byte(postgres_db):
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", postgres_db)
    sessions = [f"npc-{i:02d}" for i in range(12)]
    with running_replicas(*args, patch=SLOW_WHOLE_PROMPT) as cluster:
        with ParleyClient(cluster.url) as client:
            for s in sessions:
                client.create_session("chat.json", id=s, variables={"player_name": s})
        game = Game(cluster, sessions, LINES, players=4, victim=sessions[0], kill_after=len(sessions) * 2)
        assert len(set(game.held.values())) > 1, "the sessions spread over the replicas"
        game.play()
        check_failover(cluster, game, examples_dir(), "chat.json", ScriptedBackend(whole_prompt))
        alive = [r for name, r in cluster.replicas.items() if name != game.victim]
        assert all(r.process.poll() is None for r in alive)


@pytest.mark.model
def test_kill_9_of_a_replica_on_the_sample_model_loses_no_turn_and_goes_on_exactly(postgres_db, assets):  # noqa: F811
    """The embedded llama.cpp backend is exact (its reproducibility: the same seed replays the same
    tokens at any thread count; flash attention off), so a session read back on another replica
    continues with the tokens one plain server gives."""
    from runtime.backends.llama import LlamaBackend

    args = ("--backend", "embedded", "--assets", str(assets), "--store", postgres_db, "--workers", "2")
    sessions = ["inn-a", "inn-b", "inn-c"]
    with running_replicas(*args) as cluster:
        with ParleyClient(cluster.url, timeout=WAIT) as client:
            for s in sessions:
                client.create_session("chat.json", id=s, variables={"player_name": s})
        game = Game(cluster, sessions, LINES[:3], players=3, victim=sessions[0], kill_after=2, timeout=WAIT)
        game.play()
        backend = LlamaBackend(asset_dir=assets)
        try:
            check_failover(cluster, game, assets, "chat.json", backend, timeout=WAIT)
        finally:
            backend.close()
