"""Editing a case's expectations and adding a case keep the suite file's comments, order and quoting."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.suites.file import SuiteError, load_suite, save_case, set_case_expectations
from tests.runtime.suites.router import GOOD, write

COMMENTED = "# The router's suite: written by hand.\n" + GOOD.replace(
    "          path: [classify, hello]\n", "          path: [classify, hello]  # the greeting goes straight to hello\n")


def test_the_form_writes_its_fields_and_keeps_comments_order_and_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, COMMENTED)
    set_case_expectations(path, "greets", [{
        "path": ["classify", "tools", "hello"], "visits": ["tools"], "exits": {"classify": "intent:shop"},
        "intent": "shop", "reply": {"contains": ["sword"], "not_contains": []}}])
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# The router's suite: written by hand.\n")
    assert "          path: [classify, tools, hello] # the greeting goes straight to hello\n" in text
    assert '          exits: {classify: "intent:shop"}\n' in text, "flow style and quotes kept"
    assert "          visits: [tools]\n" in text and '      - say: "greet me please"\n' in text
    assert "not_contains" not in text.split("- name: shops")[0], "an emptied field goes"
    lines = [line.strip().split(":")[0] for line in text.split("- name: shops")[0].splitlines()]
    assert lines.index("path") < lines.index("exits") < lines.index("intent") < lines.index("slots") < lines.index(
        "reply") < lines.index("budget"), "the keys keep their order; new ones (visits) go last"
    loaded = load_suite(path)
    expect = loaded.suite.cases[0].turns[0].expect
    assert expect.path == ["classify", "tools", "hello"] and expect.visits == ["tools"] and expect.intent == "shop"
    assert expect.reply.contains == ["sword"] and expect.reply.regex == "greet" and expect.reply.max_words == 30
    assert expect.slots == {"intent": "greet"} and expect.budget.max_prompt_tokens == 500, "the rest is untouched"
    assert "  - name: shops\n    turns:\n      - say: \"shop for a sword\"" in text, "the file's indentation"


def test_a_form_that_makes_the_suite_invalid_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = write(tmp_path, COMMENTED)
    before = path.read_text(encoding="utf-8")
    with pytest.raises(SuiteError) as raised:
        set_case_expectations(path, "greets", [{"path": ["classify", "nowhere"]}])
    assert "no node 'nowhere'" in str(raised.value) and str(path) in str(raised.value)
    with pytest.raises(SuiteError, match="no case named 'missing'"):
        set_case_expectations(path, "missing", [{}])
    with pytest.raises(SuiteError, match="has 1 turns, not 2"):
        set_case_expectations(path, "greets", [{}, {}])
    assert path.read_text(encoding="utf-8") == before
    assert not list(tmp_path.glob(".*checking")), "the check's copy is gone"


def test_adding_a_case_keeps_the_comments(tmp_path: Path) -> None:
    path = write(tmp_path, COMMENTED)
    name = save_case(path, tmp_path / "router.json", {"name": "greets", "turns": [
        {"say": "hello", "expect": {"path": ["classify", "hello"]}}]})
    text = path.read_text(encoding="utf-8")
    assert name == "greets (2)" and text.startswith("# The router's suite")
    assert "# the greeting goes straight to hello" in text
    assert [c.name for c in load_suite(path).suite.cases] == ["greets", "shops", "greets (2)"]
