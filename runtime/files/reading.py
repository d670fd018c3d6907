"""Reading a user's input file: only a regular file, at most ``MAX_INPUT_BYTES``, as UTF-8 text;
anything else is an ``InputError`` naming the file (and, for JSON, the line and column)."""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from runtime.problems import InputError, Problem

# Far above any authored input (a 50 MB system prompt still fits), far below what takes the
# machine's memory: /dev/zero or a log file opened by mistake is refused before it is read.
MAX_INPUT_BYTES = 64 * 1024 * 1024


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def input_file_problem(path: str | os.PathLike[str], max_bytes: int = MAX_INPUT_BYTES) -> str:
    """Why a file must not be read, or "": a folder, device, pipe or socket (which could be read
    forever, or block) or a file over ``max_bytes``. A file that cannot be looked at says why when read."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return ""
    if not stat.S_ISREG(info.st_mode):
        return f"not a file but {file_kind(info.st_mode)}"
    if info.st_size > max_bytes:
        return f"the file is {info.st_size / 2**20:,.1f} MB; at most {max_bytes / 2**20:,.0f} MB is read"
    return ""


def read_input_text(path: str | os.PathLike[str], error: type[InputError], max_bytes: int = MAX_INPUT_BYTES) -> str:
    """A user's input file as text, or ``error`` naming the file and what is wrong with it: every
    file the program reads comes through here (or ``input_file_problem``), so a device, a pipe or a
    file over ``max_bytes`` is refused unread."""
    refused = input_file_problem(path, max_bytes)
    if refused:
        raise error([Problem("error", refused, str(path))])
    try:
        with open(path, "rb") as file:
            data = file.read(max_bytes + 1)  # a file that grew since it was looked at
    except (OSError, ValueError) as exc:
        message = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise error([Problem("error", f"cannot read the file: {message}", str(path))]) from None
    if len(data) > max_bytes:
        raise error([Problem("error", f"the file is over {max_bytes / 2**20:,.0f} MB; it is not read", str(path))])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error([Problem("error", f"not UTF-8 text (byte {exc.start})", str(path))]) from None


def parse_input_json(text: str, source: str, error: type[InputError]) -> Any:
    """JSON text parsed, or ``error`` naming the line and column where it breaks."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error([Problem("error", f"malformed JSON: {exc.msg}", source, line=exc.lineno, column=exc.colno)]) from None
    except RecursionError:
        raise error([Problem("error", "malformed JSON: nested too deeply", source)]) from None
