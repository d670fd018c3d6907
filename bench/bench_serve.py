"""``parley serve`` under load: per-turn latency with several clients at once, and the server's own
overhead per turn.

    python bench/bench_serve.py --part latency    # ~4 min: serve.json "latency"
    python bench/bench_serve.py --part overhead   # ~1.5 min (--py-spy DIR: 1 more): serve.json "overhead"
    python bench/bench_serve.py                   # both (each part keeps the other's key in the file)
    python bench/bench_serve.py --part latency --clients 1,2 --turns 2 --max-tokens 16 --no-write   # a smoke run

The server runs as a ``parley serve --port 0`` subprocess (the way a game talks to it: the bench's
client threads never share a GIL with the server), on the assets of resources/examples (or a copy
of the asset with a smaller ``max_tokens`` in a temporary folder, with ``--max-tokens``).

1. **Latency.** 1, 4 and 8 clients at once (``--clients``), each a thread with its own
   ``ParleyClient`` and its own session, say ``--turns`` short player lines one after another on
   chat.json (``--asset``). Per turn: the time from sending the request to ``turn_finished`` and to
   the first ``token`` event (time to first token); p50 and p95 over every turn of every client.
   Backends: the embedded engine (``--backend embedded``, its default threads: 1 to generate, all to
   read prompts), and llama.cpp's server (tests/servers.py; built by packaging/build_llama_server.py,
   cached) with ``--slots`` slots, 1 thread to generate and 2 to read prompts, behind
   ``--backend llama+http://...``. A warm-up turn runs first on each server (the model's load).
2. **Overhead.** One client, turns one after another: each turn's client-observed wall time
   (request sent -> ``turn_finished`` received) minus the turn's own ``diagnostics.total_ms`` (the
   asset has ``enable_diagnostics``), on ``--backend scripted`` (``--scripted-turns``, cheap) and on
   the embedded sample model (``--model-turns``). Goal: a median at most 5 ms. Then where it goes:
   the same again on a probed server (``--probe-turns``, ``--probe-model-turns``; ``probed_main``
   wraps the serve path's functions to note when each runs, in the server's process, on the clock
   the bench reads too), split into the segments of a turn's critical path (``SEGMENTS``: request
   -> route -> worker thread -> the agent's turn ... its end -> record -> event loop -> SSE frame ->
   the client). On scripted, the same turns also run in-process (an Agent, as ``parley chat`` runs
   them): ``served_vs_in_process`` has both turn times side by side. ``--py-spy DIR`` also samples
   the server with py-spy (collapsed stacks in DIR) and keeps each thread's most frequent functions.

The machine's load average is kept at the start and end of each part: on a shared machine a busy
moment shows in it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conversation import ROOT, player_lines, sample_model, write_results

from runtime.serve.client import ParleyClient

EXAMPLES = ROOT / "resources" / "examples"
GOAL_OVERHEAD_MS = 5.0
START_SECONDS = 120  # parley serve prints its address once it accepts connections
LISTENING = "parley serve: listening on "


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def commit() -> dict[str, Any]:
    """HEAD, and the tracked files the work tree changes (other work in progress the bench ran with)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                             capture_output=True, text=True, check=False).stdout.splitlines()
    return {"head": head.stdout.strip(), "uncommitted_changes_to": [line[3:] for line in changed]}


def pct(values: list[float], p: float) -> float | None:
    """The ``p``-th percentile of ``values`` (linear between the two nearest ranks)."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return round(s[lo] + (s[hi] - s[lo]) * (k - lo), 2)


def spread(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": pct(values, 50), "p95": pct(values, 95),
            "mean": round(statistics.mean(values), 2) if values else None,
            "min": round(min(values), 2) if values else None, "max": round(max(values), 2) if values else None}


def parley_command() -> list[str]:
    """``parley`` from this checkout (run in ROOT), whether or not the package is installed."""
    return [sys.executable, "-c", "import sys; from runtime.cli import main; sys.exit(main())"]


@contextlib.contextmanager
def parley_serve(backend: str, assets: Path, log: Path, marks: Path | None = None
                 ) -> Iterator[tuple[str, subprocess.Popen]]:
    """``parley serve --port 0`` in a child process; yields its URL once it said it listens. With
    ``marks``, the server is probed (``probed_main``) and notes its marks there."""
    start = parley_command() if marks is None else [
        sys.executable, "-c",
        "import sys; sys.path.insert(0, 'bench'); import bench_serve; sys.exit(bench_serve.probed_main())"]
    # a store of its own beside the log (the default's, as a game runs it, but never the user's sessions)
    store = log.with_name(f"{log.stem}-{time.monotonic_ns()}.sqlite3")
    command = start + ["serve", "--port", "0", "--backend", backend, "--assets", str(assets),
                       "--store", f"sqlite:{store}"]
    err = open(log, "wb")  # noqa: SIM115 - open for the child's whole life
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", **({MARKS_ENV: str(marks)} if marks else {})},
                               cwd=ROOT)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise RuntimeError(f"parley serve did not start in {START_SECONDS} s: {log.read_text()[-2000:]}"
                                   ) from None
            if line is None:
                raise RuntimeError(f"parley serve exited ({process.wait()}): {log.read_text()[-2000:]}")
            if line.startswith(LISTENING):
                break
        yield line[len(LISTENING):].strip(), process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        err.close()


def asset_folder(asset: str, max_tokens: int | None, scratch: Path) -> tuple[Path, dict[str, Any]]:
    """The assets folder to serve: the examples, or a copy of ``asset`` with every node's max_tokens
    at most ``max_tokens``."""
    if max_tokens is None:
        return EXAMPLES, {"asset": asset, "assets_folder": "resources/examples", "max_tokens": "as the asset has"}
    data = json.loads((EXAMPLES / asset).read_text(encoding="utf-8"))
    for node in data["nodes"]:
        if "max_tokens" in node:
            node["max_tokens"] = min(node["max_tokens"], max_tokens)
    folder = scratch / "assets"
    folder.mkdir(exist_ok=True)
    (folder / asset).write_text(json.dumps(data, indent=2), encoding="utf-8")
    return folder, {"asset": asset, "assets_folder": "a temporary copy of resources/examples/" + asset,
                    "max_tokens": f"at most {max_tokens} (the copy's; the asset has "
                                  f"{[n.get('max_tokens') for n in json.loads((EXAMPLES / asset).read_text())['nodes']]})"}


def timed_turn(client: ParleyClient, session: str, line: str) -> dict[str, Any]:
    """One turn, timed at the events the client sees (milliseconds from sending the request)."""
    marks: dict[str, float] = {}
    tokens = 0
    previous = 0.0
    started = time.perf_counter()
    marks["send_at_ms"] = started * 1000
    for event in client.stream_turn(session, line):
        now = (time.perf_counter() - started) * 1000
        if event.kind == "turn_started":
            marks["turn_started_ms"] = now
        elif event.kind == "token":
            tokens += 1
            marks.setdefault("first_token_ms", now)
        elif event.kind == "turn_failed":
            raise RuntimeError(f"turn failed: {event.data}")
        elif event.kind == "turn_finished":
            diagnostics = event.data.get("diagnostics")
            if not diagnostics:
                raise RuntimeError("turn_finished has no diagnostics: the asset needs enable_diagnostics")
            marks["wall_ms"] = now
            marks["last_event_before_finished_ms"] = previous
            marks["total_ms"] = float(diagnostics["total_ms"])
            marks["tokens"] = tokens
            marks["reply_chars"] = len(event.data["reply"])
            return marks
        previous = now
    raise RuntimeError("the stream ended before turn_finished")


def clients_at_once(url: str, asset: str, clients: int, turns: int) -> list[dict[str, Any]]:
    """``clients`` threads, each its own client and session, saying ``turns`` lines; every turn's marks."""
    barrier = threading.Barrier(clients)
    results: list[list[dict[str, Any]]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def talk(i: int) -> None:
        try:
            with ParleyClient(url, timeout=600) as client:
                session = client.create_session(asset).id
                barrier.wait(60)
                for line in player_lines(turns, seed=100 + i):
                    results[i].append({"client": i, **timed_turn(client, session, line)})
                client.delete_session(session)
        except BaseException as exc:  # noqa: BLE001 - said after the threads end
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=talk, args=(i,), name=f"client-{i}") for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [turn for per_client in results for turn in per_client]


def warm_up(url: str, asset: str) -> float:
    with ParleyClient(url, timeout=600) as client:
        session = client.create_session(asset).id
        ms = timed_turn(client, session, "Hello there!")["wall_ms"]
        client.delete_session(session)
    return round(ms, 1)


def latency_summary(turns: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    return {
        "turns": len(turns), "seconds": round(seconds, 2),
        "turns_per_second": round(len(turns) / seconds, 3),
        "turn_ms": spread([t["wall_ms"] for t in turns]),
        "first_token_ms": spread([t["first_token_ms"] for t in turns if "first_token_ms" in t]),
        "runtime_total_ms": spread([t["total_ms"] for t in turns]),
        "tokens_per_turn": spread([float(t["tokens"]) for t in turns]),
        "tokens_per_second_all_clients": round(sum(t["tokens"] for t in turns) / seconds, 1),
        # fairness: each client's mean turn time, fastest to slowest
        "client_mean_turn_ms": sorted(round(statistics.mean(t["wall_ms"] for t in turns if t["client"] == c), 1)
                                      for c in sorted({t["client"] for t in turns})),
    }


@contextlib.contextmanager
def backend_spec(name: str, scratch: Path, slots: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``--backend`` of ``parley serve`` for ``name``, and what to say about it."""
    if name != "llama_server":
        yield name, {}
        return
    sys.path.insert(0, str(ROOT))
    from tests.servers import llama_server

    with llama_server(Path(sample_model()), scratch, slots=slots, context=2048, threads=1, threads_batch=2) as s:
        about: dict[str, Any] = {"slots": slots, "context_per_slot": 2048, "threads": 1, "threads_batch": 2,
                                 "flash_attn": "as shipped (auto)", "slot_support": slot_support()}
        yield f"llama+{s.url}", {"llama_server": about}
        about["slot_picked_by_all_calls"] = slot_choices(s.log)


def slot_support() -> dict[str, Any]:
    """Which llama_server.py served: its last commit, whether the work tree changed it, and whether a
    call without a free slot of its own sends ``id_slot`` -1 (the slot support of issue 22)."""
    path = "runtime/backends/llama_server.py"
    last = subprocess.run(["git", "log", "-1", "--format=%h %ad %s", "--date=iso", "--", path], cwd=ROOT,
                          capture_output=True, text=True, check=False).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--", path], cwd=ROOT, capture_output=True, text=True,
                             check=False).stdout.strip()
    source = (ROOT / path).read_text(encoding="utf-8")
    return {"last_commit": last[:200], "uncommitted_changes": bool(changed),
            "calls_without_a_free_slot_send_id_slot_minus_1": '"id_slot"] = -1' in source}


def slot_choices(log: Path) -> dict[str, int]:
    """How llama.cpp's server picked the slot of each call, from its log ("selected slot by id" is a
    call that named its slot; "by lru" or "by similarity" one that sent -1)."""
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "selected slot by " in line:
            how = line.split("selected slot by ", 1)[1].split(" ")[0].split(",")[0]
            counts[how] = counts.get(how, 0) + 1
    return counts


def latency(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    folder, about = asset_folder(args.asset, args.max_tokens, scratch)
    out: dict[str, Any] = {**about, "turns_per_client": args.turns, "server": "parley serve subprocess",
                           "load_average_start": load()}
    for name in args.backends.split(","):
        with backend_spec(name, scratch, args.slots) as (spec, extra), \
                parley_serve(spec, folder, scratch / f"serve-{name}.log") as (url, _process):
            shown = spec.split("://")[0] + ("://127.0.0.1:PORT" if "://" in spec else "")
            part: dict[str, Any] = {"backend": f"parley serve --backend {shown}", **extra,
                                    "warm_up_turn_ms": warm_up(url, args.asset)}
            for clients in (int(c) for c in args.clients.split(",")):
                before = load()
                started = time.perf_counter()
                turns = clients_at_once(url, args.asset, clients, args.turns)
                s = part[f"clients_{clients}"] = {**latency_summary(turns, time.perf_counter() - started),
                                                  "load_average_before": before, "load_average_after": load()}
                print(f"{name} {clients} clients: turn p50 {s['turn_ms']['p50']} p95 {s['turn_ms']['p95']} ms, "
                      f"first token p50 {s['first_token_ms']['p50']} p95 {s['first_token_ms']['p95']} ms", flush=True)
        out[name] = part
    out["load_average_end"] = load()
    return out


@contextlib.contextmanager
def py_spy(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy's samples of process ``pid`` (every thread, idle ones too; 1000 a second) while the
    block runs, as collapsed stacks in ``out`` (nothing without ``out``)."""
    if out is None:
        yield
        return
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", "1000", "--format", "raw", "--threads",
                            "--idle", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches (it has no ready signal)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(60)


def overhead_run(spec: str, folder: Path, asset: str, turns: int, log: Path, probe: Path | None = None,
                 profile: Path | None = None) -> dict[str, Any]:
    with parley_serve(spec, folder, log, probe) as (url, process), ParleyClient(url, timeout=600) as client, \
            py_spy(process.pid, profile):
        warm = warm_up(url, asset)
        session = client.create_session(asset).id
        marks = []
        # a conversation grows; a fresh session every 20 turns keeps the prompts alike over the run
        for i, line in enumerate(player_lines(turns, seed=7)):
            if i and i % 20 == 0:
                client.delete_session(session)
                session = client.create_session(asset).id
            marks.append(timed_turn(client, session, line))
    over = [m["wall_ms"] - m["total_ms"] for m in marks]
    if probe is not None:
        return {"turns": turns, "critical_path_ms": breakdown(marks, read_marks(probe)[1:])}  # [0]: the warm-up
    return {
        "turns": turns, "warm_up_turn_ms": warm,
        "overhead_ms": spread(over),
        "within_goal": (pct(over, 50) or 0) <= GOAL_OVERHEAD_MS,
        "request_to_turn_started_ms": spread([m["turn_started_ms"] for m in marks]),
        "last_event_to_turn_finished_ms": spread([m["wall_ms"] - m["last_event_before_finished_ms"] for m in marks]),
        "wall_ms": spread([m["wall_ms"] for m in marks]),
        "runtime_total_ms": spread([m["total_ms"] for m in marks]),
        "tokens_per_turn": spread([float(m["tokens"]) for m in marks]),
    }


def in_process_run(folder: Path, asset: str, turns: int) -> dict[str, Any]:
    """The same scripted turns as ``overhead_run`` through the in-process path ``parley chat`` takes
    (an Agent on the backend, no server): each turn's wall time."""
    from runtime.agent import Agent
    from runtime.asset.file import load_asset
    from runtime.backends.scripted import ScriptedBackend

    backend = ScriptedBackend()
    wall = []

    def fresh() -> Agent:
        return Agent(load_asset(folder / asset), backend, str(folder))

    agent = fresh()
    agent.run_turn("Hello.")  # warm-up, as the served run has
    agent = fresh()
    for i, line in enumerate(player_lines(turns, seed=7)):
        if i and i % 20 == 0:
            agent = fresh()
        started = time.perf_counter()
        agent.run_turn(line)
        wall.append((time.perf_counter() - started) * 1000)
    return spread(wall)


def overhead(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    folder, about = asset_folder(args.asset, args.max_tokens, scratch)
    out: dict[str, Any] = {**about, "goal_median_ms": GOAL_OVERHEAD_MS, "server": "parley serve subprocess",
                           "load_average_start": load()}
    for name, turns in (("scripted", args.scripted_turns), ("embedded", args.model_turns)):
        if turns < 1:
            continue
        out[name] = overhead_run(name, folder, args.asset, turns, scratch / f"overhead-{name}.log")
        o = out[name]["overhead_ms"]
        print(f"overhead {name}: median {o['p50']} p95 {o['p95']} ms over {turns} turns", flush=True)
        if name == "scripted":  # side by side: a turn served (one parley serve, direct) and in-process
            served, alone = out[name]["wall_ms"], in_process_run(folder, args.asset, turns)
            out[name]["served_vs_in_process"] = {
                "served_turn_ms": served, "in_process_turn_ms": alone,
                "served_minus_in_process_p50_ms": round(served["p50"] - alone["p50"], 2),
                "within_goal": served["p50"] - alone["p50"] <= GOAL_OVERHEAD_MS}
            print(f"scripted turn served p50 {served['p50']} ms, in-process p50 {alone['p50']} ms", flush=True)
    for name, turns in (("scripted", args.probe_turns), ("embedded", args.probe_model_turns)):
        if turns < 1:
            continue
        probed = overhead_run(name, folder, args.asset, turns, scratch / f"probed-{name}.log",
                              scratch / f"marks-{name}.txt")
        out[f"{name}_probed"] = probed
        for segment, v in probed["critical_path_ms"].items():
            print(f"  {name} {segment}: p50 {v['p50']} p95 {v['p95']}", flush=True)
    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
        for name, turns in (("scripted", args.scripted_turns), ("embedded", args.probe_model_turns)):
            profile = args.py_spy / f"serve-{name}.txt"
            run = overhead_run(name, folder, args.asset, turns, scratch / f"spied-{name}.log", profile=profile)
            out[f"{name}_py_spy"] = {"turns": turns, "overhead_ms_while_sampled": run["overhead_ms"],
                                     "samples": str(profile), **hot_frames(profile)}
    out["load_average_end"] = load()
    return out


# --- probes: where a turn's overhead goes (the server's functions wrapped, in its own process) -----

MARKS_ENV = "PARLEY_BENCH_MARKS"  # the file a probed server appends its marks to


def probed_main() -> int:
    """``parley`` with the serve path's functions wrapped to note when each runs (perf_counter is
    CLOCK_MONOTONIC on Linux: the same clock as the bench's, in another process). Nothing changes
    what they do."""
    import functools

    from runtime.agent import Agent
    from runtime.cli import main as parley_main
    from runtime.serve import app, npcs

    marks = open(os.environ[MARKS_ENV], "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the process's life
    lock = threading.Lock()

    def mark(name: str) -> None:
        t = time.perf_counter()
        with lock:
            marks.write(f"{name} {t:.6f}\n")

    def around(owner: Any, attr: str, name: str, when: Any = None, end: bool = True) -> None:
        original = getattr(owner, attr)

        @functools.wraps(original)
        def wrapped(*a: Any, **k: Any) -> Any:
            hit = when is None or when(*a, **k)
            if hit:
                mark(name + "_start" if end else name)
            try:
                return original(*a, **k)
            finally:
                if hit and end:
                    mark(name + "_end")

        setattr(owner, attr, wrapped)

    guard_call = app.Guard.__call__

    async def guarded(self: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("method") == "POST" and scope.get("path", "").endswith("/turns"):
            mark("asgi")
        return await guard_call(self, scope, receive, send)

    app.Guard.__call__ = guarded  # type: ignore[method-assign]
    around(npcs.NPCs, "turn", "route")
    around(npcs.NPCs, "_run", "worker")
    around(Agent, "_run_turn", "agent")
    around(npcs.NPCs, "_record", "record")
    around(npcs.Stream, "put", "finished_put", lambda self, item, last=False: item.kind == "turn_finished", end=False)
    around(npcs.Stream, "_deliver", "finished_deliver", lambda self, item: item.kind == "turn_finished", end=False)
    around(app, "_frame", "frame_started", lambda kind, data: kind == "turn_started", end=False)
    around(app, "_frame", "frame_finished", lambda kind, data: kind == "turn_finished")
    return parley_main(sys.argv[1:])


IDLE_LEAVES = ("EpollSelector.select (", "_worker (concurrent/futures/thread.py")  # waiting for I/O, for work


def hot_frames(path: Path, top: int = 25) -> dict[str, Any]:
    """Per thread of a py-spy raw profile: samples in all, idle ones (the loop in epoll, a worker
    waiting for work), and the functions most often on the stack of the rest (share of busy samples).
    A thread waiting for the GIL counts as busy: py-spy samples it where it waits."""
    threads: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        name = frames[0].split(": ", 1)[-1].split("_")[0] if "parley-turn" in frames[0] else frames[0].split(": ")[-1]
        t = threads.setdefault(name, {"samples": 0, "idle": 0, "frames": {}})
        t["samples"] += int(count)
        if frames[-1].startswith(IDLE_LEAVES):
            t["idle"] += int(count)
            continue
        for f in {f.rsplit(":", 1)[0] + ")" if ":" in f else f for f in frames[1:]}:
            t["frames"][f] = t["frames"].get(f, 0) + int(count)
    out = {}
    for name, t in threads.items():
        busy = t["samples"] - t["idle"]
        ranked = sorted(t["frames"].items(), key=lambda kv: -kv[1])[:top]
        out[name] = {"samples": t["samples"], "busy": busy,
                     "busy_share_by_function": {f: round(n / max(busy, 1), 3) for f, n in ranked}}
    return {"threads": out}


# The critical path of a turn, in order: (segment, from mark, to mark). "send" and "received" are the
# client's; the rest the server's. agent_start -> agent_end also holds the runtime's total_ms.
SEGMENTS = [
    ("client send -> server ASGI call", "send", "asgi"),
    ("ASGI call -> route (Guard reads the body, FastAPI routes, validates TurnIn)", "asgi", "route_start"),
    ("route: NPCs.turn (the session, turn_started, submit)", "route_start", "route_end"),
    # negative when the worker starts before NPCs.turn has returned (the segments still add up)
    ("submit -> worker thread runs", "route_end", "worker_start"),
    ("worker -> Agent._run_turn", "worker_start", "agent_start"),
    ("Agent._run_turn past its total_ms (tree, state, TurnFinished)", "agent_tail", ""),
    ("Agent._run_turn end -> NPCs._record", "agent_end", "record_start"),
    ("NPCs._record (diagnostics.model_dump, prompts)", "record_start", "record_end"),
    ("record -> turn_finished put", "record_end", "finished_put"),
    ("put -> event loop delivers (call_soon_threadsafe)", "finished_put", "finished_deliver"),
    ("deliver -> frame (the SSE generator wakes)", "finished_deliver", "frame_finished_start"),
    ("_frame(turn_finished): json.dumps", "frame_finished_start", "frame_finished_end"),
    ("frame -> client has turn_finished (uvicorn send, httpx-sse parse, json.loads)", "frame_finished_end",
     "received"),
]


def read_marks(path: Path) -> list[dict[str, float]]:
    """The server's marks, one dict a turn (a turn starts at its ``asgi`` mark)."""
    turns: list[dict[str, float]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        name, t = line.split()
        if name == "asgi":
            turns.append({})
        if turns:
            turns[-1].setdefault(name, float(t) * 1000)
    return turns


def breakdown(client: list[dict[str, float]], server: list[dict[str, float]]) -> dict[str, Any]:
    """Median and p95 of each segment of the turns' critical path (milliseconds)."""
    if len(client) != len(server):
        raise RuntimeError(f"{len(client)} turns timed but the server marked {len(server)}")
    rows: dict[str, list[float]] = {name: [] for name, _, _ in SEGMENTS}
    for c, s in zip(client, server):
        m = {**s, "send": c["send_at_ms"], "received": c["send_at_ms"] + c["wall_ms"]}
        for name, a, b in SEGMENTS:
            if a == "agent_tail":
                rows[name].append(m["agent_end"] - m["agent_start"] - c["total_ms"])
            else:
                rows[name].append(m[b] - m[a])
    out = {name: {"p50": pct(v, 50), "p95": pct(v, 95)} for name, v in rows.items()}
    total = [sum(rows[name][i] for name in rows) for i in range(len(client))]
    out["sum of the segments"] = {"p50": pct(total, 50), "p95": pct(total, 95)}
    out["overhead (wall - total_ms)"] = {"p50": pct([c["wall_ms"] - c["total_ms"] for c in client], 50),
                                         "p95": pct([c["wall_ms"] - c["total_ms"] for c in client], 95)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["latency", "overhead", "all"], default="all")
    parser.add_argument("--asset", default="chat.json", help="an asset of resources/examples")
    parser.add_argument("--max-tokens", type=int, help="serve a copy of the asset with at most this max_tokens")
    parser.add_argument("--clients", default="1,4,8", help="clients at once, comma-separated")
    parser.add_argument("--turns", type=int, default=6, help="turns each client says (latency)")
    parser.add_argument("--backends", default="embedded,llama_server", help="latency: embedded and/or llama_server")
    parser.add_argument("--slots", type=int, default=8, help="llama.cpp server slots")
    parser.add_argument("--scripted-turns", type=int, default=200)
    parser.add_argument("--model-turns", type=int, default=20)
    parser.add_argument("--probe-turns", type=int, default=200, help="overhead: probed turns on scripted")
    parser.add_argument("--probe-model-turns", type=int, default=10, help="overhead: probed turns on the model")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", help="overhead: profile the server with py-spy "
                        "(collapsed stacks in DIR/serve-scripted.txt, serve-embedded.txt)")
    parser.add_argument("--no-write", action="store_true", help="print only (a smoke run)")
    args = parser.parse_args()
    sample_model()  # fetched before anything is timed
    run = {"command": " ".join(["python", "bench/bench_serve.py", *sys.argv[1:]]), "commit": commit(),
           "cpus": os.cpu_count()}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.part in ("latency", "all"):
            results["latency"] = {**run, **latency(args, Path(scratch))}
        if args.part in ("overhead", "all"):
            results["overhead"] = {**run, **overhead(args, Path(scratch))}
    if args.no_write:
        print(json.dumps(results, indent=2))
    else:
        write_results("serve", results, merge=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
