"""A separate package adds a node type through the ``parley.node_types`` entry point, and it works
everywhere a built-in type does, with no file of runtime/ or editor/ changed: the example plugin
in examples/node-type-plugin is built and installed (into a folder of its own), then a fresh
interpreter validates an asset that uses it, runs it on the sample model, and shows it in the
editor's palette, canvas, properties, conversation and Turn Inspector (plugin_session.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "node-type-plugin"

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def plugin_session(tmp_path_factory, sample_model) -> dict:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(PLUGIN)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    assert list(target.glob("parley_remember-*.dist-info/entry_points.txt"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)]),
           "QT_QPA_PLATFORM": "offscreen", "QT_PREFERRED_BINDING": "PySide6"}
    workdir = tmp_path_factory.mktemp("session")
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "plugin_session.py"), str(workdir)], check=False,
                          env=env, capture_output=True, text=True, timeout=600, cwd=workdir)
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and result, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(result[-1][len("RESULT "):])
    found["screenshot"] = str(workdir / "plugin-editor.png")
    return found


def test_the_plugin_lives_outside_the_app() -> None:
    files = [p for p in PLUGIN.rglob("*.py")]
    assert files and not any(p.is_relative_to(ROOT / "runtime") or p.is_relative_to(ROOT / "editor") for p in files)


def test_the_entry_point_registers_the_node_type(plugin_session) -> None:
    assert plugin_session["registered"] and plugin_session["plugin_problems"] == []
    assert plugin_session["package"] == "parley-remember"
    assert plugin_session["loads"] == ["Remember", "GenerateAndSpeak"]


def test_its_validation_rules_run_with_the_rest(plugin_session) -> None:
    assert not [p for p in plugin_session["problems"] if p.startswith("error")], plugin_session["problems"]
    assert "warning:name.variable" in plugin_session["bad_problems"]
    assert "error:name.only_if_matches" in plugin_session["bad_problems"]
    assert "name" in plugin_session["wrong_field"] and "variable" in plugin_session["wrong_field"]


def test_it_runs_in_a_conversation_on_the_sample_model(plugin_session) -> None:
    run = plugin_session["runtime"]
    assert run["paths"] == [["name", "reply"]] * 3
    assert run["remember_output"] == ["", "Aldric"]  # the first line does not look like a name
    assert run["variable"] == "Aldric" and run["reply_prompt_has_name"]
    assert run["third_reply"].strip()


def test_the_editor_shows_it_in_the_palette_canvas_and_properties(plugin_session) -> None:
    editor = plugin_session["editor"]
    assert "Remember" in editor["palette"]["Memory"]
    assert editor["canvas_summary"] == ["player_name \u2190 {{input}}", "if the line matches /^[A-Z][a-z]+$/"]
    assert editor["canvas_ports"] == ["default_exit"]
    assert not [p for p in editor["problems"] if p.startswith("error")]
    assert "Remember" in editor["properties_header"]
    assert {"variable", "value", "only_if_matches", "default_exit"} <= set(editor["properties_fields"])


def test_the_turn_inspector_shows_its_run(plugin_session) -> None:
    inspector = plugin_session["inspector"]
    assert inspector["failures"] == []
    assert any(item.startswith("name") and "Remember" in item for item in inspector["nodes"])
    assert inspector["shown"] == "name"
    assert "Brenna" in inspector["prompt_and_output"]
    assert Path(plugin_session["screenshot"]).stat().st_size > 10_000


def test_the_plugin_imports_nothing_of_the_runtime_but_runtime_nodes() -> None:
    """``runtime.nodes`` is the one surface a plugin uses; its view module may import the editor."""
    import ast

    imported: dict[str, set[str]] = {}
    for path in (PLUGIN / "parley_remember").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = {node.module}
            elif isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            else:
                continue
            imported.setdefault(path.name, set()).update(n for n in names if n.split(".")[0] in ("runtime", "editor"))
    assert imported["__init__.py"] == {"runtime.nodes"}
    assert all(n == "runtime.nodes" or n.startswith("editor") for names in imported.values() for n in names), imported
