"""A renamed node in a suite's text: every expectation that names it (or a node of the behaviour it runs,
``old/classify``) names the new id, the file's comments, order and quoting kept, and the count is told;
``suites_renaming`` finds the suites beside an asset that need it, and a suite checked against an
edited asset (``suites_beside(edited=...)``) loads with the new id before the asset is saved."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.asset.model import Asset
from runtime.suites.file import rename_node_in_suite_text, renamed_id, suites_beside, suites_renaming

TEXT = """\
# kept
asset: router.json
cases:
  - name: one  # kept too
    turns:
      - say: "hi"
        expect:
          path: [guard, "guard/classify", guardian, hello]
          exits: {guard/classify: intent:greet, other: default_exit}
          reply: {contains: [guard]}
      - say: again
        expect:
          visits:
            - guard
"""


def test_renamed_id() -> None:
    assert renamed_id("guard", "guard", "gate") == "gate"
    assert renamed_id("guard/inner/x", "guard", "gate") == "gate/inner/x"
    assert renamed_id("guardian", "guard", "gate") == "guardian"
    assert renamed_id("x/guard", "guard", "gate") == "x/guard"


def test_every_expectation_naming_the_node_follows_it() -> None:
    text, changed = rename_node_in_suite_text(TEXT, "guard", "gate")
    assert changed == 3, "path, exits and visits; the reply's text is not a node"
    assert text.startswith("# kept\n") and "  - name: one  # kept too\n" in text
    assert '          path: [gate, "gate/classify", guardian, hello]\n' in text
    assert "exits: {gate/classify: intent:greet, other: default_exit}" in text
    assert "reply: {contains: [guard]}" in text and "            - gate\n" in text


def test_a_suite_that_does_not_name_it_is_the_same_text() -> None:
    assert rename_node_in_suite_text(TEXT, "nobody", "somebody") == (TEXT, 0)


def test_two_exits_that_would_become_one_are_left(tmp_path: Path) -> None:
    text = "asset: a.json\ncases:\n  - name: c\n    turns:\n      - say: x\n        expect:\n" \
           "          exits: {a: default_exit, b: default_exit}\n"
    assert rename_node_in_suite_text(text, "a", "b") == (text, 0)


ROUTER = {"version": 1, "name": "router", "default_model": "m.gguf", "start_node": "guard",
          "nodes": [{"id": "guard", "type": "GenerateAndSpeak", "system_prompt": "Hi."},
                    {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Hi."}]}


def test_the_suites_beside_an_asset_that_name_the_node(tmp_path: Path) -> None:
    (tmp_path / "router.json").write_text(json.dumps(ROUTER), encoding="utf-8")
    suite = "asset: router.json\ncases:\n  - name: c\n    turns:\n      - say: x\n        expect: {path: [guard]}\n"
    (tmp_path / "router.suite.yaml").write_text(suite, encoding="utf-8")
    (tmp_path / "else.suite.yaml").write_text(suite.replace("router.json", "else.json"), encoding="utf-8")
    (renamed,) = suites_renaming(tmp_path / "router.json", "guard", "gate")
    assert renamed.path.name == "router.suite.yaml" and renamed.before == suite and renamed.changed == 1

    (tmp_path / "router.suite.yaml").write_text(renamed.after, encoding="utf-8")
    edited = Asset.model_validate({**ROUTER, "start_node": "gate",
                                   "nodes": [{**ROUTER["nodes"][0], "id": "gate"}, ROUTER["nodes"][1]]})
    (beside,) = suites_beside(tmp_path / "router.json")
    assert beside.loaded is None and "no node 'gate'" in beside.problems[0].message, "the saved file has no gate"
    (beside,) = suites_beside(tmp_path / "router.json", edited=edited)
    assert beside.loaded is not None and beside.loaded.suite.cases[0].turns[0].expect.path == ["gate"]
