"""Parked caches under a RAM cap: does ``parley serve --kv-budget``'s memory stay flat while many NPCs talk?

``--npcs`` NPC sessions of chat.json (its replies cut to ``--max-tokens``) take turns round robin,
``--rounds`` lines each, through the real server (``running_server``, in this process) on one
embedded ``LlamaBackend`` whose ``--kv-budget-mib`` holds a few chat contexts: every NPC's cache is
parked before its next turn and restored then. Twice, each in a fresh process (resident memory is
the process's): with the parked snapshots' RAM capped at ``--park-mib`` (the rest spilled to files),
and uncapped (the behaviour before ``park_mib``: a cap no run reaches). After each round the
process's VmRSS (/proc/self/status) and ``kv_stats`` are sampled. Reported per run: RSS after the
model's load, after ``--warm-up`` rounds and at the end; the slope of RSS in MiB per round over the
second half of the rounds (least squares); parked and spilled counts and MiB; the spill folder's
bytes; seconds per round. The goal: with the cap, a slope near 0 (what grows then is the sessions'
own histories and turn records, kilobytes a turn). ``--trace`` also compares tracemalloc snapshots
after the warm-up and at the end, and keeps the lines that grew most (slow: a run takes ~2x).

    python bench/bench_park_soak.py                          # 40 NPCs x 8 rounds: bench/results/park_soak.json
    python bench/bench_park_soak.py --npcs 6 --rounds 3      # a smoke run (written only with --write)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict
from pathlib import Path
from typing import Any

from conversation import ROOT, player_lines, write_results

EXAMPLES = ROOT / "resources" / "examples"
ASSET = "chat.json"
NPCS = 40
ROUNDS = 8
KV_BUDGET_MIB = 300.0  # three of the chat example's 2048-token contexts (~92 MiB each)
PARK_MIB = 32.0
UNCAPPED_MIB = 1e9
MAX_TOKENS = 16
THREADS = 1  # llama.cpp's threads wait for each other: on a shared 2-core machine one each is steadier
WARM_UP = 2


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.exists() else 0


def slope(ys: list[float]) -> float:
    """Least-squares MiB per round of ``ys`` (one a round)."""
    n = len(ys)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(ys) / n
    return sum((x - mean_x) * (y - mean_y) for x, y in enumerate(ys)) / sum((x - mean_x) ** 2 for x in range(n))


def assets(scratch: Path, max_tokens: int) -> Path:
    data = json.loads((EXAMPLES / ASSET).read_text(encoding="utf-8"))
    for node in data["nodes"]:
        if "max_tokens" in node:
            node["max_tokens"] = max_tokens
    folder = scratch / "assets"
    folder.mkdir()
    (folder / ASSET).write_text(json.dumps(data), encoding="utf-8")
    return folder


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One configuration in this process: the NPCs' rounds through the server, sampled after each."""
    from runtime.backends.llama import LlamaBackend
    from runtime.serve.client import ParleyClient
    from runtime.serve.server import running_server

    with tempfile.TemporaryDirectory(prefix="park-soak-") as tmp:
        scratch = Path(tmp)
        folder = assets(scratch, args.max_tokens)
        spill_dir = scratch / "parked"
        backend = LlamaBackend(str(folder), kv_budget_mib=args.kv_budget_mib, park_mib=args.run, park_dir=spill_dir,
                               n_threads=args.threads, n_threads_batch=args.threads)
        rss_before_load = rss_mib()
        backend.load_model(json.loads((folder / ASSET).read_text())["default_model"])
        lines = player_lines(args.npcs * args.rounds, seed=31)
        rounds: list[dict[str, Any]] = []
        top: list[dict[str, Any]] = []
        try:
            with running_server(backend, [folder], workers=2) as url, ParleyClient(url, timeout=600) as client:
                sessions = [client.create_session(ASSET, id=f"npc-{i}").id for i in range(args.npcs)]
                rss_start = rss_mib()
                traced_from = None
                for r in range(args.rounds):
                    started = time.perf_counter()
                    for i, session in enumerate(sessions):
                        for event in client.stream_turn(session, lines[r * args.npcs + i]):
                            if event.kind == "turn_failed":
                                raise RuntimeError(f"{session} round {r + 1}: {event.data}")
                    stats = backend.kv_stats()
                    rounds.append({"round": r + 1, "rss_mib": round(rss_mib(), 1),
                                   "seconds": round(time.perf_counter() - started, 1),
                                   "spill_folder_mib": round(folder_bytes(spill_dir) / 2**20, 1),
                                   **{k: (round(v, 1) if isinstance(v, float) else v)
                                      for k, v in asdict(stats).items()}})
                    print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
                    if args.trace and r + 1 == args.warm_up:
                        tracemalloc.start(8)
                        traced_from = tracemalloc.take_snapshot()
                if traced_from is not None:
                    grown = tracemalloc.take_snapshot().compare_to(traced_from, "lineno")
                    top = [{"where": str(s.traceback[0]), "grew_kib": round(s.size_diff / 1024, 1),
                            "blocks": s.count_diff} for s in grown[:args.trace]]
                    tracemalloc.stop()
        finally:
            backend.close()
        spill_left = spill_dir.exists() and any(spill_dir.iterdir())
    rss = [r["rss_mib"] for r in rounds]
    half = rss[len(rss) // 2:]
    warm = rounds[min(args.warm_up, len(rounds)) - 1]
    last = rounds[-1]
    return {
        "park_mib": args.run, "rss_mib": {
            "before_load": round(rss_before_load, 1), "start": round(rss_start, 1),
            "after_warm_up": warm["rss_mib"], "end": last["rss_mib"], "peak": max(rss)},
        "slope_mib_per_round_second_half": round(slope(half), 2),
        "slope_mib_per_round_after_warm_up": round(slope(rss[args.warm_up - 1:]), 2),
        "end": {k: last[k] for k in ("live_contexts", "live_mib", "parked", "parked_mib", "spilled", "spilled_mib",
                                      "parks", "restores", "handovers", "spills", "spill_failures",
                                      "spill_folder_mib")},
        "round_seconds_median": sorted(r["seconds"] for r in rounds)[len(rounds) // 2],
        "spill_folder_left_after_close": spill_left,
        "tracemalloc_top_growth_after_warm_up": top,
        "rounds": rounds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--npcs", type=int, default=NPCS, help="NPC sessions taking turns round robin")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="lines each NPC says")
    parser.add_argument("--kv-budget-mib", type=float, default=KV_BUDGET_MIB, help="what live contexts may take")
    parser.add_argument("--park-mib", type=float, default=PARK_MIB, help="the capped run's RAM for parked caches")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="each reply's max_tokens")
    parser.add_argument("--threads", type=int, default=THREADS, help="llama.cpp threads, to generate and to read")
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help="rounds before 'after warm-up'")
    parser.add_argument("--trace", type=int, default=0, metavar="N",
                        help="keep the N source lines whose allocations grew most after the warm-up (tracemalloc)")
    parser.add_argument("--run", type=float, help=argparse.SUPPRESS)  # one configuration, in this process
    parser.add_argument("--write", action="store_true", help="write the results of a smaller run too")
    args = parser.parse_args()
    if args.run is not None:
        print(json.dumps(one_run(args)))
        return 0
    runs = {}
    load_before = os.getloadavg()
    for name, cap in (("capped", args.park_mib), ("uncapped", UNCAPPED_MIB)):
        argv = [sys.executable, __file__, "--run", str(cap), "--npcs", str(args.npcs), "--rounds", str(args.rounds),
                "--kv-budget-mib", str(args.kv_budget_mib), "--max-tokens", str(args.max_tokens),
                "--warm-up", str(args.warm_up), "--trace", str(args.trace), "--threads", str(args.threads)]
        print(f"{name}: park_mib {cap:g}", flush=True)
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
        runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
        r = runs[name]
        print(f"{name}: RSS {r['rss_mib']}, slope {r['slope_mib_per_round_second_half']} MiB/round, end {r['end']}",
              flush=True)
    summary = {
        "npcs": args.npcs, "rounds": args.rounds, "asset": ASSET, "max_tokens": args.max_tokens,
        "kv_budget_mib": args.kv_budget_mib, "park_mib": args.park_mib, "threads": args.threads,
        "through": "running_server + ParleyClient",
        "slope_mib_per_round_second_half": {k: r["slope_mib_per_round_second_half"] for k, r in runs.items()},
        "rss_end_minus_start_mib": {k: round(r["rss_mib"]["end"] - r["rss_mib"]["start"], 1) for k, r in runs.items()},
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
    }
    print(json.dumps(summary))
    if args.write or (args.npcs >= NPCS and args.rounds >= ROUNDS):
        write_results("park_soak", {"summary": summary, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
