"""A plugin node type whose check(), check_in_graph() or exits() raises (exits() is drawn as no ports): the editor opens the asset whole,
the node on the canvas and the failure a problem on it (issue 20: it opened half-loaded, Problems
saying "no nodes" while the canvas showed one). A fresh interpreter, because the editor builds its
canvas classes from the node types registered when it is imported, as it does with real plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SESSION = '''
import json, sys
from pathlib import Path
from runtime.nodes import NodeType, register
from tests.plugins.failing_types import CheckRaises, ExitsRaise, GraphCheckExits, ViewExits
for model in (CheckRaises, GraphCheckExits, ExitsRaise):
    register(NodeType(model, package="parley-failing"))  # as load_plugins does, before the editor is imported
register(NodeType(ViewExits, editor="tests.plugins.exiting_view:VIEW", package="parley-failing"))

from PySide6.QtWidgets import QApplication
from editor.window.main_window import MainWindow

app = QApplication.instance() or QApplication(sys.argv)
folder = Path(sys.argv[1])
out = {}
for node_type in ("CheckRaises", "GraphCheckExits", "ExitsRaise"):
    path = folder / f"{node_type}.json"
    path.write_text(json.dumps({"version": 1, "start_node": "p", "nodes": [
        {"id": "p", "type": node_type, "position": [0, 0],
         **({} if node_type == "ExitsRaise" else {"default_exit": "reply"})},
        {"id": "reply", "type": "Generate", "position": [300, 0]}]}))
    window = MainWindow(autosave_ms=0)
    window.resize(1200, 700)
    opened = window.open_path(str(path))
    window.show()
    app.processEvents()
    out[node_type] = {
        "opened": opened, "ids": window.document.asset.node_ids(),
        "canvas": [n for n in ("p", "reply") if window.canvas.canvas_node(n) is not None],
        "problems": [[p.severity, p.node_id, p.message] for p in window.problems_dock.problems],
    }
    window.grab().save(str(folder / f"{node_type}.png"))
    palette = window.palette.tree
    out["palette"] = {palette.topLevelItem(i).text(0): [palette.topLevelItem(i).child(j).text(0)
                                                        for j in range(palette.topLevelItem(i).childCount())]
                      for i in range(palette.topLevelItemCount())}
    window.close()
print("RESULT " + json.dumps(out))
'''


def test_a_check_that_raises_opens_the_asset_with_the_node_and_its_problem(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "QT_PREFERRED_BINDING": "PySide6",
           "PARLEY_STUDIO_SETTINGS": str(tmp_path / "settings" / "parley-studio.ini"),
           "PARLEY_STUDIO_RECOVERY": str(tmp_path / "recovery"),
           "PARLEY_BACKENDS": str(tmp_path / "settings" / "backends.json")}
    done = subprocess.run([sys.executable, "-c", SESSION, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT, check=False)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and result, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(result[-1][len("RESULT "):])
    for node_type, method in (("CheckRaises", "check"), ("GraphCheckExits", "check_in_graph"), ("ExitsRaise", "exits")):
        seen = found[node_type]
        assert seen["opened"] and seen["ids"] == ["p", "reply"] and seen["canvas"] == ["p", "reply"], seen
        assert not [p for p in seen["problems"] if "no nodes" in p[2]], seen["problems"]
        assert [p for p in seen["problems"] if p[:2] == ["error", "p"] and f"{method}() failed" in p[2]], seen
        assert any(p[1] == "reply" for p in seen["problems"])  # the other node is checked as usual
    # a view that exits the program when imported: the type is shown plainly, and the reason is a problem
    assert "ViewExits" in found["palette"]["Plugins"]
    assert [p for p in seen["problems"] if p[0] == "warning" and "'ViewExits'" in p[2] and "SystemExit" in p[2]]
