"""Servers whose answers are malformed or absurd (issue 20): each answer a remote backend reads is
checked against its schema (runtime.backends.server_answers), so a wrong one fails the turn with a
BackendError naming the server, the endpoint and the field, never a traceback, a hang or gigabytes
of memory; counts that only reach the diagnostics are clamped, with a warning.

The servers are tests/hostile_server.py's: real HTTP servers on 127.0.0.1. Its ``wrong_types``
mode answers one endpoint with ``WRONG_TYPES[at][variant]``; the tests here that need another
answer put it there for the test (``_answer``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import tests.hostile_server as hostile_module
from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends import llama_server as llama_server_module
from runtime.backends.base import ChatMessage, GenerationRequest
from runtime.backends.llama_server import LlamaServerBackend, SlotPool
from runtime.backends.openai_server import OpenAIBackend
from runtime.backends.scripted import ScriptedBackend
from runtime.backends.server_answers import MAX_SLOTS, MAX_TOKEN_BYTES, TOKENIZE_SLACK
from runtime.cli import main as parley
from runtime.problems import BackendError
from tests.hostile_server import WRONG_TYPES, HostileServer, hostile_server
from tests.runtime.backends.test_server_failures import CHAT

LLAMA, OPENAI = "llama-server", "openai"
GENERATION = {LLAMA: "/completion", OPENAI: "/v1/chat/completions"}


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    with hostile_server(max_seconds=10) as server:
        yield server


def _answer(monkeypatch, server: HostileServer, at: str, raw: str) -> None:
    """From now on ``server`` answers ``at`` with ``raw`` (JSON text; a stream: one event of it
    after a first token, then the end)."""
    monkeypatch.setitem(WRONG_TYPES, at, [raw])
    server.reset("wrong_types", at, 0)


def _backend(kind: str, server: HostileServer, **options):
    if kind == LLAMA:
        return LlamaServerBackend(server.url, "gpu-box", timeout=5, **options)
    return OpenAIBackend(server.url, "vllm-box", timeout=5, structured_output="none", **options)


def _turn(backend):
    return Agent(load_asset(CHAT), backend, str(CHAT.parent)).run_turn("Hello there")


def _generate(backend, max_tokens: int = 8, on_token=None):
    request = GenerationRequest([ChatMessage("user", "hi")], max_tokens)
    return backend.session("reply", "", 0).generate(request, on_token=on_token)


def _props(**changes) -> str:
    props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4, "model_path": "/models/fake.gguf"}
    return json.dumps({**props, **changes})


def _final(kind: str, **more) -> str:
    """A generation stream's last event."""
    if kind == LLAMA:
        return json.dumps({"content": "lo", "stop": True, "stop_type": "eos", **more})
    return json.dumps({"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}], **more})


# --- defect 3: slots ------------------------------------------------------------------------------


def test_a_slot_pool_builds_a_slot_only_when_one_is_leased() -> None:
    """Building one object per slot up front made 2**40 slots 3.6 GB; a pool holds the slots leased."""
    pool = SlotPool(1000)
    assert [pool.lease((1, key)) for key in "abc"] == [(0, False), (1, False), (2, False)]
    assert len(pool.slots) == 3
    pool.used(1, (1, "b"))
    pool.release(1, "b")
    assert pool.lease((1, "b")) == (1, False)  # the slot it used last, still free: its cache holds its prompt
    assert len(pool.slots) == 3


def test_a_pool_shares_its_slots_once_all_are_leased() -> None:
    pool = SlotPool(2)
    assert pool.lease((1, "a"))[1] is False and pool.lease((1, "b"))[1] is False
    assert pool.lease((1, "c"))[1] is True
    assert len(pool.slots) == 2


def test_a_server_that_says_it_has_2_to_the_40_slots_runs_a_turn_on_at_most_max_slots(hostile) -> None:
    hostile.reset("wrong_types", "/props", 0)  # total_slots: 1099511627776
    backend = _backend(LLAMA, hostile)
    assert backend.total_slots == MAX_SLOTS
    assert _turn(backend).reply == "Hello"
    assert len(backend.slot_pool().slots) == 1


def test_parley_backends_check_reports_the_slots_it_uses(hostile, capsys) -> None:
    hostile.reset("wrong_types", "/props", 0)
    assert _backend(LLAMA, hostile).total_slots == MAX_SLOTS  # (else the check below builds 2**40 slots)
    assert parley(["backends", "check", "llama+" + hostile.url]) == 0
    assert f"slots: {MAX_SLOTS} " in capsys.readouterr().out


# --- defect 4: tokenize answers and the token caches ----------------------------------------------


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_a_tokenize_answer_with_more_tokens_than_the_text_has_bytes_is_refused(hostile, kind, monkeypatch) -> None:
    text = "Hello there"
    too_many = len(text.encode()) + TOKENIZE_SLACK + 1
    _answer(monkeypatch, hostile, "/tokenize", json.dumps({"tokens": list(range(too_many))}))
    with pytest.raises(BackendError) as caught:
        _backend(kind, hostile).count_tokens("", text)
    assert f"({hostile.url}): /tokenize answered tokens: {too_many} tokens for a text of 11 bytes" in str(caught.value)


def test_a_tokenize_answer_as_long_as_the_text_allows_is_taken(hostile, monkeypatch) -> None:
    text = "Hello there"
    _answer(monkeypatch, hostile, "/tokenize", json.dumps({"tokens": list(range(len(text) + TOKENIZE_SLACK))}))
    assert _backend(LLAMA, hostile).count_tokens("", text) == len(text) + TOKENIZE_SLACK


def test_a_token_count_past_the_bound_is_refused(hostile, monkeypatch) -> None:
    """llama-cpp-python's count (vLLM's /tokenize answers a count the same way)."""
    _answer(monkeypatch, hostile, "/extras/tokenize/count", '{"count": 3000000}')
    with pytest.raises(BackendError, match=r"\(http://127.0.0.1:\d+\): /extras/tokenize/count answered count: "
                                           r"3,000,000 tokens for a text of 2 bytes"):
        _backend(OPENAI, hostile)._count_by("llama-cpp-python", "hi")


def test_the_token_id_cache_holds_a_bounded_number_of_ids_compactly(hostile, monkeypatch) -> None:
    monkeypatch.setattr(llama_server_module, "TOKEN_CACHE_TOKENS", 10)
    backend = _backend(LLAMA, hostile)  # the hostile server's tokenizer: a token a word
    for text in ("a b c d", "e f g h", "i j k l", "m n o p q r s t u v w x"):
        backend.count_tokens("", text)
    held = list(backend._tokens.values())
    assert sum(map(len, held)) <= 10
    assert [list(ids) for ids in held] == [[0, 1, 2, 3], [0, 1, 2, 3]]  # the oldest went; the longest never came
    assert all(ids.itemsize == 4 for ids in held)  # 4 bytes an id, not a list of int objects
    assert backend.tokenize("m n o p q r s t u v w x", special=False) == list(range(12))


def test_the_agent_keeps_whole_counts_only(monkeypatch) -> None:
    """A backend that answers a count with anything else fails there, not in a later turn's budget;
    nothing but an int is kept."""
    backend = ScriptedBackend()
    agent = Agent(load_asset(CHAT), backend, str(CHAT.parent))
    count = agent.token_counter("m")
    assert count("one two three") == 3
    for wrong, words in (([1, 2, 3], "as a list, not a whole number"), (-2, "counted -2 tokens"),
                         (True, "as a bool")):
        monkeypatch.setattr(backend, "count_tokens", lambda model, text, wrong=wrong: wrong)
        with pytest.raises(BackendError, match=words):
            count(f"new text {words}")
    assert list(agent._token_counts.values()) == [3]


# --- defect 7: a reply past max_tokens ------------------------------------------------------------


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_a_server_that_streams_past_max_tokens_is_cut_at_it(kind) -> None:
    with hostile_server("endless_tokens", max_seconds=5) as server:
        heard: list[str] = []
        result = _generate(_backend(kind, server), 8, heard.append)
        assert result.finish_reason == "length" and result.text == "Hel" + "a" * 7
        assert result.generated == 8 and len(heard) == 8
        assert any("past its 8 tokens (max_tokens)" in w for w in result.warnings)
        assert server.disconnected.wait(5)  # the request was closed, not read to the server's end


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_a_reply_with_more_bytes_than_its_tokens_can_carry_is_cut(hostile, kind, monkeypatch) -> None:
    huge = "x" * (8 * MAX_TOKEN_BYTES)
    event = json.dumps({"content": huge, "stop": False}) if kind == LLAMA else \
        json.dumps({"choices": [{"delta": {"content": huge}, "finish_reason": "stop"}]})
    _answer(monkeypatch, hostile, GENERATION[kind], event)
    result = _generate(_backend(kind, hostile), 8)
    assert result.finish_reason == "length" and result.text == "Hel"


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_a_reply_that_ends_at_max_tokens_is_whole(hostile, kind) -> None:
    """The control: the hostile server's correct reply is two tokens, "Hel" and "lo"."""
    result = _generate(_backend(kind, hostile), 2)
    assert result.text == "Hello" and result.warnings == []


# --- defect 8: malformed answers ------------------------------------------------------------------

DEEP = "[" * 500 + "]" * 500  # deep, yet shallow enough for Python's JSON reader (deeper: http.py refuses)

# (endpoint, WRONG_TYPES variant or raw answer, words of the error); the endpoints only the
# llama.cpp backend reads, then those only the OpenAI one reads, then /tokenize, which both read.
MALFORMED = {
    LLAMA: [
        ("/props", 1, "default_generation_settings.n_ctx = Infinity, which should be a whole number"),
        ("/props", 2, "default_generation_settings.n_ctx = Infinity"),
        ("/props", 3, "total_slots = -3, which should be greater than or equal to 1"),
        ("/props", 4, "default_generation_settings.n_ctx = '4096', which should be a whole number"),
        ("/props", _props(total_slots=1e400), "total_slots = Infinity"),
        ("/props", _props(total_slots={"n": 4}), "total_slots = an object of 1 key"),
        ("/props", _props(default_generation_settings=[4096]), "default_generation_settings as a list of 1 item, not"),
        ("/props", _props(default_generation_settings={"n_ctx": 0}), "n_ctx = 0, which should be greater than"),
        ("/props", _props(default_generation_settings={"n_ctx": 2**40}), "n_ctx = 1,099,511,627,776, which should"),
        ("/props", _props(model_path=["a"]), "model_path = a list of 1 item, which should be text"),
        ("/props", "[]", "answered with a list of 0 items, not an object"),
        ("/apply-template", 0, "prompt = 12, which should be text"),
        ("/apply-template", '{"prompt": ' + DEEP + "}", "prompt = a list of 1 item"),
        ("/completion", 0, "content = 5, which should be text"),
        ("/completion", 1, "timings.cache_n = Infinity"),
        ("/completion", 2, "timings.predicted_n = Infinity"),
        ("/completion", '{"content": "x", "stop": "yes"}', "stop = 'yes', which should be a valid boolean"),
        ("/completion", _final(LLAMA, timings={"cache_n": "x"}), "timings.cache_n = 'x'"),
        ("/completion", _final(LLAMA, tokens="many"), "tokens as 'many', not a list"),
        ("/completion", _final(LLAMA, timings="D").replace('"D"', DEEP), "timings as a list of 1 item, not an object"),
    ],
    OPENAI: [
        ("/v1/models", 0, "data.0.id = 5, which should be text"),
        ("/v1/models", 1, "data.0.max_model_len = Infinity"),
        ("/v1/models", 2, "data.0.max_model_len = -1, which should be greater than or equal to 1"),
        ("/v1/models", '{"data": {"id": "fake"}}', "data as an object of 1 key, not a list"),
        ("/v1/models", '{"object": "list"}', "without data"),
        ("/v1/chat/completions", 0, "choices as 'not a list', not a list"),
        ("/v1/chat/completions", 1, "choices.0.delta.content = 7, which should be text"),
        ("/v1/chat/completions", 2, "usage.prompt_tokens = Infinity"),
        ("/v1/chat/completions", _final(OPENAI, usage={"prompt_tokens_details": [1]}),
         "usage.prompt_tokens_details as a list of 1 item, not an object"),
        ("/v1/chat/completions", _final(OPENAI, usage={"completion_tokens": 2.5}),
         "usage.completion_tokens = 2.5, which should be a whole number"),
    ],
    "both": [
        ("/tokenize", 0, "tokens.0 = -1, which should be greater than or equal to 0"),
        ("/tokenize", 1, "tokens as '1 2 3', not a list"),
        ("/tokenize", 2, "tokens.0 = Infinity, which should be a whole number"),
        ("/tokenize", '{"tokens": [' + DEEP + "]}", "tokens.0 = a list of 1 item, which should be a whole number"),
        ("/tokenize", '{"tokens": [2147483648]}', "tokens.0 = 2,147,483,648, which should be less than or equal"),
    ],
}
CASES = [(kind, at, answer, words) for group, cases in MALFORMED.items() for kind in
         ([group] if group != "both" else [LLAMA, OPENAI]) for at, answer, words in cases]


@pytest.mark.parametrize(("kind", "at", "answer", "words"), CASES,
                         ids=[f"{kind}-{at}-{words[:40]}" for kind, at, answer, words in CASES])
def test_a_malformed_answer_fails_the_turn_naming_the_server_the_endpoint_and_the_field(
        hostile, monkeypatch, kind, at, answer, words, tmp_path) -> None:
    if isinstance(answer, str):
        _answer(monkeypatch, hostile, at, answer)
    else:
        hostile.reset("wrong_types", at, answer)
    agent = Agent(load_asset(CHAT), _backend(kind, hostile), str(CHAT.parent))
    with pytest.raises(BackendError) as caught:
        agent.run_turn("Hello there")
    name = "gpu-box" if kind == LLAMA else "vllm-box"
    assert f"{name} ({hostile.url}): {at} answered" in str(caught.value)
    assert words in str(caught.value)
    assert agent.history.turns == []  # the failed turn left nothing


def test_a_llama_cpp_props_read_by_the_openai_backend_is_checked_too(hostile, monkeypatch) -> None:
    correct = hostile_module._Handler._correct

    def no_model_length(handler, path, body):  # so the backend asks /props for the context size
        return {"data": [{"id": "fake"}]} if path == "/v1/models" else correct(handler, path, body)

    monkeypatch.setattr(hostile_module._Handler, "_correct", no_model_length)
    hostile.reset("wrong_types", "/props", 1)
    with pytest.raises(BackendError, match=r"vllm-box .*: /props answered default_generation_settings.n_ctx = Inf"):
        _backend(OPENAI, hostile).model_context_size("")


@pytest.mark.parametrize("variant", [1, 2, 3, 4])
def test_parley_backends_check_says_what_is_wrong_with_props(hostile, variant, capsys) -> None:
    hostile.reset("wrong_types", "/props", variant)
    assert parley(["backends", "check", "llama+" + hostile.url]) == 1
    err = capsys.readouterr().err
    assert f"{hostile.url}): /props answered" in err and "Traceback" not in err


# --- low: counts that reach the diagnostics, and server text in errors ----------------------------


def test_negative_and_absurd_llama_server_counts_are_clamped_and_said(hostile, monkeypatch) -> None:
    _answer(monkeypatch, hostile, "/completion", _final(LLAMA, timings={
        "cache_n": -5, "prompt_n": 10**15, "predicted_n": -1, "prompt_ms": -3.0}))
    result = _generate(_backend(LLAMA, hostile))
    assert result.text == "Hello"
    assert (result.reused, result.evaluated, result.generated) == (0, result.prompt_tokens, 0)
    assert result.prompt_ms == 0.0
    said = "\n".join(result.warnings)
    assert "timings.cache_n = -5, which cannot be" in said and "the diagnostics count 0" in said
    assert "timings.prompt_n = 1,000,000,000,000,000" in said and "timings.predicted_n = -1" in said


def test_negative_and_absurd_openai_usage_is_clamped_and_said(hostile, monkeypatch) -> None:
    _answer(monkeypatch, hostile, "/v1/chat/completions", _final(OPENAI, usage={
        "prompt_tokens": 12, "completion_tokens": 10**12, "prompt_tokens_details": {"cached_tokens": -7}}))
    result = _generate(_backend(OPENAI, hostile))
    assert (result.prompt_tokens, result.reused, result.evaluated, result.generated) == (12, 0, 12, 8)
    said = "\n".join(result.warnings)
    assert "usage.completion_tokens = 1,000,000,000,000" in said and "cached_tokens = -7" in said


def test_a_turn_s_diagnostics_carry_the_clamped_counts_and_say_so(hostile, monkeypatch) -> None:
    _answer(monkeypatch, hostile, "/completion", _final(LLAMA, timings={"cache_n": 10**9, "prompt_n": -2}))
    node = _turn(_backend(LLAMA, hostile)).diagnostics.nodes[0]
    assert 0 <= node.tokens.reused <= node.tokens.prompt
    assert any("timings.cache_n = 1,000,000,000" in w for w in node.warnings)


def test_server_text_in_an_error_has_control_characters_escaped_and_the_api_key_redacted(
        hostile, monkeypatch) -> None:
    _answer(monkeypatch, hostile, "/props", _props(total_slots="\x1b[2J\x1b[31mkey sk-secret-42\r\u202eover"))
    with pytest.raises(BackendError) as caught:
        _backend(LLAMA, hostile, api_key="sk-secret-42").props()
    message = str(caught.value)
    assert "total_slots = " in message and "[redacted]" in message and "sk-secret-42" not in message
    assert not any(ch in message for ch in "\x1b\r\u202e")


def test_a_served_model_name_is_shown_escaped_and_redacted(hostile, monkeypatch) -> None:
    _answer(monkeypatch, hostile, "/props", _props(model_path="/m/\x1b[31mevil sk-secret-42\r.gguf"))
    backend = _backend(LLAMA, hostile, api_key="sk-secret-42")
    shown = backend.label + backend.model_warning("other.gguf")
    assert "evil [redacted]" in shown and "sk-secret-42" not in shown and not any(ch in shown for ch in "\x1b\r")


def test_model_names_an_openai_error_lists_are_escaped_redacted_and_few(hostile, monkeypatch) -> None:
    names = [{"id": f"\x1b[2Jmodel-{i} sk-secret-42"} for i in range(30)]
    _answer(monkeypatch, hostile, "/v1/models", json.dumps({"data": names}))
    with pytest.raises(BackendError, match="serves 30 models") as caught:
        _backend(OPENAI, hostile, api_key="sk-secret-42").served_model()
    message = str(caught.value)
    assert "model-9 [redacted]" in message and "model-10 " not in message and "and 20 more" in message
    assert "sk-secret-42" not in message and "\x1b" not in message
