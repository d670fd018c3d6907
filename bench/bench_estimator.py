"""Time the estimator on a 50-node asset, as the editor's VRAM panel calls it on every edit.

Writes bench/results/estimator.json. Target: under 50 ms per estimate once the
GGUF metadata is read. "cold" includes reading the model headers; "edit" clears
the per-context cache first (an edit that changes a context size misses it);
"repeat" is a call with nothing changed.

    python bench/bench_estimator.py [MODEL.gguf]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.asset.estimate import estimate_asset
from runtime.asset.model import Asset, new_node
from runtime.models.folder import sample_model_for_checks
from runtime.models.gguf import clear_cache
from runtime.models.memory import Settings, context_cost, model_shape, weights_cost

SAMPLE = str(sample_model_for_checks(print))
TARGET_MS = 50.0


def fifty_node_asset(model: Path) -> Asset:
    kinds = ["GenerateAndSpeak", "Generate", "Summarize", "ClassifyIntent", "ClassifyAttributes", "Retrieve"]
    nodes = []
    for i in range(50):
        kind = kinds[i % len(kinds)]
        fields = {} if kind == "Retrieve" else {"context_size": 512 * (1 + i % 8)}
        nodes.append(new_node(kind, f"n{i}", **fields))
    return Asset(name="bench", default_model=model.name, start_node="n0", nodes=nodes)


def main() -> int:
    model = Path(sys.argv[1] if len(sys.argv) > 1 else SAMPLE)
    if not model.is_file():
        print(f"model not found: {model}", file=sys.stderr)
        return 1
    asset = fifty_node_asset(model)

    def resolve(name: str) -> Path:
        return model.parent / name

    settings = Settings()
    clear_cache()
    t0 = time.perf_counter()
    estimate = estimate_asset(asset, resolve, settings)
    cold_ms = (time.perf_counter() - t0) * 1000

    def timed(clear: bool, runs: int = 200) -> list[float]:
        out = []
        for i in range(runs):
            if clear:
                context_cost.cache_clear()
                weights_cost.cache_clear()
                model_shape.cache_clear()
            kv_type = ("f16", "q8_0", "q4_0")[i % 3]
            s = Settings(kv_type=kv_type, flash_attn="off" if kv_type == "f16" else "on") if clear else settings
            t = time.perf_counter()
            estimate_asset(asset, resolve, s)
            out.append((time.perf_counter() - t) * 1000)
        return out

    edit = timed(clear=True)
    repeat = timed(clear=False)
    result = {
        "model": model.name,
        "model_nodes": sum(1 for n in asset.nodes if n.uses_model()),
        "nodes": len(asset.nodes),
        "cold_ms": round(cold_ms, 2),
        "edit_ms_median": round(statistics.median(edit), 3),
        "edit_ms_max": round(max(edit), 3),
        "repeat_ms_median": round(statistics.median(repeat), 3),
        "target_ms": TARGET_MS,
        "meets_target": max(edit) < TARGET_MS,
        "vram_bytes": estimate.vram_bytes,
        "ram_bytes": estimate.ram_bytes,
    }
    out = ROOT / "bench" / "results" / "estimator.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
