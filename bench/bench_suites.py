"""Conversation test suites: a suite of 20 cases x 6 turns on the sample model, at --jobs 1 and
--jobs 2, and the runtime's overhead per turn (running the graph and checking the expectations)
over the model's own time (reading prompts and generating).

    python bench/bench_suites.py            # writes bench/results/suites.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import yaml
from conversation import player_lines, sample_model, write_results

from runtime.backends.llama import LlamaBackend
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.run import run_suites

CASES, TURNS = 20, 6


def suite_file(folder: Path, model: str) -> Path:
    lines = player_lines(CASES * TURNS, seed=11)
    cases = [{"name": f"case {c + 1}",
              "turns": [{"say": lines[c * TURNS + t], "expect": {"path": ["reply"], "reply": {"max_words": 200}}}
                        for t in range(TURNS)]} for c in range(CASES)]
    path = folder / "bench.suite.yaml"
    path.write_text(yaml.safe_dump({"asset": str(examples_dir() / "chat.json"), "model": model, "cases": cases},
                                   sort_keys=False), encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    model = sample_model()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        loaded = load_suite(suite_file(Path(tmp), model))
        for jobs in args.jobs:
            report = run_suites([loaded], LlamaBackend, jobs=jobs)
            turns = sum(len(r.turns) for r in report.results)
            overhead = [(r.seconds - r.model_seconds) / len(r.turns) * 1000 for r in report.results if r.turns]
            runs[jobs] = {
                "wall_s": round(report.seconds, 1), "cases": len(report.results), "turns": turns,
                "passed": sum(r.passed for r in report.results),
                "model_s": round(sum(r.model_seconds for r in report.results), 1),
                "overhead_ms_per_turn_median": round(statistics.median(overhead), 2),
                "overhead_ms_per_turn_max": round(max(overhead), 2),
            }
            print(jobs, runs[jobs])
    summary = {"cases": CASES, "turns_per_case": TURNS, "runs": runs}
    if 1 in runs and 2 in runs:
        summary["speedup_jobs_2"] = round(runs[1]["wall_s"] / runs[2]["wall_s"], 2)
    write_results("suites", summary)
    print(summary)
    return 0 if all(r["passed"] == r["cases"] for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
