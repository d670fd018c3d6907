"""`parley test`'s reports and terminal output: report targets are checked before the run, a report
that still cannot be written is said with exit code 2 (the results printed are kept), reports are
atomic and say "in progress" until the run ends, and what reaches the terminal is escaped."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from runtime.cli import main
from runtime.suites import report as suite_report
from tests.runtime.suites.router import GOOD, write


@pytest.fixture()
def suite(tmp_path):
    return str(write(tmp_path, GOOD))


@pytest.fixture()
def no_run(monkeypatch):
    """Fails the test if the suites start running."""
    import runtime.suites.run

    def refuse(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(runtime.suites.run, "run_suites", refuse)


@pytest.mark.parametrize(("flag", "target", "says"), [
    ("--junit", "DIR", "it is a folder, not a file"),
    ("--json", "DIR", "it is a folder, not a file"),
    ("--json", "/dev/full", "it is a device, not a file"),
    ("--json", "MISSING/out.json", "its folder does not exist"),
])
def test_a_report_that_cannot_be_written_is_refused_before_the_run(suite, tmp_path, capsys, no_run, flag, target,
                                                                   says) -> None:
    target = target.replace("DIR", str(tmp_path)).replace("MISSING", str(tmp_path / "missing"))
    assert main(["test", suite, "--backend", "scripted", flag, target]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the {'JUnit' if flag == '--junit' else 'JSON'} report {target}: {says}" in err
    assert "Traceback" not in err


def test_a_report_that_fails_after_the_run_is_said_with_exit_2_and_the_results_are_kept(suite, tmp_path, capsys,
                                                                                         monkeypatch) -> None:
    target = tmp_path / "out.json"
    real = suite_report.write_report
    calls = []

    def full_disk_after_the_run(path, text):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(suite_report, "write_report", full_disk_after_the_run)
    assert main(["test", suite, "--backend", "scripted", "--json", str(target)]) == 2
    captured = capsys.readouterr()
    assert "PASS router.suite.yaml::greets" in captured.out and "2 passed, 0 failed" in captured.out
    assert f"cannot write the JSON report {target}: No space left on device" in captured.err
    assert json.loads(target.read_text(encoding="utf-8"))["in_progress"]  # never a success it did not write


def test_a_killed_run_leaves_reports_that_say_it_did_not_finish(suite, tmp_path, monkeypatch) -> None:
    junit, report = tmp_path / "out.xml", tmp_path / "out.json"
    assert main(["test", suite, "--backend", "scripted", "--junit", str(junit), "--json", str(report)]) == 0
    assert json.loads(report.read_text(encoding="utf-8"))["passed"]
    import runtime.suites.run

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as far as the reports go, as good as kill -9 midway

    monkeypatch.setattr(runtime.suites.run, "run_suites", killed)
    assert main(["test", suite, "--backend", "scripted", "--junit", str(junit), "--json", str(report)]) == 130
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["in_progress"] and not data["passed"]
    root = ET.parse(junit).getroot()
    assert root.get("errors") == "1" and "not finished" in root.find("testsuite/testcase/error").get("message")
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary file left


CONTROL = 'name: "greets \\e[31mred\\0\\x07 \\u202e"'


def test_control_characters_never_reach_the_terminal(suite, tmp_path, capsys) -> None:
    failing = write(tmp_path, GOOD.replace("name: greets", CONTROL).replace("max_words: 30", "max_words: 1"))
    assert main(["test", str(failing), "--backend", "scripted"]) == 1
    out = capsys.readouterr().out
    assert "FAIL router.suite.yaml::greets \\x1b[31mred\\x00\\x07 \\u202e [" in out
    assert not any(ch in out for ch in "\x1b\x00\x07\u202e")


def test_an_empty_shard_says_so_and_exits_2(suite, capsys, no_run) -> None:
    from runtime.suites.run import shard_of

    shards = 64
    used = {shard_of(f"router.suite.yaml::{c}", shards) for c in ("greets", "shops")}
    empty = next(i for i in range(shards) if i not in used) + 1
    assert main(["test", suite, "--backend", "scripted", "--shard", f"{empty}/{shards}"]) == 2
    assert f"--shard {empty}/{shards} holds none of the 2 cases" in capsys.readouterr().err


def _jobs_used(monkeypatch) -> list[int]:
    import runtime.suites.run

    used: list[int] = []
    real = runtime.suites.run.run_suites

    def recording(*args, **kwargs):
        used.append(kwargs["jobs"])
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime.suites.run, "run_suites", recording)
    return used


def test_jobs_are_never_more_than_the_cases(suite, capsys, monkeypatch) -> None:
    used = _jobs_used(monkeypatch)
    assert main(["test", suite, "--backend", "scripted", "--jobs", "1000"]) == 0
    assert used == [2] and "--jobs 1000 lowered to 2: 2 cases to run" in capsys.readouterr().err


def test_embedded_jobs_are_as_many_as_the_memory_holds(suite, capsys, monkeypatch) -> None:
    import runtime.cli.test as cli_test
    import runtime.suites.run

    used: list[int] = []
    monkeypatch.setattr(runtime.suites.run, "run_suites", lambda *a, **kw: used.append(kw["jobs"]) or 1 / 0)
    monkeypatch.setattr(cli_test, "_job_memory", lambda loaded: 1000 * 2**20)
    monkeypatch.setattr(cli_test, "_available_memory", lambda: 1500 * 2**20)
    with pytest.raises(ZeroDivisionError):  # stops once the jobs are chosen, before any model loads
        main(["test", suite, "--jobs", "2", "--repeat", "3"])
    assert used == [1]
    assert ("--jobs 2 lowered to 1: each job loads its own copy of the models, about 1,000 MB by the estimate, "
            "and 1,500 MB of memory is available") in capsys.readouterr().err
