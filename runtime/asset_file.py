"""The workflow asset file format: JSON in, ``Asset`` out, and back, deterministically.

Saving writes keys in one stable order and every field explicitly, so that load
then save gives a byte-identical file and assets diff cleanly in git. Saving is
atomic: a temporary file beside the target, then a rename, so a crash never
leaves half an asset behind.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.asset import ASSET_VERSION, NODE_TYPES, Asset, FieldError
from runtime.problems import AssetError, Problem, parse_input_json, read_input_text

# Keys first in this order; any other key keeps the model's order after them.
_NODE_KEY_ORDER = (
    "id", "type", "title", "model_name", "context_size", "max_tokens", "max_summary_tokens",
    "system_prompt", "input", "template", "placement", "history_role", "history_mode", "history_window",
    "temperature", "top_p", "seed",
)
_TRAILING_NODE_KEYS = ("default_exit", "fallback_exit", "position", "metadata")
_ASSET_KEY_ORDER = ("version", "name", "default_model", "start_node", "variables", "enable_diagnostics")

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


def migrate(raw: dict[str, Any], source: str = "<asset>") -> dict[str, Any]:
    version = raw.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise AssetError([Problem("error", "version must be a whole number", source, field="version")])
    if version > ASSET_VERSION:
        raise AssetError([Problem(
            "error",
            f"this asset is version {version}; this Parley Studio reads up to version {ASSET_VERSION}. Update Parley Studio.",
            source, field="version",
        )])
    while version < ASSET_VERSION:
        if version not in MIGRATIONS:
            raise AssetError([Problem("error", f"no migration from version {version}", source, field="version")])
        raw = MIGRATIONS[version](raw)
        version = raw["version"]
    return raw


def parse_asset(text: str, source: str = "<asset>") -> Asset:
    """Parse and check an asset's JSON text. Raises ``AssetError`` naming every problem."""
    return asset_from_dict(parse_input_json(text, source, AssetError), source)


def asset_from_dict(raw: Any, source: str = "<asset>") -> Asset:
    if not isinstance(raw, dict):
        raise AssetError([Problem("error", f"an asset is a JSON object, not {type(raw).__name__}", source)])
    raw = migrate(dict(raw), source)
    try:
        return Asset.model_validate(raw)
    except ValidationError as exc:
        raise AssetError(problems_from_validation(exc, raw, source)) from None


def load_asset(path: str | os.PathLike[str]) -> Asset:
    return parse_asset(read_input_text(path, AssetError), str(path))


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
    raw = parse_input_json(read_input_text(path, AssetError), source, AssetError)
    if not isinstance(raw, dict):
        raise AssetError([Problem("error", f"an asset is a JSON object, not {type(raw).__name__}", source)])
    return repair_asset_dict(raw, source)


def repair_asset_dict(raw: dict[str, Any], source: str = "<asset>") -> RepairedAsset:
    """``raw`` (an asset's parsed JSON) as a valid asset; see ``load_asset_for_editing``."""
    raw = migrate(copy.deepcopy(raw), source)
    problems: list[Problem] = []
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
    model = NODE_TYPES.get(node.get("type")) if isinstance(node, dict) else None
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
        model = NODE_TYPES.get(node.get("type")) if isinstance(node, dict) else None
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
    problems: list[Problem] = []
    nodes = raw.get("nodes") if isinstance(raw.get("nodes"), list) else []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        node_id = ""
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
            index = loc[1]
            node = nodes[index] if index < len(nodes) else None
            node_id = str(node.get("id")) if isinstance(node, dict) and node.get("id") else f"nodes[{index}]"
            loc = loc[2:]
            # pydantic puts the union member's tag in the path: drop it.
            if loc and isinstance(node, dict) and loc[0] == node.get("type"):
                loc = loc[1:]
        field = ".".join(str(p) for p in loc)
        original = (err.get("ctx") or {}).get("error")
        if isinstance(original, FieldError):
            field = ".".join(p for p in (field, original.field) if p)
        message = _friendly(err)
        problems.append(Problem("error", message, source, node_id=node_id, field=field))
    return problems


def _friendly(err: dict[str, Any]) -> str:
    kind = err["type"]
    msg = err["msg"]
    if kind == "extra_forbidden":
        return "unknown key (check its spelling; free-form data belongs under 'metadata')"
    if kind == "union_tag_invalid":
        expected = err.get("ctx", {}).get("expected_tags", "")
        return f"unknown node type {err.get('ctx', {}).get('tag')!r}; expected one of {expected}"
    if kind == "union_tag_not_found":
        return "a node needs a 'type'"
    if kind == "missing":
        return "required field is missing"
    msg = msg.removeprefix("Value error, ")
    return f"{msg} (got {_short(err.get('input'))})" if kind not in ("value_error",) and "input" in err else msg


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- writing -----------------------------------------------------------------------------------


def _ordered(d: dict[str, Any], first: tuple[str, ...], last: tuple[str, ...] = ()) -> dict[str, Any]:
    head = [k for k in first if k in d]
    tail = [k for k in last if k in d]
    middle = [k for k in d if k not in head and k not in tail]
    return {k: d[k] for k in head + middle + tail}


def node_to_dict(node: Any) -> dict[str, Any]:
    """One node as a saved asset writes it (the editor's clipboard uses this too)."""
    return _ordered(node.model_dump(mode="json"), _NODE_KEY_ORDER, _TRAILING_NODE_KEYS)


def asset_to_dict(asset: Asset) -> dict[str, Any]:
    raw = asset.model_dump(mode="json")
    raw["nodes"] = [_ordered(n, _NODE_KEY_ORDER, _TRAILING_NODE_KEYS) for n in raw["nodes"]]
    return _ordered(raw, _ASSET_KEY_ORDER, ("metadata", "nodes"))


def dumps_asset(asset: Asset) -> str:
    return json.dumps(asset_to_dict(asset), indent=2, ensure_ascii=False) + "\n"


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_asset(asset: Asset, path: str | os.PathLike[str]) -> None:
    atomic_write_text(path, dumps_asset(asset))
