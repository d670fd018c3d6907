"""Remote backends: the embedded engine against llama.cpp's server on the same asset and script, 1
against 2 servers on one suite, and how soon Stop closes a streaming request.

    python bench/bench_remote.py            # writes bench/results/remote.json

1. **Embedded vs server.** The intent router (a classifier and three reply nodes) runs one 12-line
   script on ``LlamaBackend`` (reproducible, the default, and ``reproducible=False``) and on a
   llama.cpp server with a slot per node (4 slots; 1 thread to generate, 2 to read prompts, as the
   embedded engine uses here). Per node: the reused share of its prompts after its first call, and
   the time per turn.
2. **1 vs 2 servers.** bench_suites.py's suite (20 cases x 6 turns on the chat example), each server with one
   thread: one server with ``--jobs 1``, then two servers with ``--jobs 2`` (a fleet). Wall-time ratio.
3. **Stop.** 10 long replies stopped at their first token: milliseconds from ``cancel.set()`` until
   ``generate`` returns, on the llama.cpp server and the OpenAI-compatible backend.

The servers are started here on 127.0.0.1 (``tests/servers.py``; llama-server is built on first use).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from conversation import ROOT, sample_model, write_results

sys.path.insert(0, str(ROOT))
from bench_suites import suite_file

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.base import ChatMessage, GenerationRequest
from runtime.backends.llama import LlamaBackend
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.suites.file import load_suite
from runtime.suites.run import Server, run_suites
from tests.servers import llama_server

ROUTER = ROOT / "resources" / "examples" / "intent_router.json"
ROUTER_LINES = ["Excuse me, how do I get to the market square?", "Lovely weather we are having today.",
                "Where can I find the blacksmith?", "Open the gate or I will break it down!",
                "What is the news from the north road?", "How far is it to the river crossing?",
                "Tell me about the harvest festival.", "Which way to the inn?", "I like your armour.",
                "Is the bridge still broken?", "Can you point me to the temple?", "Farewell, guard."]
STOP_TRIALS = 10


def run_script(backend) -> dict:
    agent = Agent(load_asset(ROUTER), backend, str(ROUTER.parent))
    seen: set[str] = set()
    per_node: dict[str, dict[str, int]] = {}
    turn_ms = []
    for line in ROUTER_LINES:
        started = time.perf_counter()
        result = agent.run_turn(line)
        turn_ms.append((time.perf_counter() - started) * 1000)
        for node in result.diagnostics.nodes:
            if node.node in seen:  # after its first call: what its cache kept
                row = per_node.setdefault(node.node, {"calls": 0, "prompt": 0, "reused": 0, "evaluated": 0})
                row["calls"] += 1
                row["prompt"] += node.tokens.prompt
                row["reused"] += node.tokens.reused
                row["evaluated"] += node.tokens.evaluated
            seen.add(node.node)
    for row in per_node.values():
        row["reused_share"] = round(row["reused"] / row["prompt"], 3) if row["prompt"] else None
    return {"turn_ms_mean": round(statistics.mean(turn_ms), 1), "turn_ms_median": round(statistics.median(turn_ms), 1),
            "nodes": per_node}


def stop_latency(session) -> list[float]:
    messages = [ChatMessage("user", "Tell me a very long story about a dragon and a knight.")]
    out = []
    for trial in range(STOP_TRIALS):
        cancel = threading.Event()
        marks: list[float] = []

        def first(_piece: str, cancel=cancel, marks=marks) -> None:
            if not marks:
                marks.append(time.perf_counter())
                cancel.set()

        result = session.generate(GenerationRequest(messages, 2000, seed=trial), on_token=first, cancel=cancel)
        assert result.cancelled
        out.append((time.perf_counter() - marks[0]) * 1000)
    return out


def main() -> int:
    model = Path(sample_model())
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        embedded = LlamaBackend()
        results["embedded"] = run_script(embedded)
        embedded.close()
        fast = LlamaBackend(reproducible=False)
        results["embedded_fast"] = run_script(fast)
        fast.close()
        with llama_server(model, folder / "one", slots=4, threads=1, threads_batch=2) as server:
            remote = LlamaServerBackend(server.url, "bench")
            results["llama_server"] = run_script(remote)
            stops = stop_latency(LlamaServerBackend(server.url, "bench").session("stop", "", 0))
            results["stop_ms_llama_server"] = {"max": round(max(stops), 1), "median": round(statistics.median(stops), 1)}
            stops = stop_latency(OpenAIBackend(server.url, "bench").session("stop", "", 0))
            results["stop_ms_openai_backend"] = {"max": round(max(stops), 1),
                                                 "median": round(statistics.median(stops), 1)}
        for name in ("embedded", "embedded_fast", "llama_server"):
            print(name, results[name])

        loaded = load_suite(suite_file(folder, str(model)))
        fleet_runs = {}
        with llama_server(model, folder / "a", slots=4, threads=1) as a, \
                llama_server(model, folder / "b", slots=4, threads=1) as b:
            for count in (1, 2):
                servers = [Server("a", lambda: LlamaServerBackend(a.url, "a")),
                           Server("b", lambda: LlamaServerBackend(b.url, "b"))][:count]
                report = run_suites([loaded], servers, jobs=count)
                fleet_runs[count] = {"wall_s": round(report.seconds, 1), "cases": len(report.results),
                                     "passed": sum(r.passed for r in report.results),
                                     "per_server": {s.name: sum(r.server == s.name for r in report.results)
                                                    for s in servers}}
                print(count, fleet_runs[count])
        results["fleet"] = {"suite": "20 cases x 6 turns on chat.json (bench_suites.py's suite)",
                            "one_server_jobs_1": fleet_runs[1], "two_servers_jobs_2": fleet_runs[2],
                            "wall_ratio": round(fleet_runs[1]["wall_s"] / fleet_runs[2]["wall_s"], 2)}
    write_results("remote", results)
    print(results["fleet"], results["stop_ms_llama_server"], results["stop_ms_openai_backend"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
