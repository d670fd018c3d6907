"""The frozen ``parley-serve`` as a game ships it: how big the folder is, how long it takes from the
process's start to its ``listening on`` line, and to the end of the first turn.

    python bench/bench_serve_executable.py [--runs 5]

Builds dist/parley-serve first when it is missing or older than the sources (``python
packaging/build.py serve``), copies the folder somewhere else, and starts it ``--runs`` times as
tests/packaging/test_serve_executable.py does: an environment without Python, ``--port 0 --store
none``, resources/examples/chat.json as shipped (replies of up to 96 tokens) on the sample model.
Each launch times, from just before the process starts:

- ``listening_s``: to the ``parley serve: listening on`` line on its stdout;
- ``first_turn_s``: to ``turn_finished`` of the first turn of a new session (creating it, loading
  the model, the turn itself), with ``turn_s`` the turn alone (request sent -> turn_finished).

The first launch finds no kept result of llama.cpp's self-check (a fresh ``PARLEY_LLAMA_CHECKS``
file), as on a player's first start, so it also runs the check in a child process; the later ones
read it, as every later start does. Each launch is followed by one of ``python -m runtime serve``
from the checkout with the same arguments (``source``), so the two compare on the same load of the
machine (its compiled modules kept between launches, as an installed package has them). Writes
bench/results/serve_executable.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_serve import commit, load
from conversation import sample_model, write_results  # first: it puts the checkout on sys.path

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from tests.packaging.builds import app_build, built
from tests.packaging.frozen_serve import bare_env, copy_of, frozen_server

ASSET = "chat.json"
LINE = "Good evening. Is there a room for the night?"
TURN_SECONDS = 300.0
MIB = 1024 * 1024


def launch(scratch: Path, run: str, executable: Path | None) -> dict[str, Any]:
    """One start and first turn: of ``executable`` with no Python around it, or (None) of
    ``python -m runtime serve`` in this environment."""
    parley = {"PARLEY_MODELS_DIR": str(scratch / "models"), "PARLEY_SERVE_STATE": str(scratch / run / "state"),
              "PARLEY_LLAMA_CHECKS": str(scratch / f"llama-checks-{'frozen' if executable else 'source'}.json")}
    args = ["--port", "0", "--assets", str(scratch / "agents"), "--store", "none"]
    if executable is not None:
        env = bare_env(scratch / run, **parley)
    else:
        executable, args = Path(sys.executable), ["-m", "runtime", "serve", *args]
        # compiled modules kept between launches (as an installed package has them), in the scratch folder
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(parley, PYTHONPYCACHEPREFIX=str(scratch / "pycache"))
    with frozen_server(executable, args, env) as server:
        url = server.wait_for_address()
        with ParleyClient(url, timeout=TURN_SECONDS) as client:
            npc = client.create_session(ASSET)
            sent = time.perf_counter()
            outcome = client.turn(npc.id, LINE)
            finished = time.perf_counter()
        exit_code = server.stop()
    tokens = outcome.diagnostics.nodes[0].tokens.generated if outcome.diagnostics else None
    return {"listening_s": round(server.listening_seconds, 3), "first_turn_s": round(finished - server.started, 3),
            "turn_s": round(finished - sent, 3), "generated_tokens": tokens, "reply_chars": len(outcome.reply),
            "exit_code": exit_code}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and maxima of the launches after the first (which ran llama.cpp's self-check), and the first."""
    later = runs[1:] or runs
    return {
        "listening_s": {"median": round(statistics.median(r["listening_s"] for r in later), 3),
                        "max": max(r["listening_s"] for r in later), "first_start": runs[0]["listening_s"]},
        "first_turn_s": {"median": round(statistics.median(r["first_turn_s"] for r in later), 3),
                         "max": max(r["first_turn_s"] for r in later),
                         "first_start_with_self_check": runs[0]["first_turn_s"]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="launches (the first one runs llama.cpp's self-check)")
    parser.add_argument("--no-write", action="store_true", help="print the results only")
    args = parser.parse_args()

    build_started = time.perf_counter()
    executable = built("serve")
    build_s = time.perf_counter() - build_started
    folder = executable.parent
    size = app_build.folder_size(folder)
    parts = {name: round(part / MIB, 1) for part, name in app_build.largest_parts(folder, 10)}
    model = Path(sample_model())
    with tempfile.TemporaryDirectory(prefix="parley-serve-bench-") as tmp:
        scratch = Path(tmp)
        (scratch / "models").mkdir()
        (scratch / "models" / model.name).symlink_to(model)
        (scratch / "agents").mkdir()
        (scratch / "agents" / ASSET).write_bytes((examples_dir() / ASSET).read_bytes())
        shipped = copy_of(executable, scratch / "shipped")
        load_before = load()
        runs, source = [], []
        for run in range(args.runs):  # alternating, so both see the same load
            runs.append(launch(scratch, f"frozen-{run}", shipped))
            source.append(launch(scratch, f"source-{run}", None))
            print(f"launch {run + 1}/{args.runs}: frozen {runs[-1]}, source {source[-1]}", file=sys.stderr)
        load_after = load()
    results = {
        "command": f"parley-serve --port 0 --assets DIR --store none ({ASSET}, sample model)",
        "commit": commit(),
        "folder_mib": round(size / MIB, 1),
        "files": sum(1 for p in folder.rglob("*") if p.is_file()),
        "largest_parts_mib": parts,
        "build_or_reuse_s": round(build_s, 1),
        "runs": args.runs,
        **summary(runs),
        "source": {"command": "python -m runtime serve (same arguments)", **summary(source), "launches": source},
        "load_before": load_before,
        "load_after": load_after,
        "launches": runs,
    }
    if args.no_write:
        import json

        print(json.dumps(results, indent=2))
    else:
        write_results("serve_executable", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
