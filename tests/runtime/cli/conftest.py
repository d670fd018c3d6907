"""What the tests of ``parley chat`` share: a copy of the chat example, and a script of lines."""

from __future__ import annotations

import shutil

import pytest

from runtime.resources import examples_dir


@pytest.fixture()
def chat_asset(tmp_path):
    return str(shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json"))


@pytest.fixture()
def script(tmp_path):
    """Writes player lines to a file and returns its path."""

    def write(text: str = "Hello Mira\n") -> str:
        path = tmp_path / "lines.txt"
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write
