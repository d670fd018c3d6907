"""The names an asset and a history file share: node ids, slot and variable names, variable values;
and what counts as text in them.

The lowest floor of the runtime (it imports nothing of it), so every package can use it.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator

ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
SLOT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
OPTIONAL_SLOT_PATTERN = r"^([A-Za-z_][A-Za-z0-9_]*)?$"

VariableValue = bool | int | float | str


def _only_finite_numbers(value: Any) -> Any:
    """``value`` itself; a ValueError naming the key when a float in it is NaN or infinite: JSON has
    no such numbers, so free-form data holding one could not be saved as it is. (A walk with a
    stack, not recursion: the data may be nested as deeply as a JSON file allows.)"""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where or 'the value'} is {item}, which JSON cannot hold; use a finite number or text")
        if isinstance(item, dict):
            stack += [(v, f"{where}.{k}" if where else str(k)) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            stack += [(v, f"{where}[{i}]") for i, v in enumerate(item)]
    return value


# Free-form data (``metadata``): any JSON, kept as it is, so only what a JSON file can hold.
FreeFormData = Annotated[dict[str, Any], AfterValidator(_only_finite_numbers)]

# A lone surrogate (a JSON "\ud800" escape, or a byte that was not UTF-8 read with
# surrogateescape) is not text: no UTF-8 file, tokenizer or terminal can take it.
SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def without_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, as a UTF-8 decoder treats bytes that
    are not text. Text without one is returned as it is (the common case costs one scan)."""
    if text.isascii():
        return text
    return SURROGATE.sub(REPLACEMENT, text)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, lone surrogates as U+FFFD (never a UnicodeEncodeError)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return without_surrogates(text).encode("utf-8")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_\-]+")


def shown_name(name: object) -> str:
    """A node id, key or field as an error location shows it: plain names as they are, anything
    else (a newline, a NUL, a dot, a lone surrogate, an empty name) quoted and escaped like a
    Python string."""
    text = str(name)
    return text if _PLAIN_NAME.fullmatch(text) else repr(text)
