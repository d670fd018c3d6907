"""``parley serve``'s plain requests, one route at a time, on one kept-alive connection: p50 and p95
per route. Goal: p50 at most 2 ms on loopback.

    python bench/bench_requests.py                 # ~1 min: bench/results/requests.json
    python bench/bench_requests.py --rounds 20 --no-write   # a smoke run

The server is a ``parley serve --backend scripted --port 0`` subprocess (the way a game runs it:
client and server never share a GIL). Each round asks every route once, in order, on the same
connection. ``--without-nodelay`` runs a second server whose connections keep Nagle's algorithm
(TCP_NODELAY unset, as before the fix) for comparison: each of its answers' bodies then waits for
the client's delayed ACK of the header.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

from conversation import serve_child, write_results

from runtime.resources import examples_dir

GOAL_P50_MS = 2.0
# Stands in for the fix being absent: the protocol no longer sets TCP_NODELAY, and the listening
# socket is made with protocol 0 again (so asyncio does not either)
WITHOUT_NODELAY = """
import socket
import runtime.serve.server as server
server.no_delay = lambda transport: None
_socket = socket.socket
def _untyped(family=-1, type=-1, proto=-1, fileno=None):
    return _socket(family, type, 0 if proto == socket.IPPROTO_TCP else proto, fileno)
server.socket.socket = _untyped
"""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def routes(session: str) -> list[tuple[str, str, str, str | None]]:
    """(name, method, path, body) of each plain route, in the order a round asks them."""
    s = f"/v1/sessions/{session}"
    return [
        ("GET /v1/health", "GET", "/v1/health", None),
        ("GET /v1/assets", "GET", "/v1/assets", None),
        ("POST /v1/sessions", "POST", "/v1/sessions", json.dumps({"asset": "chat.json"})),
        ("GET /v1/sessions/{id}", "GET", s, None),
        ("PATCH /v1/sessions/{id}/variables", "PATCH", f"{s}/variables", '{"variables": {}}'),
        ("GET /v1/sessions/{id}/history", "GET", f"{s}/history", None),
        ("POST /v1/sessions/{id}/cancel", "POST", f"{s}/cancel", None),
        ("GET /v1/sessions/{id}/turns", "GET", f"{s}/turns", None),
    ]


def measure(url: str, rounds: int) -> dict[str, Any]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Content-Type": "application/json"}

    def ask(method: str, path: str, body: str | None) -> tuple[int, bytes]:
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()

    status, body = ask("POST", "/v1/sessions", json.dumps({"asset": "chat.json", "id": "innkeeper"}))
    assert status == 201, body
    created: list[str] = []
    times: dict[str, list[float]] = {name: [] for name, *_ in routes("innkeeper")}
    for _ in range(rounds):
        for name, method, path, body in routes("innkeeper"):
            start = time.perf_counter()
            status, answer = ask(method, path, body)
            times[name].append((time.perf_counter() - start) * 1000)
            if status >= 300:
                raise RuntimeError(f"{name}: {status} {answer[:200]!r}")
            if name == "POST /v1/sessions":
                created.append(json.loads(answer)["id"])
        for session in created:  # the server's session count stays where it was
            ask("DELETE", f"/v1/sessions/{session}", None)
        created.clear()
    connection.close()
    out = {name: {"p50_ms": round(statistics.median(ms), 3), "p95_ms": round(percentile(ms, 95), 3)}
           for name, ms in times.items()}
    every = [m for ms in times.values() for m in ms]
    return {"routes": out, "all": {"p50_ms": round(statistics.median(every), 3),
                                   "p95_ms": round(percentile(every, 95), 3), "requests": len(every)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--without-nodelay", action="store_true", help="also measure a server without TCP_NODELAY")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"rounds": args.rounds, "goal_p50_ms": GOAL_P50_MS, "load": list(os.getloadavg())}
    served = ("--backend", "scripted", "--store", "none", "--assets", str(examples_dir()))
    with serve_child(*served) as (url, _):
        results["nodelay"] = measure(url, args.rounds)
    if args.without_nodelay:
        with serve_child(*served, patch=WITHOUT_NODELAY) as (url, _):
            results["without_nodelay"] = measure(url, max(args.rounds // 10, 5))
    results["met"] = all(r["p50_ms"] <= GOAL_P50_MS for r in results["nodelay"]["routes"].values())
    results["load_after"] = list(os.getloadavg())
    print(json.dumps(results, indent=2))
    if not args.no_write:
        print(write_results("requests", results))


if __name__ == "__main__":
    main()
