"""Kept runs: a case's last passing run survives a failing one, and what changed in the asset between them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from runtime.asset.model import Asset
from runtime.suites.file import load_suite
from runtime.suites.kept import AssetChange, KeptRuns, asset_changes, blamed_node, kept_run
from runtime.suites.run import run_suites
from tests.runtime.suites.router import ASSET, GOOD, scripted, write


def _run_and_keep(kept: KeptRuns, suite_path: Path, asset: dict | None = None, backend=scripted):
    loaded = load_suite(suite_path) if asset is None else load_suite(write(suite_path.parent, suite_path.read_text(), asset))
    report = run_suites([loaded], backend)
    for result in report.results:
        kept.keep(kept_run(loaded.path, result, loaded.asset))
    return loaded, report


def test_a_failing_run_keeps_the_last_passing_one_and_its_asset(tmp_path: Path) -> None:
    kept = KeptRuns(tmp_path / "kept")
    suite = write(tmp_path, GOOD)
    _run_and_keep(kept, suite)
    broken = copy.deepcopy(ASSET)
    broken["nodes"][0]["intents"][0]["exit"] = "tools"  # greet now routes to the tool call
    _loaded, report = _run_and_keep(kept, suite, broken)
    greets = report.results[0]
    assert not greets.passed

    again = KeptRuns(tmp_path / "kept")  # read back from disk, as a new editor session would
    passing, current = again.last_passing(suite, "greets"), again.current(suite, "greets")
    assert passing is not None and current is not None
    assert passing.passed and not current.passed
    assert passing.turns[0].path == ["classify", "hello"] and current.turns[0].path == ["classify", "tools", "hello"]
    assert passing.turns[0].diagnostics is not None and "hello" in passing.turns[0].parts
    assert blamed_node(current.turns[0].checks) == "classify"
    assert asset_changes(passing.asset, current.asset) == [AssetChange("classify", "intents[greet].exit", "hello", "tools")]


def test_kept_runs_live_in_the_user_data_folder_one_file_per_case(tmp_path: Path, monkeypatch) -> None:
    import platformdirs

    monkeypatch.delenv("PARLEY_TEST_RUNS", raising=False)
    monkeypatch.setattr(platformdirs, "user_data_path", lambda *a, **k: tmp_path / "data")
    kept = KeptRuns()
    assert kept.folder == tmp_path / "data" / "test-runs"
    suite = write(tmp_path / "", GOOD)
    _run_and_keep(kept, suite)
    files = sorted(p.name for p in kept.folder.rglob("*.json"))
    assert len(files) == 2 and files[0].startswith("greets-") and files[1].startswith("shops-")
    assert not list(tmp_path.glob("*.kept*")), "nothing is written beside the suite"


def test_a_damaged_kept_file_is_no_run(tmp_path: Path) -> None:
    kept = KeptRuns(tmp_path / "kept")
    suite = write(tmp_path, GOOD)
    _run_and_keep(kept, suite)
    path = kept.file(suite, "greets")
    data = json.loads(path.read_text())
    data["passing"]["turns"] = "garbage"
    path.write_text(json.dumps(data))
    assert kept.last_passing(suite, "greets") is None
    path.write_text("{not json")
    assert kept.current(suite, "greets") is None


def test_asset_changes_field_by_field() -> None:
    old = Asset.model_validate(ASSET)
    data = copy.deepcopy(ASSET)
    data["nodes"][1]["system_prompt"] = "Snarl."
    data["nodes"][1].setdefault("metadata", {})["parley_studio"] = {"position": [10, 20]}  # layout only
    data["nodes"][2]["tools"][0]["mock_result"] = "none left"
    data["nodes"].append({"id": "bye", "type": "GenerateAndSpeak", "system_prompt": "Bye."})
    data["name"] = "router 2"
    changes = asset_changes(old, Asset.model_validate(data))
    texts = [c.text() for c in changes]
    assert texts[0] == "(asset) \u00b7 name: 'router' \u2192 'router 2'"
    assert "hello \u00b7 system_prompt: 'Greet.' \u2192 'Snarl.'" in texts
    assert "tools \u00b7 tools[stock].mock_result: '3 left' \u2192 'none left'" in texts
    assert any(c.node == "bye" and c.field == "(node)" for c in changes)
    assert not any("parley_studio" in c.field for c in changes)
    assert asset_changes(old, old) == []


@pytest.mark.model
def test_on_the_sample_model_a_failing_case_names_the_classifier_and_the_edit(tmp_path: Path, sample_model) -> None:
    from runtime.backends.llama import LlamaBackend
    from runtime.resources import examples_dir

    for name in ("intent_router.json", "intent_router.suite.yaml"):
        (tmp_path / name).write_text((examples_dir() / name).read_text(encoding="utf-8"), encoding="utf-8")
    suite = tmp_path / "intent_router.suite.yaml"
    kept = KeptRuns(tmp_path / "kept")

    def run(asset_data: dict) -> object:
        (tmp_path / "intent_router.json").write_text(json.dumps(asset_data), encoding="utf-8")
        loaded = load_suite(suite)
        loaded.suite.cases = [c for c in loaded.suite.cases if c.name == "asks the way"]
        report = run_suites([loaded], LlamaBackend)
        kept.keep(kept_run(suite, report.results[0], loaded.asset))
        return report.results[0]

    original = json.loads((tmp_path / "intent_router.json").read_text())
    assert run(original).passed
    broken = copy.deepcopy(original)
    classify = next(n for n in broken["nodes"] if n["id"] == "classify")
    intent = next(i for i in classify["intents"] if i["name"] == "ask_directions")
    intent["exit"] = "smalltalk"  # the designer's slip: directions now go to small talk
    failed = run(broken)
    assert not failed.passed
    current, passing = kept.current(suite, "asks the way"), kept.last_passing(suite, "asks the way")
    assert passing is not None and passing.passed and current is not None
    assert blamed_node(current.turns[0].checks) == "classify"
    assert asset_changes(passing.asset, current.asset) == [
        AssetChange("classify", "intents[ask_directions].exit", "directions", "smalltalk")]
    assert passing.turns[0].path == ["classify", "directions"] and current.turns[0].path == ["classify", "smalltalk"]


def test_a_kept_file_of_version_1_reads_as_the_same_run(tmp_path: Path) -> None:
    """Version 1 kept each turn's reply, path, diagnostics and prompt parts in the turn; version 2 keeps
    its record. A designer's last passing run kept by the release before survives the upgrade."""
    kept = KeptRuns(tmp_path / "kept")
    suite = write(tmp_path, GOOD)
    _run_and_keep(kept, suite)
    path = kept.file(suite, "greets")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == 2
    now = kept.last_passing(suite, "greets")
    for run in (data["current"], data["passing"]):  # written back as version 1 wrote it
        for turn in run["turns"]:
            record = turn.pop("record")
            turn.update(reply=record["reply"], path=record["path"], diagnostics=record["diagnostics"],
                        parts={n: p["parts"] for n, p in record["prompts"].items()},
                        context_sizes={n: p["context_size"] for n, p in record["prompts"].items()})
    path.write_text(json.dumps({**data, "version": 1}), encoding="utf-8")
    then = KeptRuns(tmp_path / "kept").last_passing(suite, "greets")
    assert then is not None and now is not None
    got, want = then.turns[0], now.turns[0]
    assert (got.line, got.reply, got.path, got.diagnostics, got.parts, got.context_sizes) == (
        want.line, want.reply, want.path, want.diagnostics, want.parts, want.context_sizes)
    assert "hello" in got.parts and got.context_sizes["hello"] > 0
