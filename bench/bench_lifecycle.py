"""How long ``parley serve`` takes to end, the way a game ends it. Goal: at most 2 s from the stop to
the process's exit, whatever it is doing.

    python bench/bench_lifecycle.py                # ~2 min: bench/results/lifecycle.json
    python bench/bench_lifecycle.py --repeat 1 --no-write   # a smoke run

Each case starts a ``parley serve --port 0`` subprocess, sets it busy, stops it, and times the stop
(sent) to the process's exit (waited on), ``--repeat`` times; median and max:

- ``sigterm_tool_wait_and_observer``: scripted backend; one session's turn waits for a tool result
  nobody sends (``--tool-timeout 60``) while an observer watches another session (the editor's
  attach). Before the bounded stop, this waited out the tool timeout, then never ended at all.
- ``shutdown_request``: the same, stopped by ``POST /v1/shutdown`` with the token.
- ``sigterm_generating``: the sample model, on the embedded engine, in the middle of a reply.
- ``stdin_closed``: ``--exit-with-parent``, idle, its standard input closed (the game gone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from conversation import sample_model, serve_child, write_results

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError
from runtime.serve.lifecycle import SHUTDOWN_SECONDS

TOKEN = "bench-lifecycle-0123456789abcdef"


@contextlib.contextmanager
def served(*args: str, stdin: int | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    with serve_child(*args, env={"PARLEY_SERVE_TOKEN": TOKEN}, stdin=stdin) as (url, process):
        yield url, process


def stop_timed(process: subprocess.Popen, stop: Callable[[], Any]) -> float:
    start = time.perf_counter()
    stop()
    process.wait(timeout=120)
    return time.perf_counter() - start


def drain(events) -> threading.Thread:
    def read() -> None:
        try:
            for _ in events:
                pass
        except ParleyError:
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def busy_with_tools_and_observer(url: str) -> ParleyClient:
    client = ParleyClient(url, token=TOKEN, timeout=120, resume_waits=())
    client.create_session("tool_calling.json", id="quartermaster")
    client.create_session("chat.json", id="innkeeper")
    drain(iter(client.watch("innkeeper")))
    turn = client.stream_turn("quartermaster", "How many arrows?")
    for event in turn:
        if event.kind == "tool_request":
            break
    drain(turn)
    return client


SCRIPTED = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none", "--tool-timeout", "60")


def sigterm_tool_wait_and_observer(_assets: Path) -> float:
    with served(*SCRIPTED) as (url, process):
        client = busy_with_tools_and_observer(url)
        seconds = stop_timed(process, lambda: process.send_signal(signal.SIGTERM))
    client.close()
    return seconds


def shutdown_request(_assets: Path) -> float:
    with served(*SCRIPTED) as (url, process):
        client = busy_with_tools_and_observer(url)
        seconds = stop_timed(process, lambda: httpx.post(f"{url}/v1/shutdown",
                                                         headers={"Authorization": f"Bearer {TOKEN}"}))
    client.close()
    return seconds


def sigterm_generating(assets: Path) -> float:
    with served("--assets", str(assets), "--store", "none") as (url, process):
        client = ParleyClient(url, token=TOKEN, timeout=300, resume_waits=())
        client.create_session("chat.json", id="innkeeper")
        turn = client.stream_turn("innkeeper", "Tell me the longest story you know, about the old king.")
        for event in turn:
            if event.kind == "token":
                break
        drain(turn)
        seconds = stop_timed(process, lambda: process.send_signal(signal.SIGTERM))
    client.close()
    return seconds


def stdin_closed(_assets: Path) -> float:
    with served(*SCRIPTED, "--exit-with-parent", stdin=subprocess.PIPE) as (_url, process):
        assert process.stdin is not None
        return stop_timed(process, process.stdin.close)


CASES = [sigterm_tool_wait_and_observer, shutdown_request, sigterm_generating, stdin_closed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"limit_seconds": SHUTDOWN_SECONDS, "repeat": args.repeat, "load": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as folder:
        raw = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
        raw["default_model"] = sample_model()
        for node in raw["nodes"]:
            if "max_tokens" in node:
                node["max_tokens"] = 2000  # still generating when the stop comes
        (Path(folder) / "chat.json").write_text(json.dumps(raw), encoding="utf-8")
        for case in CASES:
            seconds = [case(Path(folder)) for _ in range(args.repeat)]
            results[case.__name__] = {"median_s": round(statistics.median(seconds), 3), "max_s": round(max(seconds), 3),
                                      "all_s": [round(s, 3) for s in seconds]}
            print(case.__name__, results[case.__name__], flush=True)
    results["met"] = all(results[c.__name__]["max_s"] <= SHUTDOWN_SECONDS for c in CASES)
    results["load_after"] = list(os.getloadavg())
    print(json.dumps(results, indent=2))
    if not args.no_write:
        print(write_results("lifecycle", results))


if __name__ == "__main__":
    main()
