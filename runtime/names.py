"""The names an asset and a history file share: node ids, slot and variable names, variable values;
and what counts as text in them.

The lowest floor of the runtime (it imports nothing of it), so every package can use it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator

ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
# A behaviour's nodes run inside an asset under ids namespaced by the Subgraph node that runs them
# ("guard/classify"; nested: "guard/inner/x"): the ids a running agent, its history and its
# diagnostics use. Asset files hold plain ids only.
NAMESPACE_SEP = "/"
NODE_PATH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*(/[A-Za-z_][A-Za-z0-9_\-]*)*$"
SLOT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
OPTIONAL_SLOT_PATTERN = r"^([A-Za-z_][A-Za-z0-9_]*)?$"

VariableValue = bool | int | float | str


def owner_of(node_id: str) -> str:
    """The id of the node of the asset itself that a (namespaced) node id belongs to:
    ``"guard/classify" -> "guard"``, ``"reply" -> "reply"`` (how the editor finds the canvas node)."""
    return node_id.split(NAMESPACE_SEP, 1)[0]


def namespaced(namespace: str, node_id: str) -> str:
    """``node_id`` of a behaviour run by the Subgraph node ``namespace``: ``"guard/classify"``."""
    return f"{namespace}{NAMESPACE_SEP}{node_id}"


# How deep free-form data may nest: pydantic writes no deeper (past about 250 levels an asset that
# loaded could not be saved, nor bundled), and no designer's data needs more.
MAX_FREE_FORM_DEPTH = 64


def _keepable_as_json(value: Any) -> Any:
    """``value`` itself; a ValueError naming the key when a float in it is NaN or infinite (JSON has
    no such numbers, so free-form data holding one could not be saved as it is), or when it nests
    deeper than ``MAX_FREE_FORM_DEPTH``. (A walk with a stack, not recursion.)"""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where or 'the value'} is {item}, which JSON cannot hold; use a finite number or text")
        if isinstance(item, (dict, list, tuple)) and depth >= MAX_FREE_FORM_DEPTH:
            raise ValueError(f"{where or 'the value'} nests deeper than {MAX_FREE_FORM_DEPTH} levels, more than an "
                             "asset can be saved with; flatten it")
        if isinstance(item, dict):
            stack += [(v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            stack += [(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item)]
    return value


# Free-form data (``metadata``, a tool call's arguments): any JSON, kept as it is, so only what a JSON
# file can hold and Parley can write back.
FreeFormData = Annotated[dict[str, Any], AfterValidator(_keepable_as_json)]


def free_form_problem(value: Any) -> str:
    """Why ``value`` cannot be kept as free-form data (a number JSON has not, nesting past
    ``MAX_FREE_FORM_DEPTH``), or ''."""
    try:
        _keepable_as_json(value)
    except ValueError as exc:
        return str(exc)
    return ""

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


def json_leaves(data: Any) -> Iterator[tuple[tuple[Any, ...], Any, bool]]:
    """Every scalar in parsed JSON ``data`` and every dict key, in file order, as (path, leaf, is_key):
    a key's path ends with the key, as its value's does; a dict's keys come before what its values
    hold. (A walk with a stack, not recursion: the data may be nested as deeply as a JSON file allows.)"""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            items = list(value.items())
            for key, item in reversed(items):
                stack.append(((*path, key), item))
            for key, _item in items:
                yield (*path, key), key, True
        elif isinstance(value, list):
            stack.extend(((*path, i), item) for i, item in reversed(list(enumerate(value))))
        else:
            yield path, value, False


@dataclass(frozen=True)
class LoneSurrogate:
    """A text in parsed JSON (a value, or a dict key: ``in_key``) holding a lone surrogate, at ``path``."""

    path: tuple[Any, ...]
    in_key: bool
    found: re.Match[str]

    def message(self, key: str = "key") -> str:
        """What is wrong and what to do; a key is called ``key`` (a format may call it a name)."""
        return (f"the {key if self.in_key else 'text'} holds a lone surrogate ({self.found.group()!r} at character "
                f"{self.found.start()}), which is not text and no UTF-8 file can hold; remove that \\u escape or "
                "write the character it was meant to be")


def lone_surrogates(data: Any) -> Iterator[LoneSurrogate]:
    """Every text in parsed JSON ``data`` (value or key) holding a lone surrogate, in file order."""
    try:  # the common case, none, found at C speed
        json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
        return
    except (UnicodeEncodeError, ValueError, RecursionError):
        pass
    for path, leaf, is_key in json_leaves(data):
        if isinstance(leaf, str) and not leaf.isascii():
            found = SURROGATE.search(leaf)
            if found:
                yield LoneSurrogate(path, is_key, found)


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


def free_id(wanted: str, used: set[str], fallback: str = "node") -> str:
    """``wanted`` (or ``fallback`` when it is no valid id) made unique among ``used``: ``reply``,
    ``reply_2``, ... The one rule nodes, comments and pasted or extracted records are named by."""
    base = wanted if re.fullmatch(ID_PATTERN, wanted) else fallback
    if base not in used:
        return base
    stem = base.rstrip("0123456789").rstrip("_") or base
    n = 2
    while f"{stem}_{n}" in used:
        n += 1
    return f"{stem}_{n}"
