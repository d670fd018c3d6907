"""First-token time of ``parley serve`` on the sample model while the game holds a core: the new
default threads (leaving the game a core) against the old ones (half the CPUs to generate, all of
them to read prompts), and both with no game running for reference.

    python bench/bench_cpu_share.py                # ~5 min on 2 cores: bench/results/cpu_share.json
    python bench/bench_cpu_share.py --turns 2 --no-write   # a smoke run

The game is a process that spins on one core (``--game-cores``) for the whole run. Each server is a
``parley serve --port 0`` subprocess on chat.json with the sample model (max_tokens cut to
``--max-tokens``); a session says ``--turns`` player lines, a new session for each line so every
turn reads its whole prompt (system prompt and line) cold. Per turn: the time from the request to
the first ``token`` event, as the client sees it; median and p95.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conversation import player_lines, sample_model, serve_child, write_results

from runtime.serve.client import ParleyClient
from runtime.serve.server import serve_threads, usable_cpus

SPIN = "while True:\n    pass\n"


@contextmanager
def game(cores: int):
    """``cores`` processes that each keep a core busy, as a game's main loop does."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(cores)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def first_tokens(url: str, lines: list[str]) -> list[float]:
    out = []
    with ParleyClient(url, timeout=600) as client:
        warm = client.create_session("chat.json")
        client.turn(warm.id, "Hello")  # the model's load
        for line in lines:
            npc = client.create_session("chat.json")
            start = time.perf_counter()
            for event in client.stream_turn(npc.id, line):
                if event.kind == "token":
                    out.append((time.perf_counter() - start) * 1000)
                    break
            client.delete_session(npc.id)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"median_ms": round(statistics.median(ms), 1), "p95_ms": round(ordered[int(0.95 * (len(ms) - 1))], 1),
            "max_ms": round(ordered[-1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--game-cores", type=int, default=1)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    cpus = usable_cpus()
    new = serve_threads(None, None, cpus)
    old = (max(cpus // 2, 1), cpus)  # LlamaBackend's own default, which parley serve used before
    configs = {"new_default": new, "old_default": old}
    results: dict[str, Any] = {"cpus": cpus, "threads": {k: {"generate": v[0], "prompt": v[1]} for k, v in configs.items()},
                               "turns": args.turns, "game_cores": args.game_cores, "load": list(os.getloadavg())}
    lines = player_lines(args.turns)
    with tempfile.TemporaryDirectory() as folder:
        from runtime.resources import examples_dir

        raw = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
        raw["default_model"] = sample_model()
        for node in raw["nodes"]:
            if "max_tokens" in node:
                node["max_tokens"] = args.max_tokens
        (Path(folder) / "chat.json").write_text(json.dumps(raw), encoding="utf-8")
        for busy in (True, False):
            for name, (threads, batch) in configs.items():
                flags = ["--threads", str(threads), "--threads-batch", str(batch)]
                with serve_child("--assets", folder, "--store", "none", *flags) as (url, _):
                    if busy:
                        with game(args.game_cores):
                            ms = first_tokens(url, lines)
                    else:
                        ms = first_tokens(url, lines)
                key = f"{name}_{'game_busy' if busy else 'no_game'}"
                results[key] = summary(ms)
                print(key, results[key], flush=True)
    results["load_after"] = list(os.getloadavg())
    print(json.dumps(results, indent=2))
    if not args.no_write:
        print(write_results("cpu_share", results))


if __name__ == "__main__":
    main()
