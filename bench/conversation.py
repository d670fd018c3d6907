"""What the benchmarks share: the sample model, a scripted player, the two-node graph, and result files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runtime.asset.model import Asset
from runtime.models.folder import sample_model_for_checks

RESULTS = ROOT / "bench" / "results"
LISTENING = "parley serve: listening on "

_OPENERS = ["Tell me", "What do you know", "Have you heard", "Can you explain", "I wonder", "Remind me"]
_TOPICS = [
    "about the old mill", "about the river crossing", "about the bandits on the north road", "about your apprentice",
    "about the harvest festival", "about the price of iron", "about the lord's tax", "about the haunted well",
    "about the travelling merchants", "about the broken bridge", "about the dragon sightings", "about the inn's ale",
]
_ENDINGS = ["?", ", friend?", " in a few words?", ", please?"]


def player_lines(n: int, seed: int = 1) -> list[str]:
    """``n`` varied player lines, the same for the same seed."""
    rng = random.Random(seed)
    return [f"{rng.choice(_OPENERS)} {rng.choice(_TOPICS)}{rng.choice(_ENDINGS)}" for _ in range(n)]


def sample_model() -> str:
    return str(sample_model_for_checks(print))


SYSTEM = "You are Brom, the blacksmith of Oakhollow. Answer the player in one or two short sentences."


def generate_node(context_size: int, max_tokens: int, *, next_node: str = "", seed: int = 7) -> dict[str, Any]:
    return {
        "id": "reply", "type": "Generate", "context_size": context_size, "max_tokens": max_tokens,
        "system_prompt": SYSTEM, "temperature": 0.7, "seed": seed, "default_exit": next_node,
    }


def generate_then_summarize(model: str, *, context_size: int = 2048, max_tokens: int = 48,
                            trigger_tokens: int = 600) -> Asset:
    """The two-node graph of the prefix-reuse benchmark: Generate, then Summarize."""
    return Asset.model_validate({
        "name": "bench: generate then summarize",
        "default_model": model,
        "start_node": "reply",
        "nodes": [
            generate_node(context_size, max_tokens, next_node="summarize"),
            {"id": "summarize", "type": "Summarize", "context_size": 1024, "max_summary_tokens": 96,
             "trigger_tokens": trigger_tokens, "keep_recent_turns": 3, "seed": 3},
        ],
    })


def single_generate(model: str, *, context_size: int, max_tokens: int, temperature: float = 0.7) -> Asset:
    node = generate_node(context_size, max_tokens)
    node["temperature"] = temperature
    return Asset.model_validate({"name": "bench: one node", "default_model": model, "start_node": "reply", "nodes": [node]})


def fingerprint(result: Any) -> list[Any]:
    """What must come out bit for bit the same when a turn is said again: the reply, and every node's
    prompt (the messages as the model received them) and output, in the order the nodes ran."""
    nodes = result.diagnostics.nodes if result.diagnostics is not None else []
    return [result.reply, [(n.node, n.output, [(m.role, m.name, m.content) for m in n.input.prompt]) for n in nodes]]


def first_difference(a: list[Any], b: list[Any]) -> str:
    """Where two fingerprints differ, in words (empty when they are the same)."""
    if a == b:
        return ""
    if a[0] != b[0]:
        return f"reply {a[0][:60]!r} against {b[0][:60]!r}"
    for x, y in zip(a[1], b[1]):
        if x != y:
            part = "output" if x[1] != y[1] else "prompt"
            return f"node {x[0]}: its {part} differs"
    return "another path through the graph"


class StateCalls:
    """Times every ``llama_state_seq_get_data`` / ``set_data`` the backend makes (it calls them through
    the ``llama_cpp`` module, so wrapping the module's functions sees each one)."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[int, float]]] = {"get_data": [], "set_data": []}
        self._originals: dict[str, Callable[..., int]] = {}

    def __enter__(self) -> Self:
        import llama_cpp

        for name in self.calls:
            original = getattr(llama_cpp, f"llama_state_seq_{name}")
            self._originals[name] = original

            def timed(ctx: Any, data: Any, size: int, seq: int, _name: str = name, _original=original) -> int:
                t0 = time.perf_counter()
                out = _original(ctx, data, size, seq)
                self.calls[_name].append((int(size), (time.perf_counter() - t0) * 1000))
                return out

            setattr(llama_cpp, f"llama_state_seq_{name}", timed)
        return self

    def __exit__(self, *_exc: object) -> None:
        import llama_cpp

        for name, original in self._originals.items():
            setattr(llama_cpp, f"llama_state_seq_{name}", original)

    def summary(self) -> dict[str, Any]:
        out = {}
        for name, calls in self.calls.items():
            ms = [m for _, m in calls]
            out[name] = {"calls": len(calls), "bytes_mean": round(statistics.mean(b for b, _ in calls)) if calls else None,
                         "ms_median": round(statistics.median(ms), 2) if ms else None,
                         "ms_max": round(max(ms), 2) if ms else None}
        return out


def rss_mib() -> float:
    """Resident memory of this process (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def write_results(name: str, data: dict[str, Any], *, merge: bool = False) -> Path:
    """Write ``bench/results/NAME.json``. ``merge`` keeps the keys of an earlier file that ``data``
    does not have (a script that runs its parts apart)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    import llama_cpp

    path = RESULTS / f"{name}.json"
    if merge and path.exists():
        earlier = json.loads(path.read_text(encoding="utf-8"))
        data = {**{k: v for k, v in earlier.items() if k not in ("benchmark", "when", "machine")}, **data}
    data = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "llama_cpp_python": llama_cpp.__version__},
        **data,
    }
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return path


@contextlib.contextmanager
def serve_child(*args: str, patch: str = "", env: dict[str, str] | None = None, stdin: int | None = None,
                start_seconds: float = 300.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """``parley serve --port 0 ARGS`` as a child process (as a game runs it: no GIL shared with the
    bench), its stderr dropped; yields its URL, once it printed it, and the process. ``patch`` is
    Python run before it. Ended with SIGTERM (and waited for) unless it ended already."""
    start = [sys.executable, "-c", patch + "\nimport sys\nfrom runtime.cli import main\nsys.exit(main())\n"]
    process = subprocess.Popen([*start, "serve", "--port", "0", *args], cwd=ROOT, stdin=stdin,
                               env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # keeps stdout drained, so the server never blocks on a full pipe
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=start_seconds)
            if line is None:
                raise RuntimeError(f"parley serve ended (exit {process.poll()}) before it listened")
            if line.startswith(LISTENING):
                break
        yield line[len(LISTENING):].strip(), process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(60)
