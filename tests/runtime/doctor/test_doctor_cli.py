"""``parley doctor``: the table it prints, its exit codes, and flags refused by name before anything runs."""

from __future__ import annotations

import contextlib
import io

import pytest

from runtime.backends.base import Reproducibility
from runtime.cli import main as parley
from runtime.cli.doctor import report_text
from runtime.doctor.cases import ReplayCaseResult
from runtime.doctor.self_test import CaseSet, SelfTestReport, SettingRow


def _parley(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = parley(["doctor", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("args", "message"), [
    (["--kv-type", "q8_0", "--flash-attn", "off"],
     "--kv-type q8_0 with --flash-attn off: a q8_0 KV cache needs flash attention"),
    (["--threads", "0"], "--threads 0: give a number of threads from 1 to 1024"),
    (["--cache-prompt", "off"], "--cache-prompt is a llama.cpp server's option: give --server too"),
    (["--server", "http://127.0.0.1:9", "--threads", "2", "--kv-type", "q4_0"],
     "--threads, --kv-type: a server's settings and model are its own"),
    (["--server", "embedded"], "--server embedded: give a server's address or a backend profile's name"),
])
def test_bad_flags_are_refused_by_name_with_exit_2(args, message) -> None:
    code, out, err = _parley(*args)
    assert code == 2 and out == ""
    assert f"parley doctor: error: {message}" in err


def test_a_model_that_cannot_be_found_is_named(tmp_path) -> None:
    code, out, err = _parley("--model", str(tmp_path / "nowhere.gguf"))
    assert code == 2 and out == ""
    assert "nowhere.gguf" in err and "not found" in err


def test_an_asset_without_a_model_says_to_give_one(tmp_path) -> None:
    asset = tmp_path / "agent.json"
    asset.write_text('{"version": 1, "name": "empty", "nodes": []}', encoding="utf-8")
    code, _, err = _parley(str(asset))
    assert code == 2
    assert f"{asset}: the asset names no model (Default Model); give --model" in err


def test_a_server_that_does_not_answer_is_named() -> None:
    code, out, err = _parley("--server", "llama+http://127.0.0.1:9")
    assert code == 2 and out == ""
    assert "127.0.0.1:9" in err


def test_the_table_marks_the_chosen_setting_and_says_each_case_and_the_result() -> None:
    rows = [SettingRow("flash attention off, f16 KV cache", "yes", "the same numbers at 1 and 2 threads", True),
            SettingRow("flash attention on, f16 KV cache", "same threads", "other numbers at 1 than at 2 threads")]
    cases = [ReplayCaseResult("regenerate the last turn with the same seed", True, "", 1.25),
             ReplayCaseResult("the same conversation at other thread counts", False, "at 2 threads: turn 1 differs", 2.0),
             ReplayCaseResult("a server thing", None, "not for this backend", 0.0)]
    report = SelfTestReport("embedded", "model.gguf", Reproducibility(True, True, "exact"), rows,
                    [CaseSet("flash attention off, 1 thread", True, cases, 3.25)], "flash attention off", 5.0)
    text = report_text(report)
    lines = text.splitlines()
    assert lines[0] == "Reproducibility self-test: embedded"
    assert any(line.startswith("* flash attention off, f16 KV cache") and " yes " in line for line in lines)
    assert any(line.startswith("  flash attention on, f16 KV cache") and "at one thread count" in line
               for line in lines)
    assert "Replay cases on flash attention off, 1 thread (chosen), 3.2 s:" in lines
    assert "  PASS  regenerate the last turn with the same seed" in text
    assert any(line.startswith("  FAIL  the same conversation at other thread counts") and
               line.endswith("at 2 threads: turn 1 differs") for line in lines)
    assert "  SKIP  a server thing" in text
    assert "Exact alternative: flash attention off." in lines
    assert lines[-1] == "Result: the chosen settings are NOT reproducible (1 of 2 cases passed) in 5.0 s"
    assert not report.passed


@pytest.mark.model
def test_parley_doctor_prints_the_table_and_exits_0_on_the_default_settings(doctor_run) -> None:
    code, report, err = doctor_run
    assert code == 0
    assert "doctor: probing the numbers of 6 settings" in err
    # a case's line while the run goes is no verdict: PASS is said only in the table, once all have run
    assert "doctor: checked regenerate the last turn with the same seed: the same" in err and "PASS" not in err
    assert report["seconds"] > 0 and report["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
