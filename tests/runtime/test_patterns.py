"""runtime.patterns: a designer's regular expression is searched within a time limit, other threads
running meanwhile, and refused when it is too long or not a pattern."""

from __future__ import annotations

import threading
import time

import pytest

from runtime.patterns import MAX_PATTERN_CHARS, PatternError, compile_pattern, search


def test_a_catastrophic_pattern_gives_up_at_the_limit_and_lets_other_threads_run():
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            stop.wait(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        started = time.monotonic()
        with pytest.raises(PatternError, match="backtracks"):
            search("(a|a)+$", "a" * 40 + "!", seconds=0.5)
        assert time.monotonic() - started < 30  # re never returns
    finally:
        stop.set()
        ticker.join()
    assert len([t for t in ticks if t >= started]) >= 5, "the search held the GIL"


def test_sane_patterns_search_as_re_does():
    assert search(r"\bhello\b", "Well HELLO there")
    assert not search(r"\bhello\b", "othello", ignore_case=True)
    assert not search("Hello", "hello", ignore_case=False)


@pytest.mark.parametrize("pattern, says", [("(", "not a regular expression"),
                                           ("a" * (MAX_PATTERN_CHARS + 1), "characters long")])
def test_bad_patterns_are_refused_with_the_reason(pattern, says):
    with pytest.raises(PatternError, match=says):
        compile_pattern(pattern)
