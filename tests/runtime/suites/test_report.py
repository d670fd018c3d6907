"""Reports: repeats give pass rates and find flaky cases, and `parley test`'s exit codes, JUnit and
JSON reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.cli import main
from runtime.suites.file import load_suite
from runtime.suites.run import run_suites
from tests.runtime.suites.router import GOOD, write


def test_repeats_give_pass_rates_and_find_flaky_cases(tmp_path) -> None:
    loaded = load_suite(write(tmp_path, GOOD))
    calls = {"n": 0}

    def flaky_backend():
        def reply(key, request):
            calls["n"] += 1
            if request.json_schema is None and not request.choices and request.seed % 2:
                return "zebra heard greet please"  # an odd seed breaks not_contains
            return default_reply(key, request)

        return ScriptedBackend(reply)

    report = run_suites([loaded], flaky_backend, repeat=4)
    rates = report.pass_rates()
    assert rates["router.suite.yaml::greets"] == (2, 4)
    assert report.flaky() == ["router.suite.yaml::greets"]


def test_parley_test_exit_codes_and_reports(tmp_path, capsys) -> None:
    suite = write(tmp_path, GOOD)
    junit, report = tmp_path / "out.xml", tmp_path / "out.json"
    assert main(["test", str(suite), "--backend", "scripted", "--junit", str(junit), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "PASS router.suite.yaml::greets" in out and "2 passed, 0 failed" in out
    tree = ET.parse(junit).getroot()
    assert tree.get("tests") == "2" and tree.get("failures") == "0"
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["passed"] and data["coverage"][str(tmp_path / "router.json")]["never_taken"] == ["classify.fallback_exit"]

    failing = tmp_path / "failing.suite.yaml"
    failing.write_text(GOOD.replace("max_words: 30", "max_words: 1"), encoding="utf-8")
    assert main(["test", str(failing), "--backend", "scripted", "--junit", str(junit)]) == 1
    assert ET.parse(junit).getroot().get("failures") == "1"
    assert "FAIL router.suite.yaml::greets" not in capsys.readouterr().out  # the file's own name is used
    assert main(["test", str(tmp_path / "missing.suite.yaml"), "--backend", "scripted"]) == 2
    assert main(["test", str(suite), "--backend", "scripted", "--shard", "4/3"]) == 2
    assert main(["test", str(suite), "--backend", "scripted", "--min-coverage", "101"]) == 2

    partial = tmp_path / "partial.suite.yaml"
    partial.write_text(GOOD.split("  - name: shops")[0], encoding="utf-8")
    assert main(["test", str(partial), "--backend", "scripted", "--min-coverage", "90"]) == 1
    assert "never taken: classify.intent:shop" in capsys.readouterr().out


def test_junit_is_well_formed_whatever_a_case_name_or_a_server_says(tmp_path) -> None:
    from runtime.problems import BackendError
    from runtime.suites.report import report_junit

    name = 'greets \\e[31m\\0\\x07 <&\\"\\uffff'  # YAML escapes: ESC, NUL, BEL, a quote, U+FFFF
    loaded = load_suite(write(tmp_path, GOOD.replace("name: greets", f'name: "{name}"')))
    assert "\x1b" in loaded.suite.cases[0].name and "\uffff" in loaded.suite.cases[0].name

    def broken_server():
        def reply(key, request):
            raise BackendError("server said \x1b[2J\x00\x0c<oops> \udfff")

        return ScriptedBackend(reply)

    report = run_suites([loaded], broken_server)
    assert not report.passed
    root = ET.fromstring(report_junit(report).encode("utf-8"))  # parses back: well-formed XML 1.0
    cases = root.findall("testsuite/testcase")
    assert cases[0].get("name") == 'greets \\x1b[31m\\x00\\x07 <&"\\uffff'
    failure = cases[0].find("failure")
    assert "server said \\x1b[2J\\x00\\x0c<oops> \\udfff" in failure.text
    assert "server said" in failure.get("message")


def test_repeated_runs_keep_only_what_the_report_needs(tmp_path) -> None:
    from runtime.suites.report import report_json

    loaded = load_suite(write(tmp_path, GOOD))
    seen = []
    report = run_suites([loaded], ScriptedBackend, repeat=3, keep_turn_results=False,
                        on_turn=lambda case, outcome: seen.append(outcome.result))
    assert report.passed and len(report.results) == 6
    assert all(r is not None for r in seen)  # on_turn still gets the whole turn
    assert all(t.result is None for r in report.results for t in r.turns)
    assert report_json(report)["cases"][0]["turns"][0]["reply"]
    kept = run_suites([loaded], ScriptedBackend)
    assert all(t.result is not None for r in kept.results for t in r.turns)  # the editor's Turn Inspector needs them
