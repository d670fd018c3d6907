"""A soak of `parley serve`: create, turn and delete cycles on the scripted backend, with the server's
memory sampled (issue 39: it grew by about 59 KB a cycle, +175 MB after 3,000).

The server runs as a child process (as a game runs it), with its default session store; each cycle
creates a session on the gate guard (a Subgraph node's behaviour: four node caches), runs one turn
through the behaviour, and deletes the session. The server's resident memory (VmRSS) is sampled every
``--every`` cycles. Target: after warm-up (the first ``--warm-up`` cycles) it grows by at most 10 MB.

    python bench/bench_serve_soak.py                   # 10,000 cycles: bench/results/serve_soak.json
    python bench/bench_serve_soak.py --cycles 1000     # a shorter run (not written unless --write)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx
from conversation import ROOT, serve_child, write_results

CYCLES = 10_000
WARM_UP = 1_000
EVERY = 250
MAX_GROWTH_MIB = 10.0
ASSET = "gate_guard.json"
LINE = "I threaten you: step aside, or else!"


def rss_of(pid: int) -> float:
    """The process's resident memory in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cycle(http: httpx.Client, index: int) -> None:
    created = http.post("/v1/sessions", json={"asset": ASSET})
    created.raise_for_status()
    session = created.json()["id"]
    with http.stream("POST", f"/v1/sessions/{session}/turns", json={"line": f"{LINE} ({index})"}) as answer:
        answer.raise_for_status()
        kinds = [line[len("event: "):] for line in answer.iter_lines() if line.startswith("event: ")]
    if kinds[-1:] != ["turn_finished"]:
        raise RuntimeError(f"cycle {index}: the turn ended with {kinds[-1:]}")
    http.delete(f"/v1/sessions/{session}").raise_for_status()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=CYCLES)
    parser.add_argument("--warm-up", type=int, default=WARM_UP)
    parser.add_argument("--every", type=int, default=EVERY)
    parser.add_argument("--write", action="store_true", help="write the results of a shorter run too")
    args = parser.parse_args()
    samples: list[dict[str, float]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as state:
        env = {"PARLEY_SERVE_STATE": state}
        with serve_child("--backend", "scripted", "--assets", str(ROOT / "resources" / "examples"), env=env) as (
                url, process), httpx.Client(base_url=url, timeout=60) as http:
            for index in range(args.cycles + 1):
                if index % args.every == 0:
                    samples.append({"cycle": index, "rss_mib": round(rss_of(process.pid), 2),
                                    "seconds": round(time.perf_counter() - started, 1)})
                    print(f"cycle {index:6d}: {samples[-1]['rss_mib']:.1f} MiB", flush=True)
                if index < args.cycles:
                    cycle(http, index)
            sessions = http.get("/v1/sessions").json()["sessions"]
    after = [s for s in samples if s["cycle"] >= args.warm_up]
    growth = round(max(s["rss_mib"] for s in after) - after[0]["rss_mib"], 2) if after else None
    summary = {
        "cycles": args.cycles, "warm_up": args.warm_up, "asset": ASSET, "backend": "scripted",
        "rss_mib_at_warm_up": after[0]["rss_mib"] if after else None,
        "rss_mib_at_end": samples[-1]["rss_mib"],
        "growth_after_warm_up_mib": growth,
        "growth_per_1000_cycles_kib": round(growth * 1024 / max(1, (args.cycles - args.warm_up) / 1000), 1)
        if growth is not None else None,
        "sessions_left": len(sessions),
        "target_max_growth_mib": MAX_GROWTH_MIB,
        "pass": growth is not None and growth <= MAX_GROWTH_MIB and not sessions,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary, indent=1))
    if args.cycles == CYCLES or args.write:
        write_results("serve_soak", {"summary": summary, "samples": samples})
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
