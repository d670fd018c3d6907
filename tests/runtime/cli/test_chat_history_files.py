"""``parley chat --history-in/--history-out`` never loses the only copy (issue 20): a history that
could not be read back is not written, a broken tree is a located error, and a file another chat
wrote meanwhile is kept."""

from __future__ import annotations

import io
import json

from runtime.cli import build_parser, main
from runtime.cli import chat as chat_cli
from runtime.dialogue import dialog_file
from runtime.dialogue.dialog_file import load_history


def _script(tmp_path, text="Hello Mira\n"):
    script = tmp_path / "lines.txt"
    script.write_text(text, encoding="utf-8")
    return str(script)


def _first_history(tmp_path, chat_asset):
    history = tmp_path / "dialog.json"
    assert main(["chat", chat_asset, "--backend", "scripted", "--script", _script(tmp_path, "Hi\nAnd you?\n"),
                 "--history-out", str(history)]) == 0
    return history


def test_a_history_too_large_to_read_back_is_not_written_and_the_exit_code_says_so(
        tmp_path, chat_asset, capsys, monkeypatch):
    history = _first_history(tmp_path, chat_asset)
    original = history.read_bytes()
    monkeypatch.setattr(dialog_file, "MAX_HISTORY_BYTES", len(original) + 20)  # one more turn will not fit
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", _script(tmp_path),
                 "--history-in", str(history), "--history-out", str(history)])
    assert code == 1
    err = capsys.readouterr().err
    assert f"{history}: error: not written" in err and "cannot be read back" in err
    assert history.read_bytes() == original, "the only copy is kept"


def test_a_tree_naming_a_summary_past_the_end_is_a_located_error_not_a_traceback(tmp_path, chat_asset, capsys):
    history = _first_history(tmp_path, chat_asset)
    raw = json.loads(history.read_text(encoding="utf-8"))
    raw["start"]["summaries"] = [3]
    history.write_text(json.dumps(raw), encoding="utf-8")
    original = history.read_bytes()
    code = main(["chat", chat_asset, "--backend", "scripted", "--script", _script(tmp_path),
                 "--history-in", str(history), "--history-out", str(history)])
    assert code == 1
    err = capsys.readouterr().err
    assert f"{history}:start.summaries.0: error: names summary 3" in err and "Traceback" not in err
    assert history.read_bytes() == original


class _OtherChatWritesMeanwhile(io.StringIO):
    """Player lines; before the second is read, another process replaces the history file."""

    def __init__(self, text: str, path, other: str) -> None:
        super().__init__(text)
        self.path, self.other, self.lines = path, other, 0

    def readline(self, *args) -> str:
        self.lines += 1
        if self.lines == 2:
            self.path.write_text(self.other, encoding="utf-8")
        return super().readline(*args)


def test_a_history_out_another_chat_wrote_meanwhile_is_kept_and_this_one_saved_beside_it(tmp_path, chat_asset,
                                                                                          capsys):
    history = _first_history(tmp_path, chat_asset)
    theirs = json.dumps({"turns": [{"player": "the other chat's line"}]})
    args = build_parser().parse_args(["chat", chat_asset, "--backend", "scripted", "--history-in", str(history),
                                      "--history-out", str(history)])
    code = chat_cli.run(args, stdin=_OtherChatWritesMeanwhile("One more\nAnd another\n\n", history, theirs),
                        stdout=io.StringIO())
    assert code == 1
    err = capsys.readouterr().err
    assert f"{history}: error: not replaced: the file changed since this conversation read it" in err
    assert history.read_text(encoding="utf-8") == theirs, "the other chat's history is kept"
    beside = tmp_path / "dialog.1.json"
    assert f"saved to {beside} instead" in err
    assert [t.player for t in load_history(beside).history.turns] == ["Hi", "And you?", "One more", "And another"]


def test_a_history_out_nobody_else_wrote_is_replaced(tmp_path, chat_asset):
    history = _first_history(tmp_path, chat_asset)
    assert main(["chat", chat_asset, "--backend", "scripted", "--script", _script(tmp_path),
                 "--history-in", str(history), "--history-out", str(history)]) == 0
    assert [t.player for t in load_history(history).history.turns] == ["Hi", "And you?", "Hello Mira"]
    assert not (tmp_path / "dialog.1.json").exists()
