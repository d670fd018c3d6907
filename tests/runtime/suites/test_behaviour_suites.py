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
