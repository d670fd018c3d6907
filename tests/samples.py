"""The example assets on the real sample model, for tests that run turns on it."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.resources import examples_dir


def example_on_sample_model(name: str, model: Path, folder: Path, max_tokens: int,
                            keep: tuple[str, ...] = ()) -> Path:
    """``resources/examples/NAME.json`` written into ``folder`` with ``model`` as its default model and
    every node's max_tokens cut to ``max_tokens`` (short replies: quick on 2 cores), except nodes of
    the types in ``keep``. Returns the copy's path."""
    raw = json.loads((examples_dir() / f"{name}.json").read_text(encoding="utf-8"))
    raw["default_model"] = str(model)
    for node in raw["nodes"]:
        if "max_tokens" in node and node["type"] not in keep:
            node["max_tokens"] = max_tokens
    path = folder / f"{name}.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path
