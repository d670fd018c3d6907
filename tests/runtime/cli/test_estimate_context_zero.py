"""Issue 23, friction 9: ``parley estimate`` says that a node's Context Size 0 is the model's own size."""

from __future__ import annotations

import json

from runtime.cli import main
from tests.runtime.tiny_gguf import write_tiny_gguf


def _estimate(tmp_path, capsys, *contexts: int) -> dict[str, str]:
    write_tiny_gguf(tmp_path / "m.gguf", context_length=8192)
    nodes = [{"id": f"n{i}", "type": "Generate", "context_size": c, "max_tokens": 64} for i, c in enumerate(contexts)]
    path = tmp_path / "npc.json"
    path.write_text(json.dumps({"version": 1, "default_model": "m.gguf", "start_node": "n0", "nodes": nodes}))
    assert main(["estimate", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {line.split()[0]: line for line in lines if line.startswith("n")}


def test_a_context_of_0_shows_the_size_it_stands_for(tmp_path, capsys):
    rows = _estimate(tmp_path, capsys, 0, 2048)
    assert "0 = the model's own (8,192)" in rows["n0"]
    assert " 2048 " in rows["n1"] and "model's own" not in rows["n1"]
