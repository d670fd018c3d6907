"""Launch parley-studio as a whole process, as a designer does, and time it to an interactive window.

Writes bench/results/open_process.json. Each launch runs ``parley-studio --exit-when-ready`` (the
console script beside this Python, else ``python -m editor.app``) offscreen with a fresh settings file
and recovery folder; the process prints the seconds from launch (``PARLEY_LAUNCH_TIME``, set just
before it starts) to a shown window that has painted and takes input, and exits. Timed twice over:
with no asset, and with a 500-node asset (``bench_open_large``'s generator), launches alternating.
Targets: under 1.5 s with no asset, and under 1.0 s more with the 500-node asset. The same run also
runs bench_open_large (in-process: asking an open window to open the file, to its first paint) so the
two figures come from one load of the machine; the load averages before and after are recorded.
Compiled modules are kept between launches, as an installed app has them; a few launches without
them (PYTHONDONTWRITEBYTECODE) are recorded beside.

    python bench/bench_open_process.py [--nodes 500] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_open_large import large_asset

from runtime.asset.file import save_asset

TARGET_EMPTY_S = 1.5
TARGET_ASSET_EXTRA_S = 1.0
TIMEOUT_S = 120


def launcher() -> list[str]:
    """``parley-studio`` as installed beside this interpreter (what the command line runs; not a
    version manager's shim in front of it), else the module it runs."""
    script = Path(sys.executable).with_name("parley-studio")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("parley-studio")
    if found and "shims" not in Path(found).parts:
        return [found]
    return [sys.executable, "-m", "editor.app"]


def launch(command: list[str], asset: Path | None, scratch: Path, run: int, bytecode: bool = True) -> dict:
    """One launch to an interactive window: the outside wall time and the process's own phases.

    ``bytecode``: Python's compiled modules are kept between launches (in ``scratch``), as an
    installed app has them; without it every launch compiles the project's modules again (what
    PYTHONDONTWRITEBYTECODE, set on some development machines, does to an editable install)."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", QT_PREFERRED_BINDING="PySide6",
               PARLEY_STUDIO_SETTINGS=str(scratch / f"settings-{run}.ini"),
               PARLEY_STUDIO_RECOVERY=str(scratch / f"recovery-{run}"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")  # not beside the sources of a shared tree
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    args = [*command, "--exit-when-ready", "--size", "1600x1000", *([str(asset)] if asset else [])]
    env["PARLEY_LAUNCH_TIME"] = repr(time.time())
    started = time.perf_counter()
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=scratch)
    assert process.stdout is not None
    line = process.stdout.readline()
    ready = time.perf_counter() - started
    try:
        _out, err = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _out, err = process.communicate()
    exited = time.perf_counter() - started
    if process.returncode != 0 or not line.strip():
        raise RuntimeError(f"{' '.join(args)} exited {process.returncode}: {line}{err[-2000:]}")
    reported = json.loads(line)
    return {"ready_s": round(ready, 4), "exited_s": round(exited, 4), "reported_ready_s": reported["ready_s"],
            "phases_s": reported["phases_s"]}


def median_of(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 4)


def phase_medians(runs: list[dict]) -> dict[str, float]:
    names = runs[0]["phases_s"].keys()
    return {name: round(statistics.median(r["phases_s"][name] for r in runs), 4) for name in names}


def in_process_figure(nodes: int, scratch: Path) -> dict:
    """bench_open_large's open-to-interactive time, run now (its own process, its own file)."""
    out = scratch / "open_large.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "bench_open_large.py"), "--nodes", str(nodes),
                    "--out", str(out)], check=False, capture_output=True, timeout=600, cwd=ROOT)
    result = json.loads(out.read_text())
    return result["open_to_interactive_s"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--uncompiled-runs", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "open_process.json"))
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="parley-open-"))
    asset = scratch / f"large_{args.nodes}.json"
    save_asset(large_asset(args.nodes), asset)
    command = launcher()
    load_before = os.getloadavg()

    launch(command, asset, scratch, -1)  # warm-up: reads every file from disk and compiles the modules
    empty: list[dict] = []
    large: list[dict] = []
    for run in range(args.runs):
        empty.append(launch(command, None, scratch, 2 * run))
        large.append(launch(command, asset, scratch, 2 * run + 1))
    # The same without kept bytecode, fewer times: what a development tree with PYTHONDONTWRITEBYTECODE pays.
    uncompiled = [launch(command, None, scratch, 1000 + run, bytecode=False) for run in range(args.uncompiled_runs)]
    in_process = in_process_figure(args.nodes, scratch)
    load_after = os.getloadavg()
    shutil.rmtree(scratch, ignore_errors=True)

    empty_s = median_of(empty, "ready_s")
    large_s = median_of(large, "ready_s")
    extra = round(large_s - empty_s, 4)
    result = {
        "command": " ".join(Path(part).name if i == 0 else part for i, part in enumerate(command))
                   + " --exit-when-ready --size 1600x1000 [ASSET]",
        "nodes": args.nodes,
        "runs": args.runs,
        "no_asset": {"median_s": empty_s, "max_s": round(max(r["ready_s"] for r in empty), 4),
                     "phase_medians_s": phase_medians(empty), "runs": empty},
        "asset": {"median_s": large_s, "max_s": round(max(r["ready_s"] for r in large), 4),
                  "phase_medians_s": phase_medians(large), "runs": large},
        "asset_beyond_no_asset_s": extra,
        "bytecode": "kept between launches (PYTHONPYCACHEPREFIX in a scratch folder), as an installed app has it",
        "no_asset_without_kept_bytecode": {"median_s": median_of(uncompiled, "ready_s") if uncompiled else None,
                                           "runs": uncompiled},
        "in_process_open_s": in_process,
        "targets": {"no_asset_s": TARGET_EMPTY_S, "asset_beyond_no_asset_s": TARGET_ASSET_EXTRA_S},
        "meets_targets": empty_s < TARGET_EMPTY_S and extra < TARGET_ASSET_EXTRA_S,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(),
        "renderer": "offscreen",
        "python": sys.version.split()[0],
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    summary = {k: result[k] for k in ("asset_beyond_no_asset_s", "in_process_open_s", "meets_targets",
                                      "load_average_before", "load_average_after")}
    print(json.dumps({"no_asset_median_s": empty_s, "asset_median_s": large_s, **summary,
                      "no_asset_phases": result["no_asset"]["phase_medians_s"],
                      "asset_phases": result["asset"]["phase_medians_s"]}, indent=2))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
