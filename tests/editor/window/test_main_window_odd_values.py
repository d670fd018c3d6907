"""The editor opens files with values the model alone let through or choked on (issue 14, defects 4,
6 and 12): a NaN position that made every repaint raise, a 5,000-digit number that closed the
editor, a lone surrogate; each opens at a safe value with a problem naming the node and field, and
saving writes a file that opens cleanly."""

from __future__ import annotations

import json

from runtime.asset.file import load_asset
from runtime.resources import examples_dir


def test_odd_values_open_to_be_fixed_and_save_cleanly(window, tmp_path):
    raw = json.loads((examples_dir() / "chat.json").read_text())
    raw["nodes"][0].update(position=["NAN", "INF"], system_prompt="You are \\ud800 Mira.", seed="SEED")
    text = json.dumps(raw, indent=2)
    text = text.replace('"NAN"', "NaN").replace('"INF"', "1e309").replace('"SEED"', "9" * 5000)
    text = text.replace("\\\\ud800", "\\ud800")
    path = tmp_path / "odd.json"
    path.write_text(text)

    assert window.open_path(str(path))
    node = window.document.node("reply")
    assert node.position == (0.0, 0.0) and node.seed == 1 and node.system_prompt == "You are \ufffd Mira."
    where = {(p.node_id, p.field) for p in window.problems_dock.problems if p.file == str(path)}
    assert {("reply", "position.0"), ("reply", "seed"), ("reply", "system_prompt")} <= where
    window.canvas.viewer.viewport().repaint()  # raised on every repaint with a NaN position
    assert window.document.modified

    assert window.save_to(str(path))
    assert load_asset(path).node("reply").seed == 1
