"""``parley chat`` with bad flags and bad text: a clear message, the right exit code, no file lost."""

from __future__ import annotations

import io
import json

import pytest

from runtime.cli import build_parser, main
from runtime.cli import chat as chat_cli
from runtime.dialogue.dialog_file import load_history


def test_a_refused_history_in_is_never_overwritten_by_history_out(tmp_path, chat_asset, capsys, script):
    """Defect 1: the import is refused, so the same file given as --history-out must stay as it was."""
    history = tmp_path / "dialog.json"
    original = '{"turns": [{"player": "hi"}], "variables": {"a.b": 1}}\n'  # a bad variable name
    history.write_text(original, encoding="utf-8")
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", script(),
                 "--history-in", str(history), "--history-out", str(history)])
    assert code == 1
    err = capsys.readouterr().err
    assert f"{history}:variables.'a.b'" in err and "not written" in err
    assert history.read_text(encoding="utf-8") == original


def test_a_history_the_agent_refuses_is_not_overwritten_either(tmp_path, chat_asset, capsys, script):
    """The file parses, but the agent refuses it (a system prompt for a node it lacks)."""
    history = tmp_path / "dialog.json"
    original = json.dumps({"turns": [{"player": "hi"}], "system_prompts": {"nobody": "x"}})
    history.write_text(original, encoding="utf-8")
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", script(),
                 "--history-in", str(history), "--history-out", str(history)])
    assert code == 1
    assert "system_prompts.nobody" in capsys.readouterr().err
    assert history.read_text(encoding="utf-8") == original


def test_windows_for_nodes_the_asset_lacks_are_refused(tmp_path, chat_asset, capsys, script):
    history = tmp_path / "dialog.json"
    history.write_text(json.dumps({"turns": [{"player": "hi"}], "windows": {"ghost": 1}}), encoding="utf-8")
    assert main(["chat", chat_asset, "--backend", "scripted", "--script", script(),
                 "--history-in", str(history)]) == 1
    assert f"{history}:windows.ghost: error" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--history-out", "--diagnostics"])
def test_output_into_a_missing_folder_is_refused_before_any_turn(tmp_path, chat_asset, capsys, flag, script):
    """Defect 11: a traceback after the turns ran; now exit 2 before anything runs."""
    target = tmp_path / "no" / "such" / "folder" / "out.json"
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", script(), flag, str(target)])
    assert code == 2
    captured = capsys.readouterr()
    assert f"{flag} {target}: the folder {target.parent} does not exist" in captured.err
    assert captured.out == "", "no turn ran"
    assert not target.parent.exists()


@pytest.mark.parametrize("flag", ["--history-out", "--diagnostics"])
def test_output_onto_a_folder_or_under_a_file_is_refused(tmp_path, chat_asset, capsys, flag, script):
    assert main(["chat", chat_asset, "--backend", "scripted", "--script", script(), flag, str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    a_file = tmp_path / "file.txt"
    a_file.write_text("keep", encoding="utf-8")
    assert main(["chat", chat_asset, "--backend", "scripted", "--script", script(),
                 flag, str(a_file / "out.json")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert a_file.read_text(encoding="utf-8") == "keep"


def test_bad_flags_are_refused_before_the_history_is_read(tmp_path, chat_asset, capsys):
    history = tmp_path / "dialog.json"
    history.write_text("not even json", encoding="utf-8")
    code = main(["chat", chat_asset, "--backend", "scripted", "--history-in", str(history), "--from-turn", "-5",
                 "--history-out", str(history)])
    assert code == 2
    assert "--from-turn -5: turns count from 1" in capsys.readouterr().err
    assert history.read_text(encoding="utf-8") == "not even json"


def test_a_failing_history_write_is_a_message_not_a_traceback(tmp_path, chat_asset, capsys, monkeypatch, script):
    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(chat_cli, "save_history", refuse)
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", script(),
                 "--history-out", str(tmp_path / "h.json")])
    assert code == 1
    assert "cannot save the history: Permission denied" in capsys.readouterr().err


def test_non_utf8_bytes_typed_into_the_interactive_chat(tmp_path, chat_asset):
    """Defect 4: a byte that is not UTF-8 (read with surrogateescape, as a POSIX locale does) failed the
    chat when the reply was echoed and when the history and diagnostics were written."""
    history = tmp_path / "h.json"
    diagnostics = tmp_path / "d.jsonl"
    args = build_parser().parse_args(["chat", chat_asset, "--backend", "scripted", "--history-out", str(history),
                                      "--diagnostics", str(diagnostics), "--instructions", "be \udcff kind"])
    raw = io.BytesIO(b"caf\xe9 please\n\n")
    stdin = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # strict, like a UTF-8 terminal
    assert chat_cli.run(args, stdin=stdin, stdout=stdout) == 0
    saved = load_history(history)
    assert saved.history.turns[0].player == "caf\ufffd please"
    assert "\ufffd" in diagnostics.read_text(encoding="utf-8")


def test_lone_surrogates_from_a_string_stream_are_replaced(tmp_path, chat_asset):
    history = tmp_path / "h.json"
    args = build_parser().parse_args(["chat", chat_asset, "--backend", "scripted", "--history-out", str(history)])
    out = io.StringIO()
    assert chat_cli.run(args, stdin=io.StringIO("a \ud800 b\n\n"), stdout=out) == 0
    assert load_history(history).history.turns[0].player == "a \ufffd b"
    out.getvalue().encode("utf-8")  # nothing unencodable was written


def test_strict_stdin_with_a_bad_byte_reads_it_as_a_replacement(tmp_path, chat_asset):
    history = tmp_path / "h.json"
    args = build_parser().parse_args(["chat", chat_asset, "--backend", "scripted", "--history-out", str(history)])
    stdin = io.TextIOWrapper(io.BytesIO(b"ol\xe9\n\n"), encoding="utf-8")  # strict
    assert chat_cli.run(args, stdin=stdin, stdout=io.StringIO()) == 0
    assert load_history(history).history.turns[0].player == "ol\ufffd"
