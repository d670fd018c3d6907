"""Suites of an asset that runs a behaviour: expectations name the behaviour's nodes by their
namespaced ids (``visits: [guard/classify]``), a name no node has is a located error, and coverage
counts the namespaced nodes and exits (scripted backend: exact)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.suites.file import SuiteError, load_suite
from runtime.suites.run import run_suites


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copy(examples_dir() / "gate_guard.json", tmp_path)
    shutil.copytree(examples_dir() / "behaviours", tmp_path / "behaviours")
    return tmp_path


def suite(folder: Path, expect: str) -> Path:
    path = folder / "guard.suite.yaml"
    path.write_text(f"asset: gate_guard.json\ncases:\n  - name: one\n    turns:\n      - say: \"I threaten you\"\n"
                    f"        expect: {expect}\n", encoding="utf-8")
    return path


def test_an_expectation_names_a_namespaced_node(folder: Path) -> None:
    loaded = load_suite(suite(folder, "{visits: [guard/classify, guard/warn], exits: {guard/warned: default_exit}}"))
    report = run_suites([loaded], ScriptedBackend)
    assert report.passed, [f for r in report.results for f in r.failures]
    coverage = next(iter(report.coverage.values()))
    assert coverage.visits["guard/warn"] == 1 and coverage.exits[("guard/classify", "intent:threaten")] == 1
    assert ("guard/classify", "intent:bribe") in coverage.never_taken
    assert "guard/refuse_bribe" in coverage.never_visited


def test_a_failed_expectation_names_the_namespaced_node(folder: Path) -> None:
    report = run_suites([load_suite(suite(folder, "{not_visits: [guard/warn]}"))], ScriptedBackend)
    assert not report.passed
    assert any("does not visit guard/warn" in f for r in report.results for f in r.failures)


def test_a_namespaced_node_that_does_not_exist_is_a_located_error(folder: Path) -> None:
    with pytest.raises(SuiteError) as raised:
        load_suite(suite(folder, "{visits: [guard/nothing]}"))
    problem = raised.value.problems[0]
    assert "no node 'guard/nothing' in gate_guard.json" in problem.message and problem.line == 6


def test_a_suite_whose_behaviour_is_gone_says_so(folder: Path) -> None:
    shutil.rmtree(folder / "behaviours")
    with pytest.raises(SuiteError) as raised:
        load_suite(suite(folder, "{visits: [guard]}"))
    assert "runs a behaviour that cannot be loaded" in raised.value.problems[0].message
    assert raised.value.problems[1].node_id == "guard" and raised.value.problems[1].field == "behaviour"


def test_a_kept_run_of_an_expanded_asset_reads_back_the_same(folder: Path) -> None:
    from runtime.asset.file import load_asset
    from runtime.suites.kept import KeptRuns, asset_changes, kept_run

    loaded = load_suite(suite(folder, "{visits: [guard/warn]}"))
    report = run_suites([loaded], ScriptedBackend)
    kept = KeptRuns(folder / "kept")
    kept.keep(kept_run(loaded.path, report.results[0], loaded.asset))
    again = KeptRuns(folder / "kept").current(loaded.path, "one")
    assert again is not None, "a kept run of an asset with namespaced ids reads back"
    assert again.asset.node_ids() == loaded.asset.node_ids()
    assert again.asset.node("guard").exits() == {"enter": "guard/classify"}
    assert again.asset.node("guard/warned").exits() == loaded.asset.node("guard/warned").exits()
    assert asset_changes(again.asset, loaded.asset) == []
    # against the asset as its file holds it (the editor's open document): no behaviour node is "removed"
    source = load_asset(folder / "gate_guard.json")
    assert asset_changes(again.asset, source) == []
    changed = source.model_copy(update={"nodes": [source.nodes[0], source.nodes[1].model_copy(
        update={"system_prompt": "Be brief."})]})
    assert [(c.node, c.field) for c in asset_changes(again.asset, changed)] == [("directions", "system_prompt")]
