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


def test_a_long_reply_without_a_full_stop_is_scanned_once(monkeypatch):
    """Each token is searched from where a sentence end may still begin, not from the start of the
    pending text (a reply of n tokens with no full stop cost n²/2 characters of scanning)."""
    from runtime import events

    scanned = []
    real = events._SENTENCE_END

    class Counting:
        def search(self, text, pos=0):
            scanned.append(len(text) - pos)
            return real.search(text, pos)

    monkeypatch.setattr(events, "_SENTENCE_END", Counting())
    splitter = SentenceSplitter()
    tokens = ["word "] * 2000 + ["end.", "\"", " Next"]
    out = [s for t in tokens for s in splitter.feed(t)]
    assert out == ["word " * 1999 + "word end.\""]
    assert sum(scanned) < 10 * len("".join(tokens)), sum(scanned)
    assert splitter.flush() == ["Next"]
