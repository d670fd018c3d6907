"""The self-test on the real sample model: at the default settings every replay case passes and the
probes say which settings hold at another thread count (flash attention off does, on does not:
measured on this 2-core machine); a backend that does not repeat itself, or flash attention on at
other thread counts, makes the report fail with what differed."""

from __future__ import annotations

import dataclasses

import pytest

from runtime.backends.base import GenerationRequest, NodeSession
from runtime.backends.llama import LlamaBackend
from runtime.doctor.cases import CASES, regenerate, run_cases, threads
from runtime.doctor.numerics import probe_numerics
from runtime.doctor.self_test import embedded_report

pytestmark = pytest.mark.model


def _settings(report: dict) -> dict[str, dict]:
    return {row["setting"]: row for row in report["settings"]}


def test_the_default_settings_replay_every_case_exactly(doctor_run) -> None:
    code, report, _ = doctor_run
    assert code == 0, report
    assert report["passed"]
    [run] = report["runs"]
    assert run["chosen"] and run["configuration"].startswith("flash attention off, f16 KV cache")
    assert [c["name"] for c in run["cases"]] == [name for name, _ in CASES]
    assert [c["status"] for c in run["cases"]] == ["PASS"] * len(CASES), run["cases"]
    rows = _settings(report)
    assert rows["flash attention off, f16 KV cache"]["chosen"]
    assert report["promise"]["exact"] and report["promise"]["across_threads"]
    assert report["alternative"] == ""


def test_the_probes_say_flash_attention_on_depends_on_the_thread_count_and_off_does_not(doctor_run) -> None:
    _, report, _ = doctor_run
    probes = {(p["flash_attn"], p["kv_type"]): p for p in report["numerics"]}
    off, on = probes[("off", "f16")], probes[("on", "f16")]
    assert off["repeatable"] and off["thread_invariant"] and off["verdict"] == "yes"
    assert on["repeatable"] and not on["thread_invariant"] and on["verdict"] == "same threads"
    assert not on["split_invariant"]  # 24-token chunks give other numbers than one chunk, with it on
    assert "other numbers at 1 than at 2 threads (one query over more than 256 cached cells)" in on["reason"]
    for kv in ("q8_0", "q4_0"):
        refused = probes[("off", kv)]
        assert not refused["allowed"] and refused["verdict"] == "not allowed"
        assert "needs flash attention" in refused["reason"]


def test_a_probe_of_one_setting_reads_the_same_numbers_twice(sample_model) -> None:
    [probe] = probe_numerics(sample_model, [("off", "f16")])
    assert probe.repeatable and probe.thread_invariant and probe.seconds > 0


def test_flash_attention_on_fails_the_thread_case_with_the_turn_and_node_that_differed(sample_model) -> None:
    report = embedded_report(str(sample_model), flash_attn="on", threads=1, probe=[],
                             cases=[c for c in CASES if c[1] in (regenerate, threads)])
    [run] = report.runs
    by_name = {c.name: c for c in run.cases}
    assert by_name[CASES[0][0]].passed  # at one thread count a regenerated turn is still exact
    other = by_name["the same conversation at other thread counts"]
    assert other.passed is False
    assert other.detail.startswith("at 2 threads: turn "), other.detail
    assert "node reply" in other.detail
    assert not report.passed
    [row] = report.settings
    assert row.chosen and row.reproducible == "same threads"
    # only the chosen setting was probed, so no exact one is known to offer
    assert report.alternative == "none of the settings probed gives the same numbers at another thread count"


class _DriftingSession(NodeSession):
    """A node session that samples each call with another seed: it never repeats itself."""

    def __init__(self, inner: NodeSession, backend: _DriftingBackend) -> None:
        super().__init__(inner.key, inner.n_ctx)
        self.inner = inner
        self.backend = backend

    def generate(self, request: GenerationRequest, on_token=None, cancel=None):
        self.backend.drift += 1
        return self.inner.generate(dataclasses.replace(request, seed=request.seed + self.backend.drift),
                                   on_token, cancel)

    def release(self) -> None:
        self.inner.release()


class _DriftingBackend(LlamaBackend):
    drift = 0

    def session(self, key: str, model: str, context_size: int) -> NodeSession:
        return _DriftingSession(super().session(key, model, context_size), self)


def test_a_backend_that_does_not_repeat_itself_fails_the_cases(sample_model) -> None:
    # one thread throughout: reading prompts on 2 threads crawls while other processes hold the cores
    results = run_cases(lambda: _DriftingBackend(n_threads=1, n_threads_batch=1), str(sample_model),
                        cases=[CASES[0]])
    [result] = results
    assert result.passed is False
    assert result.detail.startswith("turn 3, node reply: output differs at character"), result.detail
