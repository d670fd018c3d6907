"""Running suites on the test backend: a failing case never stops the others, and shards split the
cases stably and completely."""

from __future__ import annotations

import json

from runtime.suites.file import load_suite
from runtime.suites.run import run_suites, shard_of
from tests.runtime.suites.router import ASSET, GOOD, scripted, write


def test_a_failing_case_never_stops_the_others(tmp_path) -> None:
    asset = json.loads(json.dumps(ASSET))
    asset["nodes"][1]["template"] = "{{#broken}"  # every turn through 'hello' fails
    suite = GOOD + """\
  - name: never reaches hello
    turns:
      - say: "shop"
        expect: {visits: [classify]}
"""
    report = run_suites([load_suite(write(tmp_path, suite, asset))], scripted)
    assert [r.passed for r in report.results] == [False, False, False]
    assert "the turn failed" in report.results[0].failures[0]
    assert len(report.results) == 3, "every case ran"


def test_shards_split_the_cases_stably_and_completely(tmp_path) -> None:
    loaded = load_suite(write(tmp_path, GOOD))
    ids = [loaded.case_id(c) for c in loaded.suite.cases]
    parts = [run_suites([loaded], scripted, shard=(i, 3)).results for i in range(3)]
    names = sorted(r.case for part in parts for r in part)
    assert names == sorted(c.name for c in loaded.suite.cases)
    assert [shard_of(i, 3) for i in ids] == [shard_of(i, 3) for i in ids]
