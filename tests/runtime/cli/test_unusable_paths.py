"""Paths no file can have (a NUL, characters the file system cannot encode) and file names that are
not UTF-8: every ``parley`` command says so, never a ValueError or UnicodeEncodeError traceback."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from runtime.cli import main
from runtime.resources import examples_dir


@pytest.fixture()
def chat_asset(tmp_path):
    return str(shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json"))


@pytest.mark.parametrize("argv, code, message", [
    (["validate", "a\0b.json"], 1, "'a\\x00b.json': error: not a path: it holds a NUL character"),
    (["estimate", "a\0b.json"], 2, "ASSET 'a\\x00b.json' is not a path: it holds a NUL character"),
    (["chat", "CHAT", "--script", "s\0.txt", "--backend", "scripted"], 2, "--script 's\\x00.txt' is not a path"),
    (["chat", "CHAT", "--history-out", "\ud800.json", "--backend", "scripted"], 2, "it holds '\\ud800'"),
    (["models", "info", "m\0.gguf"], 1, "is not a file name: it holds a NUL character"),
], ids=["validate", "estimate", "chat-script", "chat-history-out", "models-info"])
def test_paths_no_file_can_have(chat_asset, capsys, argv, code, message):
    argv = [chat_asset if a == "CHAT" else a for a in argv]
    assert main(argv) == code
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


def test_models_list_shows_a_file_name_that_is_not_utf8(tmp_path, monkeypatch, capsys):
    """Found by the fuzz harness: a model file named with byte 0xff failed `parley models list` on a UTF-8
    terminal (UnicodeEncodeError)."""
    (tmp_path / os.fsdecode(b"bad\xffname.gguf")).write_bytes(b"GGUF" + b"\0" * 40)
    monkeypatch.setenv("PARLEY_MODELS_DIR", str(tmp_path))
    strict = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    monkeypatch.setattr("sys.stdout", strict)
    assert main(["models", "list"]) == 0
    strict.flush()
    assert "bad\ufffdname.gguf" in strict.buffer.getvalue().decode("utf-8")
