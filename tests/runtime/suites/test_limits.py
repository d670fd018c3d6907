"""What a suite file cannot do to the program: hang it with a regex that backtracks without end,
fill its memory with an alias bomb, crash or hang it with deep nesting or a pipe, or take minutes
over many cases. Each is refused or stopped with a problem that says where and why."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import yaml

from runtime.patterns import MAX_PATTERN_CHARS, SEARCH_SECONDS
from runtime.suites import file as suite_file
from runtime.suites.checks import check_reply
from runtime.suites.file import (
    MAX_SUITE_CASES,
    MAX_SUITE_NESTING,
    Case,
    ReplyExpect,
    Suite,
    SuiteError,
    find_suites,
    load_suite,
    suites_beside,
)
from tests.runtime.suites.router import GOOD, write

ROOT = Path(__file__).resolve().parents[3]


def test_a_catastrophic_regex_fails_the_check_within_its_time_limit_and_names_the_pattern() -> None:
    # In a child process: ``re`` would search for ever holding the GIL, so no timeout here could fire.
    code = textwrap.dedent("""
        from runtime.suites.checks import check_reply
        from runtime.suites.file import ReplyExpect
        for pattern, reply in (("(a|a)+$", "a" * 40 + "!"), ("(\\\\w+\\\\s?)+$", "word " * 30 + "!")):
            [check] = check_reply(ReplyExpect(regex=pattern), reply)
            print(check.passed, check.message)
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=60 + 10 * SEARCH_SECONDS)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("False matches /(a|a)+$/") and "gave up after" in lines[0]
    assert lines[1].startswith("False matches /(\\w+\\s?)+$/")


def test_an_ordinary_regex_still_matches_case_insensitively() -> None:
    assert [c.passed for c in check_reply(ReplyExpect(regex=r"hello\s+there"), "HELLO   There!")] == [True]
    assert [c.passed for c in check_reply(ReplyExpect(regex=r"^bye"), "hello")] == [False]


def test_a_regex_over_the_length_limit_is_refused_where_it_is(tmp_path) -> None:
    long = "a" * (MAX_PATTERN_CHARS + 1)
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, GOOD.replace('regex: "greet"', f'regex: "{long}"')))
    problem = caught.value.problems[0]
    assert "at most 1,000" in problem.message and "cases.0.turns.0.expect.reply.regex" in problem.message
    assert problem.line == 12 and problem.column > 0


BOMB = """\
asset: router.json
cases:
  - name: bomb
    turns:
      - say: hi
        expect:
          slots:
            a: &a [x, x, x, x, x, x, x, x, x]
            b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
            c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
            d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
            e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
            f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
            g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
            h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
            i: [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_an_alias_bomb_is_refused_at_its_first_alias(tmp_path) -> None:
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, BOMB))
    [problem] = caught.value.problems
    assert "alias (*a)" in problem.message and "write the value out" in problem.message
    assert (problem.line, problem.column) == (9, 20)


@pytest.mark.parametrize("depth", [MAX_SUITE_NESTING + 1, 200_000])  # libyaml's composer crashes on the second
def test_deep_nesting_is_refused_at_the_line_and_column_it_goes_too_deep(tmp_path, depth) -> None:
    nested = "[" * depth + "]" * depth
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, f"asset: router.json\ncases:\n  - name: deep\n    variables: {nested}\n"))
    [problem] = caught.value.problems
    assert "nested too deeply" in problem.message and str(MAX_SUITE_NESTING) in problem.message
    assert problem.line == 4 and problem.column == 16 + MAX_SUITE_NESTING - 3


def test_nesting_within_the_limit_is_read(tmp_path) -> None:
    deep = "{a: " * (MAX_SUITE_NESTING - 8) + "1" + "}" * (MAX_SUITE_NESTING - 8)
    suite = GOOD.replace("slots: {intent: greet}", f"slots: {{intent: greet, deep: {deep}}}")
    assert load_suite(write(tmp_path, suite)).suite.cases[0].turns[0].expect.slots["deep"]["a"]


def test_a_fifo_named_like_a_suite_is_listed_with_why_and_never_read(tmp_path) -> None:
    write(tmp_path, GOOD)
    fifo = tmp_path / "pipe.suite.yaml"
    os.mkfifo(fifo)
    found: list = []
    reader = threading.Thread(target=lambda: found.append(suites_beside(tmp_path / "router.json")), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # it blocked opening the pipe: let it go, then fail
        with open(fifo, "w"):
            pass
        reader.join(30)
        pytest.fail("reading the suites beside the asset opened a FIFO")
    [listed] = found
    by_name = {s.path.name: s for s in listed}
    assert by_name["router.suite.yaml"].loaded is not None
    assert "a pipe (FIFO)" in by_name["pipe.suite.yaml"].problems[0].message
    assert fifo in find_suites(tmp_path / "router.json")


def test_a_suite_over_the_size_limit_is_refused_unread(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(suite_file, "MAX_SUITE_BYTES", 1000)
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, GOOD + "#" * 1000 + "\n"))
    assert "at most" in caught.value.problems[0].message


def test_more_cases_than_the_limit_are_refused_at_cases(tmp_path) -> None:
    case = "  - {name: c%d, turns: [{say: hi}]}\n"
    text = "asset: router.json\ncases:\n" + "".join(case % i for i in range(MAX_SUITE_CASES + 1))
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, text))
    [problem] = caught.value.problems
    assert "at most 10,000" in problem.message and (problem.line, problem.column) == (3, 3)


class _CountedName(str):
    comparisons = 0

    def __eq__(self, other: object) -> bool:
        _CountedName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_repeated_name_check_is_linear() -> None:
    n = 3000
    cases = [Case.model_construct(name=_CountedName(f"case {i}")) for i in range(n)]
    cases.append(Case.model_construct(name=_CountedName("case 7")))
    _CountedName.comparisons = 0
    with pytest.raises(ValueError, match="repeated: case 7"):
        Suite._unique_names(cases)
    assert _CountedName.comparisons < 10 * n  # list.count per name made n * n of them


def test_each_suite_is_parsed_once_with_libyaml(tmp_path, monkeypatch) -> None:
    assert suite_file._LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    write(tmp_path, GOOD)
    calls = []
    real = suite_file._compose
    monkeypatch.setattr(suite_file, "_compose", lambda *a: calls.append(a) or real(*a))
    [listed] = suites_beside(tmp_path / "router.json")
    assert listed.loaded is not None and len(calls) == 1
    load_suite(tmp_path / "router.suite.yaml")
    assert len(calls) == 2


def test_problems_have_1_based_lines_and_columns(tmp_path) -> None:
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, GOOD.replace("    variables: {mood: grumpy}", "    variabels: {mood: grumpy}")))
    problem = caught.value.problems[0]
    assert (problem.line, problem.column) == (4, 16)  # the value under the unknown key
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, GOOD.replace("path: [classify, hello]", "path: [classify, nowhere]")))
    assert (caught.value.problems[0].line, caught.value.problems[0].column) == (8, 11)
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, "asset: router.json\ncases: [unclosed\n"))
    assert caught.value.problems[0].column >= 1
