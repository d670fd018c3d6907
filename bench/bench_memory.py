"""Memory: resident memory with 1, 4 and 8 nodes on the same model.

Weights are counted once: each node after the first should add only its own KV cache
and compute buffer (as llama.cpp reports them when it creates the context), within 10 %.

    python bench/bench_memory.py            # writes bench/results/memory.json
"""

from __future__ import annotations

import argparse
import gc
import logging
import re

from conversation import player_lines, rss_mib, sample_model, write_results

from runtime.backends.base import ChatMessage, GenerationRequest
from runtime.backends.llama import LlamaBackend

TOLERANCE = 0.10
_BUFFER = re.compile(r"(KV|compute|output) buffer size =\s*([\d.]+) MiB")


class BufferSizes(logging.Handler):
    """Collects the buffer sizes llama.cpp logs when it creates a context."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sizes: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = _BUFFER.search(record.getMessage())
        if m:
            self.sizes.append((m.group(1), float(m.group(2))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=2048)
    args = parser.parse_args()
    model = sample_model()
    sizes = BufferSizes()
    llama_log = logging.getLogger("llama_cpp")
    llama_log.addHandler(sizes)
    llama_log.setLevel(logging.INFO)
    llama_log.propagate = False

    backend = LlamaBackend()
    gc.collect()
    baseline = rss_mib()
    backend.count_tokens(model, "load the weights")
    history = [ChatMessage("system", "You are Brom, the blacksmith of Oakhollow.")]
    for line in player_lines(12, seed=2):
        history += [ChatMessage("user", line), ChatMessage("assistant", "Aye, that I know well enough, traveller.")]
    history.append(ChatMessage("user", "And what else?"))
    request = GenerationRequest(history, max_tokens=8, temperature=0)

    rss_by_nodes: dict[int, float] = {}
    per_node_buffers: list[float] = []
    try:
        for n in range(1, 9):
            before = len(sizes.sizes)
            backend.session(f"node{n}", model, args.context).generate(request)
            created = sizes.sizes[before:]
            per_node_buffers.append(sum(mib for _kind, mib in created))
            gc.collect()
            rss_by_nodes[n] = rss_mib()
            print(f"{n} nodes: RSS {rss_by_nodes[n]:.1f} MiB (context buffers of node {n}: {created})")
        prompt_tokens = backend.count_prompt_tokens(model, history)
        loads = backend.model_loads
    finally:
        backend.close()

    weights_mib = rss_by_nodes[1] - baseline - per_node_buffers[0]
    growth_per_node = (rss_by_nodes[8] - rss_by_nodes[1]) / 7
    expected_per_node = sum(per_node_buffers[1:]) / 7
    deviation = (growth_per_node - expected_per_node) / expected_per_node
    summary = {
        "context_size": args.context,
        "prompt_tokens": prompt_tokens,
        "model_loads": loads,
        "rss_mib": {"baseline": round(baseline, 1), **{f"{n}_nodes": round(v, 1) for n, v in rss_by_nodes.items()}},
        "rss_1_4_8_nodes_mib": [round(rss_by_nodes[n], 1) for n in (1, 4, 8)],
        "weights_and_runtime_mib_in_first_node": round(weights_mib, 1),
        "context_buffers_per_node_mib": round(expected_per_node, 2),
        "growth_per_node_mib": round(growth_per_node, 2),
        "deviation": round(deviation, 4),
        "tolerance": TOLERANCE,
        "pass": loads == 1 and abs(deviation) <= TOLERANCE,
    }
    write_results("memory", {"summary": summary})
    print(summary)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
