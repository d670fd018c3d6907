"""Regular expressions a designer writes (a suite's reply check, a node's filter): compiled and
searched within limits, since one such pattern can backtrack without end.

Python's ``re`` holds the GIL while it searches, so ``(\\w+\\s?)+$`` against a long line froze the
whole program (the editor's window, Stop, ``parley test``). The ``regex`` module stops at a time
limit and lets other threads run while it searches.
"""

from __future__ import annotations

import regex

MAX_PATTERN_CHARS = 1_000  # far longer than any real check, short enough to read at a glance
SEARCH_SECONDS = 1.0  # one search; a sane pattern takes microseconds on a reply


class PatternError(ValueError):
    """A pattern that is not a regular expression, is too long, or took too long to search."""


def compile_pattern(pattern: str, ignore_case: bool = True) -> regex.Pattern[str]:
    """``pattern`` compiled, or ``PatternError`` saying why not."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the regular expression is {len(pattern):,} characters long; at most {MAX_PATTERN_CHARS:,}")
    try:
        return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise PatternError(f"not a regular expression: {exc}") from None


def search(pattern: str, text: str, ignore_case: bool = True, seconds: float = SEARCH_SECONDS) -> bool:
    """Whether ``pattern`` is found in ``text``. Raises ``PatternError`` for a bad pattern, or one
    that searched for longer than ``seconds`` (it backtracks without end on this text)."""
    compiled = compile_pattern(pattern, ignore_case)
    try:
        return compiled.search(text, timeout=seconds, concurrent=True) is not None
    except TimeoutError:
        raise PatternError(f"gave up after {seconds:g} s: the pattern backtracks without end on this text; "
                           "rewrite it, e.g. (\\w+\\s?)+ as [\\w\\s]+") from None
