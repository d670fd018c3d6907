"""How long ``parley doctor`` takes on the sample model (the goal: under 30 s), and what it says.

Runs the embedded self-test at the default settings (the layout probes of every setting, then the
replay cases through an agent), times each part, and keeps the verdicts; then again on one thread
(``--threads 1``). ``--server`` also runs it on llama.cpp's server (built by
packaging/build_llama_server.py; 4 slots, 1 thread), with cache_prompt on and off. The machine is
shared: the load average before and after each run is kept, since reading on 2 threads slows down
many times over while another process holds a core (llama.cpp's threads wait for each other at
every step), and one-thread runs show what the self-test costs without that.

    python bench/bench_doctor.py             # bench/results/doctor.json
    python bench/bench_doctor.py --server    # the same, and llama.cpp's server
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conversation import ROOT, sample_model, write_results

from runtime.doctor.self_test import SelfTestReport, embedded_report, server_report

GOAL_SECONDS = 30.0


def summary(report: SelfTestReport) -> dict[str, Any]:
    return {
        "seconds": round(report.seconds, 2),
        "passed": report.passed,
        "settings": {row.setting: {"reproducible": row.reproducible, "reason": row.reason, "chosen": row.chosen}
                     for row in report.settings},
        "probe_seconds": {p.name: round(p.seconds, 2) for p in report.numerics if p.allowed},
        "runs": [{"configuration": run.configuration, "chosen": run.chosen, "seconds": round(run.seconds, 2),
                  "cases": {c.name: {"status": c.status, "seconds": round(c.seconds, 2), "detail": c.detail}
                            for c in run.cases}} for run in report.runs],
        "alternative": report.alternative,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", action="store_true", help="also run it on llama.cpp's server")
    args = parser.parse_args()
    model = sample_model()
    results: dict[str, Any] = {"goal_seconds": GOAL_SECONDS}
    for name, threads in (("embedded", None), ("embedded_one_thread", 1)):
        load_before = os.getloadavg()
        started = time.perf_counter()
        report = embedded_report(model, threads=threads, progress=lambda text: print(f"  {text}", flush=True))
        wall = time.perf_counter() - started
        results[name] = {**summary(report), "wall_seconds": round(wall, 2), "within_goal": wall < GOAL_SECONDS,
                         "load_average_before": [round(x, 2) for x in load_before],
                         "load_average_after": [round(x, 2) for x in os.getloadavg()]}
        print(f"{name}: {wall:.1f} s, passed: {report.passed}")
    if args.server:
        sys.path.insert(0, str(ROOT))
        from runtime.backends.llama_server import LlamaServerBackend
        from tests.servers import llama_server

        with tempfile.TemporaryDirectory() as folder, \
                llama_server(Path(model), Path(folder), slots=4, threads=1) as server:
            started = time.perf_counter()
            remote = server_report(lambda: LlamaServerBackend(server.url, "bench"),
                                   progress=lambda text: print(f"  {text}", flush=True))
            results["llama_server"] = {**summary(remote), "wall_seconds": round(time.perf_counter() - started, 2),
                                       "server_threads": 1}
        print(f"llama.cpp server: {results['llama_server']['wall_seconds']:.1f} s")
    write_results("doctor", results, merge=not args.server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
