"""What a shared PostgreSQL store costs ``parley serve``: the revision check every request on a
session makes (``PostgresStore.revision_of``, one indexed SELECT), and the write after each change
(``NPCs.persist``: export the dialog, its JSON, one compare-and-set statement committed), on a local
PostgreSQL of the bench's own (``tests/postgres.py``; fsync on, as installed).

    python bench/bench_pg_store.py          # bench/results/pg_store.json
"""

from __future__ import annotations

import argparse
import sys
import time

from bench_store import percentiles
from conversation import write_results  # first: it puts the checkout on sys.path

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.npcs import Limits, NPCs
from runtime.serve.store import PostgresStore
from tests.postgres import running_postgres


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--saves", type=int, default=200)
    args = parser.parse_args()
    with running_postgres() as dsn:
        store = PostgresStore(dsn)
        npcs = NPCs(ScriptedBackend(), [examples_dir()], Limits(), store=store)
        ids = [f"npc-{i}" for i in range(args.sessions)]
        for session_id in ids:
            npcs.create("chat.json", {}, session_id)  # no turns: the write's fixed cost (bench_store: real turns)
        checks, gets, saves = [], [], []
        for i in range(args.saves):
            session_id = ids[i % len(ids)]
            start = time.perf_counter()
            store.revision_of(session_id)
            checks.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            npc = npcs.get(session_id)  # what a request pays: the check, nothing read again
            gets.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            npcs.persist(npc)
            saves.append((time.perf_counter() - start) * 1000)
        store.close()
    results = {"revision_of_ms": percentiles(checks), "get_ms": percentiles(gets), "persist_ms": percentiles(saves)}
    for name, stats in results.items():
        print(f"{name:16} p50 {stats['p50']:.3f}  p95 {stats['p95']:.3f}  max {stats['max']:.3f}  (n={stats['n']})")
    write_results("pg_store", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
