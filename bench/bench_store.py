"""What the session store costs a turn of ``parley serve``: the same conversations served with
``--store none`` and with SQLite, side by side.

Several sessions (``--sessions``) each say ``--turns`` lines, one turn at a time, through the Python
client against an in-process server; the two servers take turns (none, sqlite, none, ...), so drift in
the machine's load hits both. Per turn: the client's wall time from request to ``turn_finished``; and
on the SQLite server, the time of the write itself (``NPCs.persist``: export the dialog, its JSON, the
SQLite transaction synced to disk). Goal: the write's p95 at most 5 ms. Run on the scripted backend
(the store's cost alone) and, with ``--model``, on the sample model.

    python bench/bench_store.py             # scripted: bench/results/store.json "scripted"
    python bench/bench_store.py --model     # the sample model: "model" (the file keeps the other)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from conversation import player_lines, sample_model, write_results

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from runtime.serve.npcs import NPCs
from runtime.serve.server import running_server
from runtime.serve.store import NoStore, SQLiteStore

GOAL_P95_MS = 5.0


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99),
            "mean": round(statistics.mean(ordered), 3), "max": round(ordered[-1], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--turns", type=int, default=20, help="turns each session says")
    parser.add_argument("--model", action="store_true", help="on the sample model (fewer turns)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-store-"))
    assets = examples_dir()
    if args.model:
        from runtime.backends.llama import LlamaBackend

        raw = json.loads((assets / "chat.json").read_text(encoding="utf-8"))
        raw["default_model"] = sample_model()
        for node in raw["nodes"]:
            if "max_tokens" in node:
                node["max_tokens"] = 16
        assets = folder / "assets"
        assets.mkdir()
        (assets / "chat.json").write_text(json.dumps(raw), encoding="utf-8")
        make_backend = lambda: LlamaBackend(asset_dir=assets)
    else:
        from runtime.backends.scripted import ScriptedBackend

        make_backend = ScriptedBackend

    writes: list[float] = []
    persist = NPCs.persist

    def timed_persist(self, npc):
        start = time.perf_counter()
        try:
            return persist(self, npc)
        finally:
            if not isinstance(self.store, NoStore):
                writes.append((time.perf_counter() - start) * 1000)

    NPCs.persist = timed_persist  # type: ignore[method-assign]
    lines = player_lines(args.turns, seed=4)
    wall: dict[str, list[float]] = {"none": [], "sqlite": []}
    backends = {"none": make_backend(), "sqlite": make_backend()}
    stores = {"none": NoStore(), "sqlite": SQLiteStore(folder / "sessions.sqlite3")}
    try:
        with running_server(backends["none"], [assets], store=stores["none"]) as none_url, \
                running_server(backends["sqlite"], [assets], store=stores["sqlite"]) as sqlite_url, \
                ParleyClient(none_url, timeout=600) as plain, ParleyClient(sqlite_url, timeout=600) as stored:
            clients = {"none": plain, "sqlite": stored}
            for s in range(args.sessions):
                for client in clients.values():
                    client.create_session("chat.json", id=f"npc-{s}")
            writes.clear()  # the creations' writes are not turns
            for t, line in enumerate(lines):
                for s in range(args.sessions):
                    order = ("none", "sqlite") if (s + t) % 2 == 0 else ("sqlite", "none")
                    for side in order:
                        start = time.perf_counter()
                        clients[side].turn(f"npc-{s}", line)
                        wall[side].append((time.perf_counter() - start) * 1000)
            size = sum(f.stat().st_size for f in folder.glob("sessions.sqlite3*"))  # the file and its WAL
    finally:
        NPCs.persist = persist  # type: ignore[method-assign]
        for backend in backends.values():
            backend.close()

    result = {
        "command": "python bench/bench_store.py" + (" --model" if args.model else ""),
        "sessions": args.sessions, "turns_each": args.turns,
        "store_write_ms": percentiles(writes),
        "turn_wall_ms": {side: percentiles(values) for side, values in wall.items()},
        "turn_p50_added_ms": round(percentiles(wall["sqlite"])["p50"] - percentiles(wall["none"])["p50"], 3),
        "turn_p95_added_ms": round(percentiles(wall["sqlite"])["p95"] - percentiles(wall["none"])["p95"], 3),
        "store_file_bytes": size,
        "goal_write_p95_ms": GOAL_P95_MS,
        "pass": percentiles(writes)["p95"] <= GOAL_P95_MS,
    }
    write_results("store", {"model" if args.model else "scripted": result}, merge=True)
    print(json.dumps(result, indent=2))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
