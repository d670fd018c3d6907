"""The deterministic backend keeps its promises: exact counts, real prefix reuse, constraints, streaming, cancel."""

from __future__ import annotations

import json
import threading

import pytest

from runtime.backends.base import ChatMessage, GenerationRequest
from runtime.backends.scripted import ScriptedBackend, render_tokens
from runtime.problems import BackendError


def request(*messages, **kw):
    return GenerationRequest([ChatMessage(r, c) for r, c in messages], kw.pop("max_tokens", 50), **kw)


def test_counts_and_rendering():
    b = ScriptedBackend()
    assert b.count_tokens("m", "  a b\nc ") == 3
    assert len(render_tokens([ChatMessage("system", "a b"), ChatMessage("user", "c")])) == (2 + 8) + (1 + 8)
    assert b.model_context_size("m") == 4096


def test_longest_common_prefix_is_reused_per_node():
    b = ScriptedBackend(lambda k, r: "fine thanks")
    s = b.session("npc", "m", 512)
    first = s.generate(request(("system", "be nice"), ("user", "hello")))
    assert first.cold and first.reused == 0 and first.evaluated == first.prompt_tokens == 19
    second = s.generate(request(("system", "be nice"), ("user", "hello"), ("assistant", "fine thanks"), ("user", "bye")))
    assert not second.cold and second.reused == 19 and second.evaluated == second.prompt_tokens - 19
    same = s.generate(request(("system", "be nice"), ("user", "hello"), ("assistant", "fine thanks"), ("user", "bye")))
    assert same.reused == same.prompt_tokens - 1 and same.evaluated == 1  # one token read for the logits
    # Another node has its own cache.
    other = b.session("other", "m", 512).generate(request(("system", "be nice"), ("user", "hello")))
    assert other.cold and other.reused == 0
    s.release()
    assert s.generate(request(("system", "be nice"))).cold


def test_constraints_streaming_and_length():
    b = ScriptedBackend()
    s = b.session("c", "m", 0)
    assert s.n_ctx == 4096
    assert s.generate(request(("user", "I want to trade"), choices=["greet", "trade", "leave"])).text == "trade"
    assert s.generate(request(("user", "nothing"), choices=["greet", "leave"])).text == "leave"
    schema = {"type": "object", "properties": {"mood": {"enum": ["calm", "angry"]}, "n": {"type": "integer"}}}
    assert json.loads(s.generate(request(("user", "so angry"), json_schema=schema)).text) == {"mood": "angry", "n": 2}
    pieces = []
    result = ScriptedBackend(lambda k, r: "a b c d e").session("x", "m", 64).generate(
        request(("user", "go"), max_tokens=3), on_token=pieces.append)
    assert pieces == ["a", " b", " c"] and result.text == "a b c" and result.finish_reason == "length"
    with pytest.raises(BackendError, match="not one of the choices"):
        ScriptedBackend(lambda k, r: "maybe").session("x", "m", 64).generate(request(("user", "go"), choices=["yes"]))


def test_cancel_and_prompt_too_long():
    cancel = threading.Event()
    s = ScriptedBackend(lambda k, r: "one two three four").session("x", "m", 64)
    seen = []

    def on_token(text):
        seen.append(text)
        if len(seen) == 2:
            cancel.set()

    result = s.generate(request(("user", "go")), on_token=on_token, cancel=cancel)
    assert result.cancelled and result.finish_reason == "cancelled" and result.text == "one two"
    with pytest.raises(BackendError, match="does not fit its context of 64"):
        s.generate(request(("user", "w " * 60)))


def test_embeddings_are_deterministic_bag_of_words():
    b = ScriptedBackend()
    a, c, d = b.embed("e", ["the old mill", "the old mill", "a red fox"])
    assert a == c and a != d and len(a) == 64


def test_the_scripted_backend_remembers_only_its_latest_requests() -> None:
    """Issue 39: `parley serve --backend scripted` kept every request it was ever sent (``calls``), and
    grew with every turn; bench/bench_serve_soak.py measures the server's memory over 10,000 cycles."""
    from runtime.backends.scripted import CALLS_KEPT

    backend = ScriptedBackend()
    session = backend.session("reply", "m.gguf", 512)
    for i in range(CALLS_KEPT + 5):
        session.generate(GenerationRequest([ChatMessage("user", f"line {i}")], max_tokens=4))
    assert len(backend.calls) == CALLS_KEPT
    assert backend.calls[0][1].messages[0].content == "line 5" and backend.calls[-1][1].messages[0].content.endswith(
        str(CALLS_KEPT + 4))
