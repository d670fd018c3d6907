"""runtime.files.reading: every input file is looked at before it is read."""

import os

import pytest

from runtime.dialogue.dialog_file import HistoryError, load_history
from runtime.files.reading import read_input_text
from runtime.problems import InputError


def test_every_input_file_is_checked_before_it_is_read(tmp_path):
    fifo = tmp_path / "history.json"
    os.mkfifo(fifo)
    with pytest.raises(HistoryError, match="pipe"):
        load_history(fifo)  # opening a FIFO blocked for ever
    with pytest.raises(HistoryError, match="folder"):
        load_history(tmp_path)
    big = tmp_path / "big.txt"
    big.write_text("x" * 2000)
    with pytest.raises(InputError, match="at most"):
        read_input_text(big, InputError, max_bytes=1000)
    assert read_input_text(big, InputError, max_bytes=2000) == "x" * 2000
