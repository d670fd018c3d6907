"""What the benchmarks share: the sample model, a scripted player, the two-node graph, and result files."""

from __future__ import annotations

import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runtime.asset.model import Asset
from runtime.models.folder import sample_model_for_checks

RESULTS = ROOT / "bench" / "results"

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


def rss_mib() -> float:
    """Resident memory of this process (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    import llama_cpp

    data = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "llama_cpp_python": llama_cpp.__version__},
        **data,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return path
