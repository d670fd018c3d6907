"""Run in a fresh interpreter whose path holds the installed example plugin (``parley-remember``):
checks the plugin's node type end to end and prints the findings as one JSON object.

Used by test_node_type_plugin.py; a subprocess because plugins are loaded once, when
``runtime.nodes`` is first imported, and the other tests must not see this one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_PREFERRED_BINDING", "PySide6")

from runtime.agent import Agent
from runtime.asset.file import asset_from_dict
from runtime.asset.validation import validate_asset
from runtime.models.folder import sample_model_for_checks
from runtime.nodes import NODE_TYPES, PLUGIN_PROBLEMS
from runtime.problems import AssetError

out: dict = {"registered": "Remember" in NODE_TYPES, "plugin_problems": list(PLUGIN_PROBLEMS),
             "package": NODE_TYPES["Remember"].package if "Remember" in NODE_TYPES else ""}


def asset_dict(model: str) -> dict:
    return {
        "version": 1, "name": "Remembers the name", "default_model": model, "start_node": "name",
        "variables": {"player_name": "Traveller"},
        "nodes": [
            {"id": "name", "type": "Remember", "variable": "player_name",
             "value": "{{input}}", "only_if_matches": "^[A-Z][a-z]+$", "default_exit": "reply",
             "position": [0, 0]},
            {"id": "reply", "type": "GenerateAndSpeak", "context_size": 1024, "max_tokens": 40,
             "temperature": 0.0, "seed": 1,
             "system_prompt": "You are Mira, an innkeeper. Answer in one short sentence.",
             "template": "(The traveller is called {{vars.player_name}}.)", "position": [300, 0]},
        ],
    }


# --- validated ----------------------------------------------------------------------------------
model = str(sample_model_for_checks())
raw = asset_dict(model)
asset = asset_from_dict(raw, "plugin.json")
out["loads"] = [n.type_name for n in asset.nodes]
out["problems"] = [f"{p.severity}:{p.node_id}.{p.field}: {p.message}" for p in validate_asset(asset, "plugin.json")]
bad = json.loads(json.dumps(raw))
bad["nodes"][0].update(variable="mood", only_if_matches="([")
out["bad_problems"] = [f"{p.severity}:{p.node_id}.{p.field}" for p in validate_asset(asset_from_dict(bad, "b"), "b")]
wrong = json.loads(json.dumps(raw))
wrong["nodes"][0]["variable"] = "not a name"
try:
    asset_from_dict(wrong, "wrong.json")
    out["wrong_field"] = "accepted"
except AssetError as exc:  # naming the node and field
    out["wrong_field"] = str(exc)

# --- run on the sample model, without the editor ------------------------------------------------
from runtime.backends.llama import LlamaBackend

backend = LlamaBackend()
agent = Agent(asset, backend)
first = agent.run_turn("Hello there, innkeeper.")
second = agent.run_turn("Aldric")
third = agent.run_turn("What is my name?")
out["runtime"] = {
    "paths": [first.path, second.path, third.path],
    "variable": agent.variables["player_name"],
    "remember_output": [next(n.output for n in r.diagnostics.nodes if n.node == "name") for r in (first, second)],
    "reply_prompt_has_name": "Aldric" in third.diagnostics.nodes[1].input.prompt[-1].content,
    "third_reply": third.reply,
}
backend.close()

# --- in the editor: palette, canvas, problems, a conversation, the Turn Inspector -----------------
from PySide6.QtWidgets import QApplication

from editor.window.main_window import MainWindow
from runtime.asset.file import save_asset

app = QApplication.instance() or QApplication(sys.argv)
workdir = Path(sys.argv[1])
path = workdir / "remember.json"
save_asset(asset, path)
window = MainWindow(autosave_ms=0)
window.resize(1366, 768)
window.open_path(str(path))
window.show()
palette = window.palette.tree
categories = {palette.topLevelItem(i).text(0): [palette.topLevelItem(i).child(j).text(0)
                                                for j in range(palette.topLevelItem(i).childCount())]
              for i in range(palette.topLevelItemCount())}
canvas_node = window.canvas.canvas_node("name")
out["editor"] = {
    "palette": categories,
    "canvas_summary": canvas_node.view.summary,
    "canvas_ports": list(canvas_node.outputs()),
    "problems": [f"{p.severity}:{p.node_id}.{p.field}" for p in window.problems],
}
window.canvas.select(["name"])
app.processEvents()
out["editor"]["properties_header"] = window.properties.header.text()
out["editor"]["properties_fields"] = sorted(window.properties.form.editors)

conversation = window.conversation
records = []
conversation.turn_finished.connect(records.append)
failures: list[str] = []
conversation.turn_failed.connect(lambda failure: failures.append(failure.message))


def wait_idle(limit_s: float = 240.0) -> None:
    import time
    started = time.monotonic()
    while (conversation.busy or not records) and not failures and time.monotonic() - started < limit_s:
        app.processEvents()
        time.sleep(0.01)


conversation.say("Brenna")
wait_idle()
inspector = window.docks["TurnInspectorDock"]
inspector.show()
inspector.raise_()
app.processEvents()
items = inspector.node_labels()
inspector.show_node("name")
app.processEvents()
out["inspector"] = {"failures": failures, "nodes": items, "shown": inspector.current_node_id(),
                    "prompt_and_output": inspector.prompt_view.toPlainText()}
window.grab().save(str(workdir / "plugin-editor.png"))
conversation.shutdown()
window.close()
print("RESULT " + json.dumps(out))
