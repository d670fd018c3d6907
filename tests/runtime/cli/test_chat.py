"""``parley chat``: scripts, diagnostics files, history in and out, interactive use, clear errors."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from runtime.cli import build_parser, main
from runtime.cli import chat as chat_cli
from runtime.dialogue.dialog_file import load_history
from runtime.resources import examples_dir


@pytest.fixture()
def chat_asset(tmp_path):
    return str(shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json"))


def test_script_prints_replies_and_writes_diagnostics_and_history(tmp_path, chat_asset, capsys):
    script = tmp_path / "lines.txt"
    script.write_text("Hello Mira\n\nWhat is for supper?\n", encoding="utf-8")
    diagnostics = tmp_path / "turns.jsonl"
    history = tmp_path / "dialog.json"
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", str(script),
                 "--diagnostics", str(diagnostics), "--history-out", str(history)])
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("> Hello Mira\nreply heard:") and "> What is for supper?\n" in out
    turns = [json.loads(line) for line in diagnostics.read_text().splitlines()]
    assert [t["player"] for t in turns] == ["Hello Mira", "What is for supper?"]
    assert turns[1]["nodes"][0]["input"]["prompt"][1]["content"] == "Hello Mira"
    saved = load_history(history)
    assert [t.player for t in saved.history.turns] == ["Hello Mira", "What is for supper?"]

    # Continue from the saved history: diagnostics are appended, the history grows.
    script.write_text("And a room?\n", encoding="utf-8")
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", str(script), "--diagnostics",
                 str(diagnostics), "--history-in", str(history), "--history-out", str(history)])
    assert code == 0
    assert len(diagnostics.read_text().splitlines()) == 3
    assert len(load_history(history).history.turns) == 3
    last = json.loads(diagnostics.read_text().splitlines()[-1])
    assert last["turn"] == 2 and [m["content"] for m in last["nodes"][0]["input"]["prompt"][1:3]] == [
        "Hello Mira", saved.history.turns[0].entries[0].text]


def test_interactive_streams_replies(chat_asset):
    args = build_parser().parse_args(["chat", chat_asset, "--backend", "scripted"])
    out = io.StringIO()
    assert chat_cli.run(args, stdin=io.StringIO("Hello\nBye\n\n"), stdout=out) == 0
    text = out.getvalue()
    assert text.count("you> ") == 3 and "reply heard:" in text


@pytest.mark.parametrize("extra, message", [
    (["--history-in", "MISSING"], "cannot read the file"),
    (["--script", "MISSING"], "cannot read the script"),
])
def test_bad_inputs_are_clear_errors(tmp_path, chat_asset, capsys, extra, message):
    extra = [str(tmp_path / e) if e == "MISSING" else e for e in extra]
    assert main(["chat", chat_asset, "--backend", "scripted", *extra]) == 1
    assert message in capsys.readouterr().err


def test_bad_asset_and_bad_history_name_the_file(tmp_path, chat_asset, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"id": "x", "type": "Nope"}]}')
    assert main(["chat", str(bad), "--backend", "scripted"]) == 1
    assert "bad.json" in capsys.readouterr().err
    history = tmp_path / "h.json"
    history.write_text('{"turns": [{"player": 5}]}')
    assert main(["chat", chat_asset, "--backend", "scripted", "--history-in", str(history)]) == 1
    assert f"{history}:turns.0.player" in capsys.readouterr().err


def test_a_failed_turn_stops_the_script_and_keeps_the_turns_before_it(tmp_path, capsys):
    tool_asset = str(shutil.copy(examples_dir() / "tool_calling.json", tmp_path / "tools.json"))
    script = tmp_path / "lines.txt"
    script.write_text("check_stock of arrows\nprice_of arrows\nnever reached\n")
    history = tmp_path / "h.json"
    code = main(["chat", tool_asset, "--backend", "scripted", "--script", str(script), "--history-out", str(history)])
    assert code == 1
    err = capsys.readouterr().err
    assert "lookup.tools: the model called 'price_of', which has no mock_result" in err
    assert [t.player for t in load_history(history).history.turns] == ["check_stock of arrows"]


def test_make_backend_is_the_one_place_backends_are_made(chat_asset):
    args = build_parser().parse_args(["chat", chat_asset, "--backend", "scripted"])
    from runtime.backends.scripted import ScriptedBackend

    assert isinstance(chat_cli.make_backend(args), ScriptedBackend)


def test_from_turn_rewinds_a_history_and_replays_or_goes_on(tmp_path, capsys):
    """`--from-turn N` goes back to before turn N of --history-in: with --script it says new lines
    from there; without, it replays the history's own lines and says per turn whether the reply changed."""
    from runtime.dialogue.dialog_file import load_history

    asset = tmp_path / "a.json"
    asset.write_text(json.dumps({"name": "a", "default_model": "m.gguf", "start_node": "r",
                                 "nodes": [{"id": "r", "type": "GenerateAndSpeak"}]}), encoding="utf-8")
    script = tmp_path / "s.txt"
    script.write_text("one\ntwo\nthree\n", encoding="utf-8")
    history = tmp_path / "h.json"
    assert main(["chat", str(asset), "--backend", "scripted", "--script", str(script),
                 "--history-out", str(history)]) == 0
    capsys.readouterr()

    replayed = tmp_path / "replayed.json"
    assert main(["chat", str(asset), "--backend", "scripted", "--history-in", str(history), "--from-turn", "2",
                 "--history-out", str(replayed)]) == 0
    out = capsys.readouterr().out
    assert "> two" in out and "> three" in out and "> one" not in out
    assert "[turn 2: reply unchanged]" in out and "[turn 3: reply unchanged]" in out
    saved = load_history(replayed)
    assert [t.player for t in saved.history.turns] == ["one", "two", "three"]
    assert len(saved.tree) == 3, "a replay that comes out the same is the turns already there, not copies of them"

    other = tmp_path / "other.txt"
    other.write_text("something else\n", encoding="utf-8")
    went_on = tmp_path / "went_on.json"
    assert main(["chat", str(asset), "--backend", "scripted", "--history-in", str(history), "--from-turn", "2",
                 "--script", str(other), "--history-out", str(went_on)]) == 0
    assert [t.player for t in load_history(went_on).history.turns] == ["one", "something else"]

    assert main(["chat", str(asset), "--backend", "scripted", "--from-turn", "2"]) == 2
    assert main(["chat", str(asset), "--backend", "scripted", "--history-in", str(history), "--from-turn", "9"]) == 2
    assert "--from-turn 9" in capsys.readouterr().err
