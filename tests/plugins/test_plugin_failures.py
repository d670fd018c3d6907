"""A plugin's failure is a located problem on its node or type, never a crash (issue 20, 16): at
import (SystemExit, KeyboardInterrupt, any error), at registration (a type name that is not a plain
identifier), when it runs (a failed turn naming the node and type, the conversation unchanged) and
when it is checked (a problem on that node; the other nodes are checked as usual)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest

from runtime import nodes
from runtime.agent import Agent
from runtime.asset.file import asset_from_dict
from runtime.asset.validation import validate_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.nodes import NODE_TYPES, TurnError
from tests.plugins.failing_types import registered

ROOT = Path(__file__).resolve().parents[2]

PLUGINS = {
    "exits_at_import": "raise SystemExit(3)\n",
    "interrupts_at_import": "raise KeyboardInterrupt\n",
    "bad_name_empty": "TYPE = ''\n",
    "bad_name_spaced": "TYPE = 'Two words'\n",
    "bad_name_digit": "TYPE = '9lives'\n",
    "bad_name_number": "TYPE = 3\n",
}
BAD_NAME = '''
from typing import Literal
from runtime.nodes import NodeBase, NodeType

class Odd(NodeBase):
    type: Literal[TYPE] = TYPE

NODE_TYPE = NodeType(Odd)
'''


def _plugin_folder(tmp_path: Path, names: list[str]) -> Path:
    for name in names:
        code = PLUGINS[name]
        (tmp_path / f"{name}.py").write_text(code + BAD_NAME if code.startswith("TYPE") else code, encoding="utf-8")
    dist = tmp_path / "parley_failing-0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: parley-failing\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[{nodes.ENTRY_POINT_GROUP}]\n" + "".join(
        f"{name} = {name}:NODE_TYPE\n" for name in names), encoding="utf-8")
    return tmp_path


@pytest.fixture
def load_only(tmp_path, monkeypatch):
    """load_plugins over the given plugins alone, with a PLUGIN_PROBLEMS of its own."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(nodes, "PLUGIN_PROBLEMS", [])

    def load(*names: str) -> list[str]:
        points = [metadata.EntryPoint(name, f"{name}:NODE_TYPE", nodes.ENTRY_POINT_GROUP) for name in names]
        _plugin_folder(tmp_path, list(names))
        monkeypatch.setattr(nodes.metadata, "entry_points", lambda group: points)
        for name in names:
            sys.modules.pop(name, None)
        nodes.load_plugins()
        return nodes.PLUGIN_PROBLEMS

    return load


def test_a_plugin_that_exits_at_import_is_a_problem_not_an_exit(load_only) -> None:
    [problem] = load_only("exits_at_import")
    assert "'exits_at_import'" in problem and "SystemExit(3)" in problem


def test_a_keyboard_interrupt_at_import_is_recorded_and_goes_on_only_on_the_main_thread(load_only) -> None:
    with pytest.raises(KeyboardInterrupt):
        load_only("interrupts_at_import")
    assert "KeyboardInterrupt" in nodes.PLUGIN_PROBLEMS[0]
    nodes._TRIED.clear()
    raised: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catching(lambda: load_only("interrupts_at_import"), raised))
    thread.start()
    thread.join()
    assert raised == [] and len(nodes.PLUGIN_PROBLEMS) == 2


def _catching(call, raised: list[BaseException]) -> None:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - what the test looks for
        raised.append(exc)


@pytest.mark.parametrize("name", ["bad_name_empty", "bad_name_spaced", "bad_name_digit", "bad_name_number"])
def test_a_type_name_that_is_not_a_plain_identifier_is_refused_at_registration(load_only, name) -> None:
    before = dict(NODE_TYPES)
    [problem] = load_only(name)
    assert f"'{name}'" in problem and "is not a plain identifier" in problem
    assert NODE_TYPES == before


@pytest.mark.parametrize(("plugin", "code", "said"), [
    ("exits_at_import", 0, "SystemExit(3)"),
    ("interrupts_at_import", 130, "parley: interrupted while starting"),
])
def test_parley_says_what_a_plugin_did_at_import(tmp_path, plugin, code, said) -> None:
    """A plugin raising SystemExit at import exited every parley command with status 3 and no
    message; KeyboardInterrupt gave a traceback."""
    folder = _plugin_folder(tmp_path, [plugin])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "runtime", "validate", str(ROOT / "resources/examples/chat.json")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == code, done.stdout + done.stderr
    assert said in done.stdout + done.stderr and "Traceback" not in done.stderr


def _asset(node_type: str):
    return asset_from_dict({"version": 1, "start_node": "p", "variables": {"mood": "calm"}, "nodes": [
        {"id": "p", "type": node_type},
        {"id": "loose", "type": "Generate"}]}, "failing.json")


@pytest.mark.parametrize(("node_type", "words"), [("RunRaises", "RuntimeError: the plugin's run broke"),
                                                  ("RunExits", "SystemExit(3)"),
                                                  ("ExitsRaise", "KeyError")])
def test_a_run_that_raises_is_a_failed_turn_naming_the_node_and_type(node_type, words) -> None:
    with registered():
        agent = Agent(_asset(node_type), ScriptedBackend())
        with pytest.raises(TurnError) as caught:
            agent.run_turn("hello")
    assert caught.value.node_id == "p" and f"the {node_type} node failed" in str(caught.value)
    assert words in str(caught.value)
    assert agent.history.turns == [] and agent.variables == {"mood": "calm"}  # the conversation is unchanged


@pytest.mark.parametrize(("node_type", "method", "words"), [
    ("CheckRaises", "check", "ValueError: the plugin's check broke"),
    ("GraphCheckExits", "check_in_graph", "SystemExit(3)"),
    ("ExitsRaise", "exits", "KeyError"),
])
def test_a_check_or_exits_that_raises_is_a_problem_on_the_node_and_the_rest_is_checked(node_type, method,
                                                                                      words) -> None:
    with registered():
        problems = validate_asset(_asset(node_type), "failing.json")
    mine = [p for p in problems if p.node_id == "p" and p.severity == "error"]
    assert any(f"node type's {method}() failed" in p.message and words in p.message for p in mine), problems
    assert all(p.file == "failing.json" for p in mine)
    others = {p.node_id for p in problems}
    assert "loose" in others  # the other node is still checked (unreachable, budget)


def test_a_model_uses_that_raises_is_a_problem_of_the_estimate_not_a_crash() -> None:
    """The VRAM estimate asks every node which contexts it keeps; a plugin failing there is a problem
    on its node, and the other nodes are still sized."""
    from runtime.asset.estimate import estimate_asset

    def no_model(name, asset_dir=None):
        raise FileNotFoundError(name)

    with registered():
        estimate = estimate_asset(_asset("ModelUsesRaise"), no_model, asset_file="failing.json")
    mine = [p for p in estimate.problems if p.node_id == "p"]
    assert mine and "model_uses() failed: RuntimeError: the plugin's model_uses broke" in mine[0].message
    assert mine[0].file == "failing.json"


def test_a_plugin_whose_descriptive_methods_raise_validates_and_says_so() -> None:
    """speaks, uses_model, history_budget and field_limits are asked by the canvas, the properties
    dock and validation's walks: a plugin's failure there answers the base's default and is a
    plugin problem naming the type and method, not a crash."""
    from tests.plugins.failing_types import DescribesBadly

    before = list(nodes.PLUGIN_PROBLEMS)
    try:
        with registered(DescribesBadly):
            node = DescribesBadly(id="p")
            assert (node.speaks(), node.uses_model(), node.history_budget(2048), node.field_limits()) == (
                False, False, None, {})
            problems = validate_asset(asset_from_dict({"version": 1, "start_node": "p", "nodes": [
                {"id": "p", "type": "DescribesBadly", "default_exit": "s"},
                {"id": "s", "type": "Summarize"}]}, "failing.json"), "failing.json")
        assert not [p for p in problems if p.node_id == "p" and p.severity == "error"], problems
        said = [p for p in nodes.PLUGIN_PROBLEMS if p not in before]
        failed = {m for m in ("speaks", "uses_model", "history_budget", "field_limits")
                  if any(f"'DescribesBadly': {m}() failed" in p for p in said)}
        assert failed == {"speaks", "uses_model", "history_budget", "field_limits"}, said
    finally:
        nodes.PLUGIN_PROBLEMS[:] = before
