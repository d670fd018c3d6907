"""The workflow asset file format: JSON in, ``Asset`` out, and back, deterministically.

Saving writes keys in one stable order and every field explicitly, so that load
then save gives a byte-identical file and assets diff cleanly in git. Saving is
atomic: a temporary file beside the target, then a rename, so a crash never
leaves half an asset behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.asset import ASSET_VERSION, Asset, FieldError
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
