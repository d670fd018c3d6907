"""A reply that loops: the same phrase over and over until max_tokens cuts it (issue 23: the sample
model wrote "You're cut down!" up to the cap, 96 s a turn). The agent warns about such a reply in
the node's diagnostics, which the Turn Inspector shows."""

from __future__ import annotations

import re
from collections import Counter

GRAM = 3  # words per n-gram
MIN_WORDS = 12  # shorter replies are too short to call a loop
MIN_REPEATS = 3
MAX_DISTINCT = 0.5  # a loop's tail has at most this share of distinct n-grams (prose has over 0.9)

_WORD = re.compile(r"\w+(?:['\u2019]\w+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])\s+|\n+")


def repeated_phrase(text: str) -> tuple[str, int] | None:
    """The phrase ``text`` keeps repeating and how often, or None if it does not loop.

    A loop is judged on the last two thirds of the words (a reply often starts well and then
    falls into one): few distinct word n-grams there, and one of them at least ``MIN_REPEATS``
    times. The phrase shown is the most repeated sentence if one repeats, else that n-gram."""
    words = _WORD.findall(text.lower())
    if len(words) < MIN_WORDS:
        return None
    tail = words[len(words) // 3:]
    grams = Counter(tuple(tail[i:i + GRAM]) for i in range(len(tail) - GRAM + 1))
    total = sum(grams.values())
    gram, times = grams.most_common(1)[0]
    if times < MIN_REPEATS or len(grams) / total > MAX_DISTINCT:
        return None
    sentences = Counter(s.strip() for s in _SENTENCE_END.split(text) if s.strip())
    sentence, repeats = sentences.most_common(1)[0] if sentences else ("", 0)
    if repeats >= MIN_REPEATS:
        return sentence, repeats
    whole = Counter(tuple(words[i:i + GRAM]) for i in range(len(words) - GRAM + 1))
    gram, times = whole.most_common(1)[0]  # over all the words, so the phrase starts where the loop does
    return " ".join(gram), times


def runaway_warning(text: str, generated: int) -> str | None:
    """The warning for a reply cut at max_tokens (``generated`` tokens) that loops, or None."""
    found = repeated_phrase(text)
    if found is None:
        return None
    phrase, times = found
    shown = phrase if len(phrase) <= 60 else phrase[:57] + "..."
    return (f"the reply repeated itself up to max_tokens ({generated} tokens): \u201c{shown}\u201d {times} times. "
            "Raise repeat_penalty (1.1 to 1.3), lower max_tokens, or say in the system prompt how long to answer.")
