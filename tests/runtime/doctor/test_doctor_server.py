"""The self-test on llama.cpp's server with the sample model: with cache_prompt a replayed turn
reads its tokens in other batches and the cases catch a changed reply; without it every request
re-reads its prompt from position 0 and every case passes (measured; marked ``llama_server``)."""

from __future__ import annotations

import pytest

from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.doctor.cases import CASES
from runtime.doctor.self_test import server_report
from tests.servers import llama_server, openai_server


def test_a_llama_server_says_what_a_replay_promises_with_and_without_cache_prompt() -> None:
    cached = LlamaServerBackend("http://127.0.0.1:9").reproducibility()
    assert not cached.exact and not cached.across_threads
    assert "not guaranteed to be bit-for-bit identical" in cached.note and "tools/server/README.md" in cached.note
    whole = LlamaServerBackend("http://127.0.0.1:9", cache_prompt=False).reproducibility()
    assert whole.exact and not whole.across_threads
    assert "from position 0" in whole.note


@pytest.mark.model
@pytest.mark.llama_server
def test_cache_prompt_off_is_the_exact_alternative_on_llama_server(sample_model, tmp_path) -> None:
    with llama_server(sample_model, tmp_path, slots=4) as server:
        report = server_report(lambda: LlamaServerBackend(server.url, "local"))
    cached, whole = report.runs
    assert cached.configuration == "cache_prompt on" and cached.chosen
    assert whole.configuration == "cache_prompt off" and not whole.chosen
    assert whole.passed, [c.to_dict() for c in whole.cases]
    assert [c.status for c in whole.cases][-1] == "SKIP"  # a server's thread count is its own
    assert not cached.passed, "with cache_prompt a replay read its prompt in other batches and still matched"
    assert not report.passed
    rows = {row.setting: row for row in report.settings}
    assert rows["cache_prompt on"].reproducible == "no" and rows["cache_prompt on"].chosen
    assert "measured: " in rows["cache_prompt on"].reason and "cases differed" in rows["cache_prompt on"].reason
    assert rows["cache_prompt off"].reproducible == "same threads"
    assert report.alternative.startswith("cache_prompt off (every call reads its whole prompt again")
    assert not report.promise.exact


def test_an_openai_compatible_server_says_a_replay_is_not_known_and_offers_no_alternative() -> None:
    promise = OpenAIBackend("http://127.0.0.1:9").reproducibility()
    assert not promise.exact and not promise.across_threads
    assert "not known" in promise.note and "no exact alternative" in promise.note


@pytest.mark.model
def test_the_self_test_on_an_openai_compatible_server_reports_what_it_measured(sample_model, tmp_path) -> None:
    with openai_server(sample_model, tmp_path) as server:
        report = server_report(lambda: OpenAIBackend(server.url, "local", context_size=2048), cases=CASES[:2])
    [run] = report.runs
    assert run.chosen and [c.name for c in run.cases] == [name for name, _ in CASES[:2]]
    [row] = report.settings
    assert row.reproducible == "not known" and row.chosen
    assert "measured: " in row.reason
    assert report.alternative.startswith("none to offer")
