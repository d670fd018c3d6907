"""The chat names a reply written inside a behaviour (``guard/warn``) by that node's title, as it names
every other reply (issue 38: it showed the bare namespaced id)."""

from __future__ import annotations

import json
from pathlib import Path

from editor.docks.conversation.chat_view import node_label
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from tests.editor.canvas.test_subgraphs import GUARD, THREATS, write


def titled_threats() -> dict:
    raw = json.loads(json.dumps(THREATS))
    for node in raw["nodes"]:
        if node["id"] == "warn":
            node["title"] = "Warn the player"
    return raw


def test_a_reply_from_inside_a_behaviour_is_named_by_its_nodes_title(make_window, qtbot, tmp_path: Path):
    write(tmp_path / "behaviours" / "threats.json", titled_threats())
    asset = write(tmp_path / "guard.json", GUARD)
    window = make_window()
    assert window.open_path(str(asset))
    window.conversation.use_backend(ScriptedBackend)
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=30_000):
        assert window.conversation.say("I threaten you.")
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=30_000)
    chat = window.conversation_dock.chat
    text = chat.toPlainText()
    assert "Warn the player (guard/warn):" in text, text
    window.conversation_dock.resize(520, 300)
    window.conversation_dock.grab().save(str(tmp_path / "chat.png"))


def test_node_label_reads_the_behaviour_from_the_assets_folder(tmp_path: Path):
    write(tmp_path / "behaviours" / "threats.json", titled_threats())
    asset = load_asset(write(tmp_path / "guard.json", GUARD))
    assert node_label(asset, "guard/warn", tmp_path) == "Warn the player (guard/warn)"
    assert node_label(asset, "guard/refuse", tmp_path) == "guard/refuse", "no title of its own: the id"
    assert node_label(asset, "guard/gone", tmp_path) == "guard/gone"
    assert node_label(asset, "guard/warn", None) == "guard/warn", "no folder to read it from"
    assert node_label(asset, "stern/x", tmp_path) == "stern/x", "not a Subgraph node"
