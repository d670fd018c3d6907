"""Issue 23: a node's min-p and repeat penalty reach both server kinds, each in the names it reads,
against the recording server of test_session_affinity.py (llama.cpp's real server is not needed:
what matters is the request body)."""

# ruff: noqa: F811  (the tests take the imported recording fixture by name)
from __future__ import annotations

import pytest

from runtime.backends.base import REPEAT_LAST_N, GenerationRequest
from tests.runtime.backends.test_session_affinity import (  # noqa: F401  (recording is a fixture)
    LLAMA,
    MESSAGES,
    OPENAI,
    _backend,
    recording,
)


def _body(recording, kind: str, **sampling) -> dict:
    backend = _backend(kind, recording.url)
    try:
        backend.session("reply", "", 0).generate(GenerationRequest(list(MESSAGES), 8, **sampling))
    finally:
        backend.close()
    (seen,) = recording.generation_requests()
    return seen.body


def test_llama_server_gets_the_nodes_min_p_and_repeat_penalty_and_runs_the_penalty_first(recording):
    body = _body(recording, LLAMA, min_p=0.1, repeat_penalty=1.2)
    assert (body["min_p"], body["repeat_penalty"], body["repeat_last_n"]) == (pytest.approx(0.1), 1.2, REPEAT_LAST_N)
    assert body["samplers"][0] == "penalties"  # as the embedded chain: greedy replies are penalized too


def test_an_openai_server_gets_vllms_and_llama_cpps_names_for_them(recording):
    body = _body(recording, OPENAI, min_p=0.1, repeat_penalty=1.2)
    assert (body["min_p"], body["repetition_penalty"], body["repeat_penalty"]) == (pytest.approx(0.1), 1.2, 1.2)
    assert "frequency_penalty" not in body and "presence_penalty" not in body  # OpenAI's are additive, not these


def test_an_openai_server_is_sent_neither_when_the_node_turns_them_off(recording):
    # OpenAI's own API refuses parameters it does not know: a node with both off sends only its own.
    body = _body(recording, OPENAI, min_p=0.0, repeat_penalty=1.0)
    assert not {"min_p", "repetition_penalty", "repeat_penalty"} & set(body)
