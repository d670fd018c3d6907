"""Sentence splitting for Speak events."""

from __future__ import annotations

from runtime.events import SentenceSplitter


def test_sentences_come_out_as_soon_as_they_end():
    splitter = SentenceSplitter()
    out = []
    for piece in ["Hel", "lo there", ". How", " are you?", " \"Fine!\" she", " said", "..."]:
        out += splitter.feed(piece)
    assert out == ["Hello there.", "How are you?", "\"Fine!\""]
    assert splitter.flush() == ["she said..."]
    assert splitter.flush() == []


def test_numbers_and_text_without_an_end():
    splitter = SentenceSplitter()
    assert splitter.feed("It costs 3.50 silver") == []
    assert splitter.flush() == ["It costs 3.50 silver"]
