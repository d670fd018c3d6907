"""Copy and paste of nodes as JSON text, in the asset file's own node format.

What is copied is ``{"nodes": [...]}`` with each node exactly as a saved asset
writes it, so nodes paste between windows, into another program, and out of a
saved asset's JSON (a whole asset, a list of nodes or one node all paste). A bypassed
node stays bypassed. Comments (backdrops and notes) copied with them are under
``"comments"``, as a saved asset writes them; ``comments_in_text`` reads them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import ValidationError

from runtime.asset.file import (
    comment_to_dict,
    comment_value_problems,
    node_to_dict,
    node_value_problems,
    parse_asset_json,
    problems_from_validation,
)
from runtime.asset.model import END, Comment, NodeBase
from runtime.names import free_id, shown_name
from runtime.nodes import NODE_TYPES, node_model, shown_exits
from runtime.problems import AssetError, Problem

SOURCE = "clipboard"


def nodes_to_text(nodes: Iterable[NodeBase], comments: Iterable[Comment] = ()) -> str:
    """Clipboard text of ``nodes``, and of ``comments`` (written only when there are some)."""
    raw: dict[str, list] = {"nodes": [node_to_dict(n) for n in nodes]}
    written = [comment_to_dict(c) for c in comments]
    if written:
        raw["comments"] = written
    return json.dumps(raw, indent=2, ensure_ascii=False) + "\n"


def comments_in_text(text: str) -> list[Comment]:
    """The comments in clipboard text (``nodes_to_text``'s, or a whole asset's): none when the text is
    not JSON or holds no ``comments`` list. Raises ``AssetError`` naming each bad one by its index and
    field (``comments.1.color``), refusing the values an asset file is refused for."""
    try:
        raw = parse_asset_json(text, SOURCE)
    except AssetError:
        return []  # not JSON: nodes_from_text says so
    items = raw.get("comments") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return []
    problems = comment_value_problems(items, SOURCE)
    if problems:
        raise AssetError(problems)
    comments: list[Comment] = []
    for index, item in enumerate(items):
        try:
            comments.append(Comment.model_validate(item))
        except ValidationError as exc:
            for p in problems_from_validation(exc, {}, SOURCE):
                problems.append(Problem("error", p.message, SOURCE,
                                        field=".".join(x for x in ("comments", str(index), p.field) if x)))
    if problems:
        raise AssetError(problems)
    return comments


def nodes_from_text(text: str) -> list[NodeBase]:
    """The nodes in clipboard text. Raises ``AssetError`` naming each bad node and field: the same
    values are refused as when an asset file is opened (true or text in a number field, NaN,
    numbers too long to convert, lone surrogates)."""
    try:
        raw = parse_asset_json(text, SOURCE)
    except AssetError as exc:
        raise AssetError([Problem("error", f"not node JSON: {p.message.removeprefix('malformed JSON: ')}", SOURCE,
                                  line=p.line, column=p.column) for p in exc.problems]) from None
    if isinstance(raw, dict) and isinstance(raw.get("nodes"), list):
        items = raw["nodes"]
    elif isinstance(raw, list):
        items = raw
    elif isinstance(raw, dict) and "type" in raw:
        items = [raw]
    else:
        raise AssetError([Problem("error", "no nodes: expected an asset, a list of nodes or one node", SOURCE)])
    nodes: list[NodeBase] = []
    problems: list[Problem] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(Problem("error", "a node is a JSON object", SOURCE, node_id=f"nodes[{index}]"))
            continue
        node_id = item.get("id")
        label = shown_name(node_id) if isinstance(node_id, str) and node_id else f"nodes[{index}]"
        kind = item.get("type")
        cls = node_model(kind) if isinstance(kind, str) and kind in NODE_TYPES else None
        if cls is None:
            what = f"unknown node type {kind!r}" if isinstance(kind, str) else (
                "a node needs a 'type'" if kind is None else f"a node's type is a name, not {json.dumps(kind)[:60]}")
            problems.append(Problem("error", f"{what}; expected one of {', '.join(NODE_TYPES)}", SOURCE,
                                    node_id=label, field="type"))
            continue
        refused = node_value_problems(item, SOURCE)
        if refused:
            problems.extend(Problem("error", p.message, SOURCE, node_id=label, field=p.field) for p in refused)
            continue
        try:
            nodes.append(cls.model_validate(item))
        except ValidationError as exc:
            for p in problems_from_validation(exc, {"nodes": [item]}, SOURCE):
                problems.append(Problem("error", p.message, SOURCE, node_id=label, field=p.field))
    if problems:
        raise AssetError(problems)
    return nodes


def prepare_paste(
    nodes: list[NodeBase],
    taken_ids: set[str],
    offset: tuple[float, float] = (40.0, 40.0),
) -> list[NodeBase]:
    """Copies of ``nodes`` with ids unused in ``taken_ids`` and unique among themselves, exits between
    them repointed, exits to nodes that do not exist ended, and positions moved by ``offset``.
    When pasted nodes share an id, exits to that id go to the first of them."""
    new_ids: list[str] = []
    first: dict[str, str] = {}  # pasted id -> the new id of the first node that had it
    used = set(taken_ids)
    for node in nodes:
        new_id = free_id(node.id, used)
        used.add(new_id)
        new_ids.append(new_id)
        first.setdefault(node.id, new_id)

    def target(old: str) -> str:
        if old == END:
            return END
        if old in first:
            return first[old]
        return old if old in taken_ids else END

    out: list[NodeBase] = []
    for node, new_id in zip(nodes, new_ids):
        repointed = node.with_exits({port: target(old) for port, old in shown_exits(node).items()})
        x, y = node.position
        out.append(repointed.model_copy(update={"id": new_id, "position": (x + offset[0], y + offset[1])}))
    return out


def prepare_comment_paste(
    comments: list[Comment],
    taken_ids: set[str],
    offset: tuple[float, float] = (40.0, 40.0),
) -> list[Comment]:
    """Copies of ``comments`` with ids unused in ``taken_ids`` (the asset's comment ids) and unique
    among themselves, moved by ``offset`` (the same offset as the nodes pasted with them)."""
    used = set(taken_ids)
    out: list[Comment] = []
    for comment in comments:
        new_id = free_id(comment.id, used, "comment")
        used.add(new_id)
        x, y = comment.position
        out.append(comment.model_copy(update={"id": new_id, "position": (x + offset[0], y + offset[1])}))
    return out
