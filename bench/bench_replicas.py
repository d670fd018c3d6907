"""``parley serve`` replicas behind HAProxy, one of them killed (``kill -9``) partway: throughput, turn
latency, how long failover takes, and what the players lost.

    python bench/bench_replicas.py                      # scripted: 1,000 sessions x 10 turns (~4 min)
    python bench/bench_replicas.py --backend embedded --sessions 20 --turns 5 --max-tokens 16
    python bench/bench_replicas.py --sessions 50 --turns 4 --no-write      # a smoke run

Three replicas (``--replicas``) of ``parley serve --store postgresql://...`` on one PostgreSQL, with
HAProxy in front hashing on the session id (tests/replicas.py: the configuration docs/serving.md
shows). ``--players`` threads, each with its own client, say the turns of their share of the
sessions, turn by turn over all of them (the player code that resumes a broken stream and says a
line handed back again is tests/replicas.py's ``say``). Once ``--kill-at`` of the turns have
finished, the replica holding the first session is killed with SIGKILL.

- ``turns_per_s``: finished turns over the run's wall time (creating the sessions is not counted).
- ``turn_ms``: request sent -> turn_finished, every finished turn (a line said again is a new turn).
- ``failover``: from the kill until HAProxy marks the replica down, and until the first turn of a
  session the dead replica held (begun after the kill) finishes on the replica it moved to.
- ``turns_lost``: turns a player saw finish that the session's stored history (read at the end, from
  the replicas left) does not have, in order. Goal 0.
- ``in_flight``: turns whose replica died under them: resumed to turn_finished (the store had it), or
  failed (turn_lost, or a 502 before the turn began) and said again.

resources/examples/chat.json (``--max-tokens`` serves a copy with smaller replies); bench/results/replicas.json
keeps one entry per backend.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_serve import asset_folder, commit, load, pct
from conversation import player_lines, sample_model, write_results  # first: it puts the checkout on sys.path

from runtime.serve.client import ParleyClient
from tests.postgres import running_postgres
from tests.replicas import Replicas, Said, running_replicas, say

ASSET = "chat.json"


class Run:
    """The players, the kill, and what each line came to."""

    def __init__(self, cluster: Replicas, sessions: list[str], lines: list[str], players: int, kill_at: float,
                 timeout: float) -> None:
        self.cluster, self.sessions, self.lines, self.timeout = cluster, sessions, lines, timeout
        self.total = len(sessions) * len(lines)
        self.kill_after = int(self.total * kill_at)
        self.said: dict[str, list[Said]] = {s: [] for s in sessions}
        self.finished = 0
        self.changed = threading.Condition()
        self.shares = [sessions[i::players] for i in range(players)]
        self.errors: list[BaseException] = []
        self.victim = ""
        self.killed_at = self.marked_down_at = 0.0

    def play(self) -> float:
        threads = [threading.Thread(target=self._player, args=(share,)) for share in self.shares]
        killer = threading.Thread(target=self._kill)
        started = time.monotonic()
        for t in [killer, *threads]:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - started
        with self.changed:
            self.finished = self.total  # the killer stops waiting if the players ended first
            self.changed.notify_all()
        killer.join()
        if self.errors:
            raise self.errors[0]
        return seconds

    def _player(self, share: list[str]) -> None:
        try:
            with ParleyClient(self.cluster.url, timeout=self.timeout) as client:
                for line in self.lines:
                    for session in share:
                        self._say(client, session, line)
        except BaseException as exc:  # noqa: BLE001 - raised by play()
            self.errors.append(exc)

    def _say(self, client: ParleyClient, session: str, line: str) -> None:
        for _ in range(5):
            said = say(client, session, line)
            self.said[session].append(said)
            if said.finished:
                with self.changed:
                    self.finished += 1
                    self.changed.notify_all()
                return
            line = said.line
        raise RuntimeError(f"{session}: {line!r} failed 5 times: {[s.code for s in self.said[session][-5:]]}")

    def _kill(self) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.finished >= self.kill_after)
            if self.finished >= self.total:
                return
        self.killed_at = self.cluster.kill(self.victim)
        print(f"killed {self.victim} after {self.finished} of {self.total} turns", flush=True)
        self.marked_down_at = self.cluster.wait_until(self.victim, "DOWN")


def measure(args: argparse.Namespace, backend: str, assets: Path) -> dict[str, Any]:
    sessions = [f"npc-{i:05d}" for i in range(args.sessions)]
    lines = player_lines(args.turns, seed=11)
    with running_postgres() as dsn, running_replicas("--backend", backend, "--assets", str(assets), "--store", dsn,
                                                     # sessions are made through one replica (POST /v1/sessions
                                                     # hashes on its path alone), which then holds them all
                                                     "--max-sessions", str(args.sessions + 1),
                                                     count=args.replicas) as cluster:
        created = time.monotonic()
        with ParleyClient(cluster.url, timeout=args.timeout) as client:
            for s in sessions:
                client.create_session(ASSET, id=s)
            client.create_session(ASSET, id="warm-up")
            client.turn("warm-up", "Hello.")  # the model's load on the embedded backend, before anything is timed
        create_seconds = time.monotonic() - created
        run = Run(cluster, sessions, lines, args.players, args.kill_at, args.timeout)
        held = {s: cluster.served_by(s) for s in sessions}
        run.victim = held[sessions[0]]
        before = load()
        seconds = run.play()
        after = load()
        with ParleyClient(cluster.url, timeout=args.timeout) as client:
            kept = {s: [(t.line, t.reply) for t in client.turns(s)] for s in sessions}
    moved = {s for s in sessions if held[s] == run.victim}
    every = [said for s in sessions for said in run.said[s]]
    done = [said for said in every if said.finished]
    lost = 0
    for s in sessions:
        heard = [(said.line, said.reply) for said in run.said[s] if said.finished]
        lost += sum(1 for a, b in zip(heard, kept[s] + [None] * len(heard), strict=False) if a != b)
    broken = [said for said in every if said.broken]
    first_moved = min((said.ended for s in moved for said in run.said[s]
                       if said.finished and said.started >= run.killed_at), default=None)
    latency = [(said.ended - said.started) * 1000 for said in done]
    return {
        "backend": f"parley serve --backend {backend}", "replicas": args.replicas, "players": args.players,
        "sessions": args.sessions, "turns_per_session": args.turns, "asset": ASSET,
        "create_sessions_s": round(create_seconds, 2),
        "killed": {"replica": run.victim, "after_turns": args.kill_at, "sessions_it_held": len(moved)},
        "wall_s": round(seconds, 2),
        "turns_finished": len(done),
        "turns_per_s": round(len(done) / seconds, 1),
        "turn_ms": {"p50": pct(latency, 50), "p95": pct(latency, 95), "p99": pct(latency, 99),
                    "mean": round(statistics.fmean(latency), 2), "max": round(max(latency), 2)},
        "failover_ms": {
            "kill_to_marked_down": round((run.marked_down_at - run.killed_at) * 1000, 1),
            "kill_to_first_moved_turn_finished": round((first_moved - run.killed_at) * 1000, 1) if first_moved else None,
        },
        "turns_lost": lost,
        "in_flight": {"total": len(broken), "resumed_to_turn_finished": sum(1 for b in broken if b.finished),
                      "failed": dict(collections.Counter(b.code for b in broken if not b.finished))},
        "failed_turns": dict(collections.Counter(said.code for said in every if not said.finished)),
        "load_average_before": before, "load_average_after": after,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="scripted", help="scripted (default) or embedded (the sample model)")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10, help="turns each session says")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--players", type=int, default=12, help="client threads")
    parser.add_argument("--kill-at", type=float, default=0.3, help="the share of turns finished when a replica dies")
    parser.add_argument("--max-tokens", type=int, help="serve a copy of the asset with at most this max_tokens")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a client waits between bytes")
    parser.add_argument("--no-write", action="store_true", help="print only (a smoke run)")
    args = parser.parse_args()
    if args.backend == "embedded":
        sample_model()  # fetched before anything is timed
    with tempfile.TemporaryDirectory() as scratch:
        assets, about = asset_folder(ASSET, args.max_tokens, Path(scratch))
        result = {"command": " ".join(["python", "bench/bench_replicas.py", *sys.argv[1:]]), "commit": commit(),
                  **about, **measure(args, args.backend, assets)}
    print(result)
    if not args.no_write:
        write_results("replicas", {args.backend: result}, merge=True)
    return 0 if result["turns_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
