"""Scene suites: rounds with expectations per speaker (who spoke, in what order, by which rule, who
heard the player, what each said), the director's coverage, located errors, and ``parley test`` on
them. The example scene's suite passes on the deterministic backend and on the sample model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.cli import main
from runtime.resources import examples_dir
from runtime.suites.file import SuiteError
from runtime.suites.scenes import is_scene_suite, load_scene_suite, run_scene_suite

SUITE = examples_dir() / "scenes" / "tavern.scene.suite.yaml"


def _suite(tmp_path: Path, text: str) -> Path:
    """``text`` as a scene suite beside a copy of the examples' scenes folder."""
    folder = tmp_path / "examples"
    if not folder.exists():
        shutil.copytree(examples_dir(), folder)
    path = folder / "scenes" / "test.scene.suite.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_scene_suite_passes_and_covers_every_rule_and_npc() -> None:
    loaded = load_scene_suite(SUITE)
    result = run_scene_suite(loaded, ScriptedBackend())
    assert result.passed, [(c.case, c.error, [k.message for r in c.rounds for k in r.checks if not k.passed])
                           for c in result.cases]
    assert result.rules_used == {"addressed", "about", "round_robin"}
    assert result.npcs_spoke == {"mira", "tomas", "brann"}
    assert next(iter(result.coverage_lines())).startswith("director rules that picked a speaker: 3 of 3")


def test_a_round_that_differs_fails_naming_the_round_the_speaker_and_the_check(tmp_path: Path) -> None:
    path = _suite(tmp_path, """
scene: tavern.scene.json
cases:
  - name: wrong order
    rounds:
      - say: "Good evening, all!"
        expect:
          speakers: [tomas, mira]
          rules: [about]
          heard_by: [mira]
          lines:
            mira: {reply: {contains: ["a room"]}}
            brann: {reply: {max_words: 5}}
""")
    result = run_scene_suite(load_scene_suite(path), ScriptedBackend())
    failures = [c.message for r in result.cases[0].rounds for c in r.checks if not c.passed]
    assert not result.passed
    assert failures == ["speakers tomas, mira (spoke: mira, tomas)",
                        "picked by about (by round_robin, round_robin)", "heard by mira (heard by mira, tomas)",
                        "mira: contains 'a room'", "brann's line (it did not speak; spoke: mira, tomas)"]


@pytest.mark.parametrize("body, words, line", [
    ("      - say: hi\n        to: ghost\n", "cases.0.rounds.0.to: 'ghost' is no NPC of tavern.scene.json", 5),
    ("      - say: hi\n        expect: {rules: [loudest]}\n", "'loudest' is not one of the scene's rules", 5),
    ("      - say: hi\n        whisper: true\n", "a whisper needs 'to'", 5),
    ("      - say: hi\n        shout: true\n", "case 'bad', cases.0.rounds.0.shout: unknown key", 6),
])
def test_a_bad_scene_suite_names_the_case_and_line(tmp_path: Path, body: str, words: str, line: int) -> None:
    path = _suite(tmp_path, f"scene: tavern.scene.json\ncases:\n  - name: bad\n    rounds:\n{body}")
    with pytest.raises(SuiteError) as caught:
        load_scene_suite(path)
    problem = caught.value.problems[0]
    assert words in problem.message and problem.line == line and problem.file == str(path), problem


def test_a_suite_naming_a_missing_scene_says_so() -> None:
    path = SUITE.parent / "missing.scene.suite.yaml"
    try:
        path.write_text("scene: nowhere.scene.json\ncases:\n  - name: x\n    rounds:\n      - say: hi\n",
                        encoding="utf-8")
        with pytest.raises(SuiteError, match="scene: nowhere.scene.json cannot be loaded"):
            load_scene_suite(path)
        assert is_scene_suite(path)
    finally:
        path.unlink()


def test_parley_test_runs_scene_suites_and_refuses_the_agent_only_flags(tmp_path: Path, capsys) -> None:
    report = tmp_path / "scene.json"
    assert main(["test", str(SUITE), "--backend", "scripted", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "PASS tavern.scene.suite.yaml::the room answers in turn" in out and "2 passed, 0 failed" in out
    assert "NPCs that spoke: 3 of 3" in out
    saved = json.loads(report.read_text(encoding="utf-8"))["scene_suites"][0]
    assert saved["rules_used"] == ["about", "addressed", "round_robin"]
    assert saved["cases"][0]["rounds"][0]["speakers"] == ["mira", "tomas"]
    assert main(["test", str(SUITE), "--backend", "scripted", "--repeat", "3"]) == 2
    assert "--repeat: not for scene suites" in capsys.readouterr().err
    assert main(["test", str(SUITE), str(examples_dir() / "chat.suite.yaml"), "--backend", "scripted"]) == 2
    assert "run apart" in capsys.readouterr().err


@pytest.mark.model
def test_the_example_scene_suite_passes_on_the_sample_model(sample_model: Path, tmp_path: Path) -> None:
    from runtime.backends.llama import LlamaBackend
    from tests.runtime.scene.test_scene_real_model import tavern_on

    scene = tavern_on(sample_model, tmp_path, max_tokens=48)
    shutil.copyfile(SUITE, scene.parent / SUITE.name)
    backend = LlamaBackend(asset_dir=scene.parent)
    try:
        result = run_scene_suite(load_scene_suite(scene.parent / SUITE.name), backend)
    finally:
        backend.close()
    assert result.passed, [(c.case, c.error, [k.message for r in c.rounds for k in r.checks if not k.passed])
                           for c in result.cases]


def test_a_round_that_fails_fails_its_case_naming_the_round_and_the_run_goes_on() -> None:
    from runtime.backends.scripted import default_reply
    from runtime.problems import BackendError

    def bard_breaks(key, request):
        if "/tomas/" in key:
            raise BackendError("the bard's model is gone")
        return default_reply(key, request)

    result = run_scene_suite(load_scene_suite(SUITE), ScriptedBackend(bard_breaks))
    assert [c.passed for c in result.cases] == [False, False]
    assert result.cases[0].error == "round 1 failed: the bard's model is gone", result.cases[0].error
