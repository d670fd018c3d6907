"""Every example asset has a conversation test suite, and each passes on the sample model (so CI
runs them); the judge grades with the sample model and says why."""

from __future__ import annotations

import pytest

from runtime.backends.llama import LlamaBackend
from runtime.resources import examples_dir
from runtime.suites.checks import Judge
from runtime.suites.file import find_suites, load_suite
from runtime.suites.run import run_suites

pytestmark = pytest.mark.model


def test_every_example_has_a_suite_that_passes_on_the_sample_model(sample_model) -> None:
    assets = sorted(examples_dir().glob("*.json"))
    suites = {asset.name: find_suites(asset) for asset in assets}
    assert all(suites.values()), [name for name, found in suites.items() if not found]
    loaded = [load_suite(path) for found in suites.values() for path in found]
    report = run_suites(loaded, LlamaBackend)
    assert report.passed, "\n".join(f"{r.suite}::{r.case}: {f}" for r in report.results for f in r.failures)
    router = next(c for path, c in report.coverage.items() if path.endswith("intent_router.json"))
    assert ("classify", "intent:threaten") in router.never_taken, "coverage shows what the suite never reached"


def test_the_judge_on_the_sample_model_answers_pass_or_fail_with_a_reason(sample_model) -> None:
    backend = LlamaBackend()
    try:
        judge = Judge(backend, str(sample_model))
        check = judge.grade("The reply greets the player.", "Hello!", "Good evening, traveller, welcome!")
    finally:
        backend.close()
    assert check.kind == "judge"
    verdict = check.message.split(": ")[1]
    assert verdict in ("pass", "fail") and len(check.message.split(": ", 2)[2]) > 3
