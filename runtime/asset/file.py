"""The workflow asset file format: JSON in, ``Asset`` out, and back, deterministically.

Saving writes keys in one stable order and every field explicitly, so that load
then save gives a byte-identical file and assets diff cleanly in git. Saving is
atomic: a temporary file beside the target, then a rename, so a crash never
leaves half an asset behind; a symlink stays a link and the file keeps its mode.

Reading refuses what the model alone would let through or choke on, naming the node and
field: lone surrogates (not text), numbers too long to convert, true/false or a string
in a number field, and NaN or infinity. Only regular files up to ``MAX_ASSET_BYTES`` are
read, so a device or a pipe named by mistake is refused instead of read forever.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
import re
import stat
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from runtime.asset.model import ASSET_VERSION, Asset, Comment, FieldError
from runtime.files.located import (
    MISSING_FIELD,
    UNKNOWN_KEY,
    Place,
    Wording,
    error_message,
    located_problems,
    validator_says,
)
from runtime.files.reading import MAX_INPUT_BYTES, file_kind, parse_input_json, read_input_text
from runtime.files.writing import atomic_write_text, remove_stale_temp_files
from runtime.names import REPLACEMENT, json_leaves, lone_surrogates, shown_name, without_surrogates
from runtime.nodes import NODE_TYPES, node_model
from runtime.problems import AssetError, Problem

# Keys first in this order; any other key keeps the model's order after them.
_NODE_KEY_ORDER = (
    "id", "type", "title", "bypassed", "model_name", "context_size", "max_tokens", "max_summary_tokens",
    "system_prompt", "input", "template", "placement", "history_role", "history_mode", "history_window",
    "temperature", "top_p", "min_p", "repeat_penalty", "seed",
)
_TRAILING_NODE_KEYS = ("default_exit", "fallback_exit", "position", "metadata")
_ASSET_KEY_ORDER = ("version", "name", "default_model", "start_node", "variables", "enable_diagnostics")
_TRAILING_ASSET_KEYS = ("metadata", "nodes", "comments")
_COMMENT_KEY_ORDER = ("id", "kind", "title", "text", "color", "position", "size", "metadata")

# version -> function that takes a raw dict of that version and returns the next version's dict.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def migration(from_version: int) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Callable]:
    def register(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        MIGRATIONS[from_version] = fn
        return fn

    return register


@migration(0)
def _from_unversioned(raw: dict[str, Any]) -> dict[str, Any]:
    """Drafts written before the version field: agent settings sat under "agent" and
    positions were {"x", "y"} objects."""
    out = dict(raw)
    agent = out.pop("agent", None)
    if isinstance(agent, dict):
        for key, value in agent.items():
            out.setdefault(key, value)
    for node in out.get("nodes", []) if isinstance(out.get("nodes"), list) else []:
        pos = node.get("position") if isinstance(node, dict) else None
        if isinstance(pos, dict):
            node["position"] = [pos.get("x", 0.0), pos.get("y", 0.0)]
    out["version"] = 1
    return out


@migration(1)
def _to_comments(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added comments (backdrops and notes) and bypassed nodes, both absent from a
    version 1 file: nothing changes but the version."""
    return {**raw, "version": 2}


def migrate(raw: dict[str, Any], source: str = "<asset>") -> dict[str, Any]:
    version = raw.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise AssetError([Problem("error", "version must be a whole number", source, field="version")])
    if version > ASSET_VERSION:
        raise AssetError([Problem(
            "error",
            f"this asset is version {_short(version)}; this Parley Studio reads up to version {ASSET_VERSION}. "
            "Update Parley Studio.",
            source, field="version",
        )])
    while version < ASSET_VERSION:
        if version not in MIGRATIONS:
            raise AssetError([Problem("error", f"no migration from version {_short(version)}", source, field="version")])
        raw = MIGRATIONS[version](raw)
        version = raw["version"]
    return raw


def parse_asset(text: str, source: str = "<asset>") -> Asset:
    """Parse and check an asset's JSON text. Raises ``AssetError`` naming every problem: lone
    surrogates (a ``\\ud800`` escape) are refused here, where the text comes from a file."""
    raw = parse_asset_json(text, source)
    found = _surrogate_problems(raw, source)
    try:
        asset = asset_from_dict(raw, source)  # too-long integers are markers already
    except AssetError as exc:
        raise AssetError(found + exc.problems) from None
    if found:
        raise AssetError(found)
    return asset


def asset_from_dict(raw: Any, source: str = "<asset>") -> Asset:
    """``raw`` (an asset's parsed JSON, or data kept in memory such as a recovery file's) as an
    ``Asset``, or ``AssetError`` naming every problem. Text is taken as it is, lone surrogates
    included (``parse_asset`` refuses those in files)."""
    if not isinstance(raw, dict):
        raise AssetError([Problem("error", f"an asset is a JSON object, not {type(raw).__name__}", source)])
    raw = migrate(dict(raw), source)
    if _holds_too_long_int(raw):
        raw = copy.deepcopy(raw)
        _mark_too_long(raw)
    refused = value_problems(raw, source)
    if refused:
        # The rest is checked without the refused values, so that a `true` taken as 1 does not
        # also report what 1 would break.
        raw = copy.deepcopy(raw)
        _remove_refused(raw)
    try:
        asset = Asset.model_validate(raw)
    except ValidationError as exc:
        raise AssetError(refused + problems_from_validation(exc, raw, source)) from None
    if refused:
        raise AssetError(refused)
    return asset


def load_asset(path: str | os.PathLike[str]) -> Asset:
    return parse_asset(read_asset_text(path), str(path))


# --- reading a file ----------------------------------------------------------------------------

MAX_ASSET_BYTES = MAX_INPUT_BYTES


def read_asset_text(path: str | os.PathLike[str]) -> str:
    """An asset file's text, or ``AssetError`` naming the file: a folder, device, pipe or socket
    (which could be read forever, or block) and files over ``MAX_ASSET_BYTES`` are refused unread."""
    source = str(path)
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        info = None  # read_input_text says why it cannot be read
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise AssetError([Problem(
            "error", f"not a file but {_file_kind(info.st_mode)}: an asset is a .json file", source)])
    if info is not None and info.st_size > MAX_ASSET_BYTES:
        raise AssetError([Problem(
            "error",
            f"the file is {info.st_size / 2**20:,.0f} MB; an asset is at most {MAX_ASSET_BYTES // 2**20} MB. "
            "Is it the asset you meant to open? Move long texts (knowledge) into a Retrieve node's source_file.",
            source,
        )])
    return read_input_text(path, AssetError, MAX_ASSET_BYTES)


_file_kind = file_kind


class _TooLong:
    """An integer in the JSON with more digits than Python converts (``sys.get_int_max_str_digits``):
    kept as this marker so the error can name the node and field that hold it."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    @classmethod
    def of(cls, value: int) -> _TooLong:
        return cls(int(abs(value).bit_length() * math.log10(2)) + 1)  # its digits, give or take one

    def __repr__(self) -> str:
        return f"a number of {self.digits:,} digits"

    __str__ = __repr__


def _read_int(text: str) -> int | _TooLong:
    try:
        return int(text)
    except ValueError:
        return _TooLong(len(text.lstrip("-")))


def parse_asset_json(text: str, source: str) -> Any:
    """An asset's JSON text parsed, or ``AssetError`` naming the line and column where it breaks.
    An integer too long to convert is kept as a marker the value checks report by node and field."""
    try:
        return parse_input_json(text, source, AssetError)
    except ValueError:  # not a JSONDecodeError (parse_input_json reports those): an integer too long
        pass
    try:
        return json.loads(text, parse_int=_read_int)
    except json.JSONDecodeError as exc:
        raise AssetError([Problem("error", f"malformed JSON: {exc.msg}", source, line=exc.lineno, column=exc.colno)]) from None
    except RecursionError:
        raise AssetError([Problem("error", "malformed JSON: nested too deeply", source)]) from None


# --- values the model would take but must not ---------------------------------------------------

# Python converts integers of up to 4,300 digits to text (and back); about this many bits.
_MAX_INT_BITS = 14_000


def _holds_too_long_int(raw: Any) -> bool:
    """Whether an int too long to convert to text is anywhere in ``raw`` (found at C speed)."""
    try:
        json.dumps(raw, default=str)
    except ValueError:
        return True
    except RecursionError:
        return False  # nested too deeply to write: the model refuses it as it is
    return False


def _mark_too_long(raw: Any) -> None:
    """Replace every int too long to convert in ``raw`` by a ``_TooLong`` marker, in place. pydantic
    quotes the values it refuses, and quoting such an int fails (printing a traceback to stderr)."""
    for path, value, is_key in list(json_leaves(raw)):
        if type(value) is int and _too_long(value) and path and not is_key:
            holder = _walk(raw, list(path[:-1]))
            if isinstance(holder, (dict, list)):
                holder[path[-1]] = _TooLong.of(value)


def _surrogate_problems(raw: Any, source: str) -> list[Problem]:
    """A problem for every text (value or key, which an asset calls a name) holding a lone surrogate."""
    return [_problem(raw, lone.path, lone.message("name"), source) for lone in lone_surrogates(raw)]


def value_problems(raw: dict[str, Any], source: str = "<asset>") -> list[Problem]:
    """Values of a (migrated) asset dict the model would accept but must not, naming node and field:
    in number fields true/false, text, NaN, infinity and numbers too long to convert (also in
    free-form data, which could not be written back)."""
    return [_problem(raw, path, message, source) for path, message in _refused_values(raw)]


def node_value_problems(node: dict[str, Any], source: str = "<asset>") -> list[Problem]:
    """``value_problems`` for one node's dict (a pasted node), and its lone surrogates: what a file
    with that node would be refused for."""
    raw = {"nodes": [node]}
    return _surrogate_problems(raw, source) + value_problems(raw, source)


def comment_value_problems(comments: list[Any], source: str = "<asset>") -> list[Problem]:
    """``node_value_problems`` for a list of comment dicts (pasted comments), located at
    ``comments.N.field`` by their index in ``comments``."""
    raw = {"comments": comments}
    return _surrogate_problems(raw, source) + value_problems(raw, source)


def _refused_values(raw: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    return list(_model_values(Asset, raw, ()))


def _model_values(model: type[BaseModel], raw: dict[str, Any], path: tuple[Any, ...]
                  ) -> Iterator[tuple[tuple[Any, ...], str]]:
    for key, plan in _field_plans(model).items():
        value = raw.get(key, None)
        # Most values are ordinary: find them without a generator.
        if plan[0] == "number" and (type(value) is float and math.isfinite(value)
                                    or type(value) is int and value.bit_length() <= _MAX_INT_BITS):
            continue
        if value is not None and value != {}:
            yield from _planned_values(plan, value, (*path, key))


# How to check a field's value, by its annotation: ("number", kind, bool allowed), ("any",),
# ("items", plan) for lists, ("tuple", plans), ("values", plan) for dicts, ("model", model),
# ("nodes",); None where nothing is checked (text, true/false, choices).
_Plan = tuple[Any, ...] | None


@functools.cache
def _field_plans(model: type[BaseModel]) -> dict[str, _Plan]:
    plans = {name: _plan(info.annotation) for name, info in model.model_fields.items()}
    if model is Asset:
        plans["nodes"] = ("nodes",)
    return {name: plan for name, plan in plans.items() if plan is not None}


def _plan(annotation: Any) -> _Plan:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return ("any",)
    if annotation in (int, float):
        return ("number", annotation, False, False)
    if origin in (typing.Union, types.UnionType):
        numbers = [a for a in args if a in (int, float)]
        return ("number", float if float in numbers else int, bool in args, str in args) if numbers else None
    if origin is tuple:
        plans = tuple(_plan(a) for a in args if a is not Ellipsis)
        return ("tuple", plans, Ellipsis in args) if any(plans) else None
    if origin is list and args:
        item = _plan(args[0])
        return ("items", item) if item else None
    if origin is dict and len(args) == 2:
        item = _plan(args[1])
        return ("values", item) if item else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation) if _field_plans(annotation) else None
    return None


def _planned_values(plan: tuple[Any, ...], value: Any, path: tuple[Any, ...]
                    ) -> Iterator[tuple[tuple[Any, ...], str]]:
    kind = plan[0]
    if kind == "number":
        _, number, bool_allowed, text_allowed = plan
        if value is not None and not (text_allowed and isinstance(value, str)):
            message = _number_message(number, value, bool_allowed)
            if message:
                yield path, message
    elif kind == "any":  # free-form data (metadata): kept as it is, if it can be written back
        for leaf_path, leaf, _is_key in json_leaves(value):
            if _too_long(leaf):
                yield (*path, *leaf_path), _too_long_message(leaf)
    elif kind == "tuple" and isinstance(value, list):
        plans, repeated = plan[1], plan[2]
        for i, item in enumerate(value):
            sub = plans[0] if repeated else (plans[i] if i < len(plans) else None)
            if sub is not None:
                yield from _planned_values(sub, item, (*path, i))
    elif kind == "items" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _planned_values(plan[1], item, (*path, i))
    elif kind == "values" and isinstance(value, dict):
        for key, item in value.items():
            yield from _planned_values(plan[1], item, (*path, key))
    elif kind == "model" and isinstance(value, dict):
        yield from _model_values(plan[1], value, path)
    elif kind == "nodes" and isinstance(value, list):
        for i, node in enumerate(value):
            node_model = _node_model(node)
            if node_model is not None:
                yield from _model_values(node_model, node, (*path, i))


def _node_model(node: Any) -> type[BaseModel] | None:
    """The model of a raw node's type, or None (not a node, or a type no installed plugin gives)."""
    kind = node.get("type") if isinstance(node, dict) else None
    return node_model(kind) if isinstance(kind, str) and kind in NODE_TYPES else None


def _too_long(value: Any) -> bool:
    return isinstance(value, _TooLong) or (
        type(value) is int and value.bit_length() > _MAX_INT_BITS)


def _too_long_message(value: Any) -> str:
    size = f"{(value if isinstance(value, _TooLong) else _TooLong.of(value)).digits:,} digits"
    return f"a number of {size} is too long to read; no field takes numbers that large"


def _number_message(kind: type, value: Any, allow_bool: bool) -> str:
    what = "a whole number" if kind is int else "a number"
    if _too_long(value):
        return _too_long_message(value)
    if isinstance(value, bool):
        return "" if allow_bool else f"must be {what}, not {str(value).lower()}"
    if isinstance(value, str):
        return f"must be {what}, not text ({_short(value)}); write it without quotes"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, not {_short(value)}"
    return ""


def _problem(raw: dict[str, Any], path: tuple[Any, ...], message: str, source: str) -> Problem:
    """A problem at ``path`` in ``raw``: a node's path names the node by its id and the field below it."""
    node_id, rest = "", path
    nodes = raw.get("nodes")
    if len(path) >= 2 and path[0] == "nodes" and isinstance(path[1], int) and isinstance(nodes, list):
        node = nodes[path[1]] if 0 <= path[1] < len(nodes) else None
        given = node.get("id") if isinstance(node, dict) else None
        valid = isinstance(given, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", given)
        node_id, rest = (given if valid else f"nodes[{path[1]}]"), path[2:]
    return Problem("error", message, source, node_id=node_id, field=".".join(shown_name(p) for p in rest))


# --- opening a file that fails validation, to fix it ---------------------------------------------


@dataclass(frozen=True)
class RepairedAsset:
    """An asset opened for editing: ``asset`` is valid; ``problems`` lists what the file had wrong
    and what was opened instead (empty when the file was valid)."""

    asset: Asset
    problems: list[Problem]


def load_asset_for_editing(path: str | os.PathLike[str]) -> RepairedAsset:
    """Open an asset for the editor even when the model refuses some of its values.

    A file that cannot be read, is not JSON, is not an object or is from a newer version is still
    refused with ``AssetError``: there is nothing safe to show. Otherwise the smallest part the model
    refuses is replaced, one error at a time, so that the rest opens as it is:

    - a number above the limit another field sets (``max_tokens`` not below ``context_size``)
      becomes the largest value allowed;
    - any other refused key (a typo, a wrong type, a value out of range) is removed, so its default
      applies;
    - when the default is refused too, or the key is required, the record holding it is left out
      (an intent, a tool, or a node of a type no installed plugin provides).

    Each change is an error ``Problem`` naming the node and field, why the value was refused, the
    value the file holds and what was opened instead. The file itself is not touched: the editor
    marks the document modified, so the repair is kept only if the designer saves.
    """
    source = str(path)
    remove_stale_temp_files(path)
    raw = parse_asset_json(read_asset_text(path), source)
    if not isinstance(raw, dict):
        raise AssetError([Problem("error", f"an asset is a JSON object, not {type(raw).__name__}", source)])
    return repair_asset_dict(raw, source)


def repair_asset_dict(raw: dict[str, Any], source: str = "<asset>") -> RepairedAsset:
    """``raw`` (an asset's parsed JSON) as a valid asset; see ``load_asset_for_editing``. Lone
    surrogates open as U+FFFD, and refused values (``value_problems``) are removed so their
    defaults apply, each with a problem naming the node and field."""
    raw = migrate(copy.deepcopy(raw), source)
    if _holds_too_long_int(raw):
        _mark_too_long(raw)
    problems: list[Problem] = _repair_values(raw, source) + _repair_comment_names(raw, source)
    tried: set[tuple[tuple[Any, ...], str]] = set()
    for _ in range(_MAX_REPAIRS):
        try:
            return RepairedAsset(Asset.model_validate(raw), problems)
        except ValidationError as exc:
            problem = problems_from_validation(exc, raw, source)[0]
            done = _repair_first(raw, exc.errors(include_url=False)[0], tried)
            if done is None:
                raise AssetError([problem, *problems]) from None
            problems.append(dataclasses.replace(
                problem, message=f"{problem.message}. Opened {done}. The file is unchanged until you save."))
    raise AssetError(problems or [Problem("error", "too many problems to open", source)])


_MAX_REPAIRS = 1000
_UNCHANGED = "The file is unchanged until you save."


def _repair_values(raw: dict[str, Any], source: str) -> list[Problem]:
    """Replace lone surrogates in ``raw`` with U+FFFD and remove refused values, in place; a
    problem for each, in file order."""
    problems: list[Problem] = []
    # Deepest first: a key is renamed after the values below it, which are found by its old name.
    for lone in reversed(list(lone_surrogates(raw))):
        path = lone.path
        holder = _walk(raw, list(path[:-1]))
        leaf = path[-1] if path else None
        if lone.in_key and isinstance(holder, dict) and leaf in holder:
            items = list(holder.items())
            holder.clear()
            holder.update((without_surrogates(k) if k == leaf else k, v) for k, v in items)
        elif isinstance(holder, (dict, list)) and isinstance(holder[leaf], str):
            holder[leaf] = without_surrogates(holder[leaf])
        problems.append(_problem(raw, path, f"{lone.message('name')}. Opened with {REPLACEMENT} in its place. "
                                 f"{_UNCHANGED}", source))
    problems.reverse()
    for path, message, steps, value in _remove_refused(raw):
        key = steps[-1]
        default = _default_text(raw, list(steps))
        done = f"with {shown_name(key)} reset to {default}" if default else f"without {shown_name(key)}"
        had = f" (the file has {_short(value)})" if steps != path else ""
        problems.append(_problem(raw, path, f"{message}{had}. Opened {done}. {_UNCHANGED}", source))
    return problems


def _repair_comment_names(raw: dict[str, Any], source: str) -> list[Problem]:
    """Give a comment with a missing, malformed or repeated id a free one, and a comment without a
    valid kind the kind 'note', in place, so that the comment (its text above all) still opens."""
    comments = raw.get("comments")
    if not isinstance(comments, list):
        return []
    problems: list[Problem] = []
    records = [c for c in comments if isinstance(c, dict)]
    used = {c["id"] for c in records if isinstance(c.get("id"), str)}
    seen: set[str] = set()
    for index, comment in enumerate(comments):
        if not isinstance(comment, dict):
            continue
        given = comment.get("id")
        valid = isinstance(given, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", given)
        if not valid or given in seen:
            free = next(f"comment_{n}" for n in range(1, len(comments) + len(used) + 2) if f"comment_{n}" not in used)
            used.add(free)
            why = ("comment id is missing" if given is None else f"comment id {_short(given)} is repeated" if valid
                   else f"comment id {_short(given)} is not an id (a letter or _, then letters, digits, _ or -)")
            comment["id"] = free
            given = free
            problems.append(Problem("error", f"{why}. Opened as {free!r}. {_UNCHANGED}", source,
                                    field=f"comments.{index}.id"))
        seen.add(given)
        if comment.get("kind") not in ("backdrop", "note"):
            had = "is missing" if "kind" not in comment else f"is {_short(comment['kind'])}, not 'backdrop' or 'note'"
            comment["kind"] = "note"
            problems.append(Problem("error", f"the comment's kind {had}. Opened as a note. {_UNCHANGED}", source,
                                    field=f"comments.{index}.kind"))
    return problems


def _remove_refused(raw: dict[str, Any]) -> list[tuple[tuple[Any, ...], str, tuple[Any, ...], Any]]:
    """Remove the refused values (``value_problems``) from ``raw``, in place, each with the innermost
    key that holds it (a whole position, one variable); (where, why, the key's path, its value)."""
    removed = []
    for path, message in _refused_values(raw):
        steps = list(path)
        while steps and not isinstance(_walk(raw, steps[:-1]), dict):
            steps.pop()
        holder = _walk(raw, steps[:-1]) if steps else None
        if isinstance(holder, dict) and steps[-1] in holder:
            removed.append((path, message, tuple(steps), holder.pop(steps[-1])))
    return removed


def _error_path(raw: dict[str, Any], err: dict[str, Any]) -> list[Any]:
    """Where in ``raw`` an error is, as keys and list indexes (a node type's tag left out)."""
    loc = list(err["loc"])
    nodes = raw.get("nodes")
    if len(loc) >= 3 and loc[0] == "nodes" and isinstance(loc[1], int) and isinstance(nodes, list):
        node = nodes[loc[1]] if loc[1] < len(nodes) else None
        if isinstance(node, dict) and loc[2] == node.get("type"):
            del loc[2]
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, FieldError) and original.field:
        loc += [int(p) if p.isdigit() else p for p in original.field.split(".")]
    return loc


def _walk(raw: Any, path: list[Any]) -> Any:
    for key in path:
        found = (isinstance(raw, dict) and key in raw
                 or isinstance(raw, list) and isinstance(key, int) and 0 <= key < len(raw))
        if not found:
            return None
        raw = raw[key]
    return raw


def _node_limit(raw: dict[str, Any], path: list[Any]) -> tuple[int, int] | None:
    """(value, largest allowed) when ``path`` is a node field (given or default) over a limit
    another field sets."""
    if len(path) != 3 or path[0] != "nodes":
        return None
    node = _walk(raw, path[:2])
    model = _node_model(node)
    if model is None:
        return None
    try:
        built = model.model_construct(**{k: v for k, v in node.items() if k in model.model_fields})
        limit = built.field_limits().get(path[2])
        value = getattr(built, path[2])
    except (TypeError, ValueError, AttributeError):
        return None
    if isinstance(limit, int) and isinstance(value, int) and value > limit:
        return value, limit
    return None


def _default_text(raw: dict[str, Any], path: list[Any]) -> str:
    """'its default X' for a top-level asset or node field, else ''."""
    model: Any = Asset if len(path) == 1 else None
    if len(path) == 3 and path[0] == "nodes":
        node = _walk(raw, path[:2])
        model = _node_model(node)
    if len(path) == 3 and path[0] == "comments":
        model = Comment
    info = model.model_fields.get(path[-1]) if model is not None else None
    if info is None:
        return ""
    if info.is_required():
        return ""
    return f"its default {_short(info.get_default(call_default_factory=True))}"


def _repair_first(raw: dict[str, Any], err: dict[str, Any], tried: set[tuple[tuple[Any, ...], str]]) -> str | None:
    """Change ``raw`` so that this error goes away; say what was done, or None if nothing can be."""
    path = _error_path(raw, err)
    while path:
        *above, leaf = path
        holder = _walk(raw, above)
        key = tuple(path)
        limited = _node_limit(raw, path)
        if isinstance(holder, dict) and limited is not None and (key, "limit") not in tried:
            tried.add((key, "limit"))
            had = f"the file has {limited[0]}" if leaf in holder else f"the default is {limited[0]}"
            holder[leaf] = limited[1]
            return f"with {leaf} {limited[1]}, the largest value allowed ({had})"
        if isinstance(holder, dict) and leaf in holder and (key, "default") not in tried:
            tried.add((key, "default"))
            default = _default_text(raw, path)
            value = holder.pop(leaf)
            if default:
                return f"with {leaf} reset to {default} (the file has {_short(value)})"
            return f"without {leaf} (the file has {_short(value)})"
        if isinstance(holder, list) and isinstance(leaf, int) and 0 <= leaf < len(holder):
            record = holder.pop(leaf)
            tried.clear()  # indexes moved; every removal shrinks the asset, so this still ends
            if above == ["nodes"]:
                name = record.get("id", f"nodes[{leaf}]") if isinstance(record, dict) else f"nodes[{leaf}]"
                return f"without node {_short(name)}"
            return f"without this entry of {'.'.join(map(str, above[-1:]))} (the file has {_short(record)})"
        path = above
    return None


def problems_from_validation(exc: ValidationError, raw: dict[str, Any], source: str) -> list[Problem]:
    """Turn pydantic's errors into problems that name the node id and field."""
    return located_problems(exc, source, functools.partial(_node_place, raw), _friendly)


def _node_place(raw: dict[str, Any], err: ErrorDetails) -> Place:
    """A node's error names the node by its id (its index when it has none) and the field below it."""
    loc = list(err["loc"])
    node_id = ""
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        nodes = raw.get("nodes") if isinstance(raw.get("nodes"), list) else []
        index = loc[1]
        node = nodes[index] if index < len(nodes) else None
        given = node.get("id") if isinstance(node, dict) else None
        node_id = shown_name(given) if isinstance(given, str) and given else f"nodes[{index}]"
        loc = loc[2:]
        # pydantic puts the union member's tag in the path: drop it.
        if loc and isinstance(node, dict) and loc[0] == node.get("type"):
            loc = loc[1:]
    field = ".".join(shown_name(p) for p in loc)
    original = (err.get("ctx") or {}).get("error")
    if isinstance(original, FieldError):
        field = ".".join(p for p in (field, original.field) if p)
    return Place(node_id=node_id, field=field)


_WORDING: Wording = {
    "extra_forbidden": f"{UNKNOWN_KEY} (check its spelling; free-form data belongs under 'metadata')",
    "union_tag_invalid": lambda err: (f"unknown node type {err.get('ctx', {}).get('tag')!r}; expected one of "
                                      f"{err.get('ctx', {}).get('expected_tags', '')}"),
    "union_tag_not_found": "a node needs a 'type'",
    "missing": MISSING_FIELD,
}


def _friendly(err: ErrorDetails) -> str:
    return without_surrogates(error_message(err, _WORDING, _with_input))


def _with_input(err: ErrorDetails) -> str:
    """pydantic's message and, unless a validator wrote it, the value it refused."""
    msg = validator_says(err)
    return f"{msg} (got {_short(err.get('input'))})" if err["type"] != "value_error" and "input" in err else msg


def _short(value: Any) -> str:
    if isinstance(value, _TooLong):
        return str(value)
    if _too_long(value):
        return str(_TooLong.of(value))
    try:
        text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else repr(value)
    except (ValueError, RecursionError):  # an integer too long to write, or nesting too deep
        text = f"a {type(value).__name__}"
    text = without_surrogates(text)
    return text if len(text) <= 60 else text[:57] + "..."


# --- writing -----------------------------------------------------------------------------------


def _ordered(d: dict[str, Any], first: tuple[str, ...], last: tuple[str, ...] = ()) -> dict[str, Any]:
    head = [k for k in first if k in d]
    tail = [k for k in last if k in d]
    middle = [k for k in d if k not in head and k not in tail]
    return {k: d[k] for k in head + middle + tail}


def _json_dump(model: BaseModel) -> dict[str, Any]:
    """``model`` as JSON data. pydantic cannot write a lone surrogate in a key of free-form data
    (metadata): such a model goes through the json module, which keeps it exactly."""
    try:
        return model.model_dump(mode="json")
    except UnicodeEncodeError:
        return json.loads(json.dumps(model.model_dump(mode="python")))


def node_to_dict(node: Any) -> dict[str, Any]:
    """One node as a saved asset writes it (the editor's clipboard uses this too)."""
    return _node_dict(_json_dump(node))


def _node_dict(raw: dict[str, Any]) -> dict[str, Any]:
    if not raw.get("bypassed"):
        raw.pop("bypassed", None)  # written only when true, so files without bypassed nodes stay as they were
    entry = NODE_TYPES.get(raw.get("type", ""))
    for name in entry.model.WRITTEN_WHEN_SET if entry is not None else ():
        if not raw.get(name):
            raw.pop(name, None)  # a field added later, written only when set, so older files save as they were
    return _ordered(raw, _NODE_KEY_ORDER, _TRAILING_NODE_KEYS)


def comment_to_dict(comment: Any) -> dict[str, Any]:
    """One comment as a saved asset writes it (the editor's clipboard uses this too)."""
    return _ordered(_json_dump(comment), _COMMENT_KEY_ORDER)


def asset_to_dict(asset: Asset) -> dict[str, Any]:
    raw = _json_dump(asset)
    raw["nodes"] = [_node_dict(n) for n in raw["nodes"]]
    if raw.get("comments"):
        raw["comments"] = [_ordered(c, _COMMENT_KEY_ORDER) for c in raw["comments"]]
    else:
        raw.pop("comments", None)  # written only when there are some
    for key in ("game_events", "reply_tags", "language"):
        if not raw.get(key):
            raw.pop(key, None)  # written only when set, so older files save as they were
    if raw.get("double_text") == Asset.model_fields["double_text"].default:
        raw.pop("double_text")  # written only when not the default, so older files save as they were
    return _ordered(raw, _ASSET_KEY_ORDER, _TRAILING_ASSET_KEYS)


def dumps_asset(asset: Asset) -> str:
    """The file's text. Lone surrogates, which no UTF-8 file can hold (an editor field can still
    receive one), are written as U+FFFD, so saving never fails and the file opens again."""
    return without_surrogates(json.dumps(asset_to_dict(asset), indent=2, ensure_ascii=False)) + "\n"


def save_asset(asset: Asset, path: str | os.PathLike[str]) -> None:
    atomic_write_text(path, dumps_asset(asset))
