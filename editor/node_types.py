"""The editor's description of each node type: one ``NodeView`` per type, in one table.

A ``NodeView`` is everything the editor shows of a type: its label, palette category, colour,
help text, the summary painted on the node, and its properties layout (the order of the field
groups). The palette, the canvas, Tab search and the properties dock read it from here and
nowhere else; what a type stores and does is its runtime module (``runtime.nodes``).

Plugin types (the ``parley.node_types`` entry point) name their ``NodeView`` in
``NodeType.editor``; a plugin without one gets ``fallback_view``, built from its model.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from runtime.asset import (
    Asset,
    ClassifyAttributes,
    ClassifyIntent,
    GeneratingNode,
    ModelParams,
    NodeBase,
    Retrieve,
    Summarize,
    ToolCall,
)
from runtime.nodes import NODE_TYPES, node_type

log = logging.getLogger("parley.editor")

Colour = tuple[int, int, int]
SummaryLines = Callable[[NodeBase, Asset], list[str]]

# Palette categories, in palette order, with their colours. A plugin may name another category.
CATEGORY_COLOURS: dict[str, Colour] = {
    "Reply": (38, 98, 140),
    "Tools": (150, 95, 30),
    "Classify": (104, 66, 140),
    "Memory": (34, 118, 100),
}
PLUGIN_CATEGORY = "Plugins"
PLUGIN_COLOUR: Colour = (92, 96, 104)
# Properties dock sections, in order; a group a view does not list comes after these.
GROUP_ORDER = ("General", "Prompt", "Model", "Sampling", "History", "Tools", "Intents", "Attributes",
               "Knowledge", "Folding", "Exits", "Layout")


def _no_summary(_node: NodeBase, _asset: Asset) -> list[str]:
    return []


@dataclass(frozen=True)
class NodeView:
    """How the editor shows one node type."""

    type: str
    label: str
    category: str
    help: str
    summary: SummaryLines = _no_summary  # the key settings painted on the node, a few short lines
    colour: Colour | None = None  # None: the category's colour
    groups: tuple[str, ...] = GROUP_ORDER  # properties dock sections, in order
    hidden_fields: tuple[str, ...] = field(default=())  # fields the properties dock leaves out
    id_stem: str = ""  # what a new node's id starts with ('' : the type name in lower case)

    @property
    def new_id(self) -> str:
        return self.id_stem or self.type.lower()

    @property
    def fill(self) -> Colour:
        return self.colour or CATEGORY_COLOURS.get(self.category, PLUGIN_COLOUR)


# --- summary lines of the built-in types ----------------------------------------------------------


def _short(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def model_label(node: NodeBase, asset: Asset) -> str:
    own = node.model_name if isinstance(node, ModelParams) else ""
    if own:
        return _short(os.path.basename(own))
    if asset.default_model:
        return f"{_short(os.path.basename(asset.default_model), 22)} (agent)"
    return "no model"


def context_label(node: NodeBase) -> str:
    size = node.context_size if isinstance(node, ModelParams) else 0
    return f"ctx {size}" if size else "ctx model"


def _generating(node: GeneratingNode, asset: Asset) -> list[str]:
    return [model_label(node, asset), f"{context_label(node)} \u00b7 max {node.max_tokens} tok",
            f"history {node.history_role} \u00b7 {node.history_mode}"]


def _tool_call(node: ToolCall, asset: Asset) -> list[str]:
    count = len(node.tools)
    return _generating(node, asset) + [f"{count} tool{'s' if count != 1 else ''} \u00b7 {node.disposition}"]


def _summarize(node: Summarize, asset: Asset) -> list[str]:
    trigger = f"fold at {node.trigger_tokens} tok" if node.trigger_tokens else f"fold every {node.trigger_turns} turns"
    return [model_label(node, asset), f"{context_label(node)} \u00b7 summary \u2264{node.max_summary_tokens}", trigger]


def _classify_intent(node: ClassifyIntent, asset: Asset) -> list[str]:
    return [model_label(node, asset), f"{context_label(node)} \u00b7 slot {node.slot}"]


def _classify_attributes(node: ClassifyAttributes, asset: Asset) -> list[str]:
    count = len(node.attributes)
    return [model_label(node, asset), f"{context_label(node)} \u00b7 {count} attribute{'s' if count != 1 else ''}"]


def _retrieve(node: Retrieve, asset: Asset) -> list[str]:
    source = _short(node.source_file, 24) if node.source_file else f"{len(node.entries)} entries"
    return [f"top {node.top_k} \u00b7 {source}", "embeddings" if node.embedding_model else "BM25"]


# The built-in types, in palette order within each category.
BUILTIN_VIEWS: dict[str, NodeView] = {view.type: view for view in (
    NodeView("GenerateAndSpeak", "Generate and Speak", "Reply",
             "Generates the character's reply to the player.", _generating, id_stem="reply"),  # type: ignore[arg-type]
    NodeView("Generate", "Generate", "Reply",
             "Generates text with a model; the output goes to a slot or the next node, not to the player.",
             _generating),  # type: ignore[arg-type]
    NodeView("ToolCall", "Tool Call", "Tools",
             "Lets the model call one of the declared tools, constrained to its JSON schema.",
             _tool_call),  # type: ignore[arg-type]
    NodeView("ClassifyIntent", "Classify Intent (LLM)", "Classify",
             "Picks one of the listed intents for the player's line and branches on it.",
             _classify_intent),  # type: ignore[arg-type]
    NodeView("ClassifyAttributes", "Classify Attributes (LLM)", "Classify",
             "Fills attribute slots, each with one of its allowed values.",
             _classify_attributes),  # type: ignore[arg-type]
    NodeView("Retrieve", "Retrieve", "Memory",
             "Finds the knowledge entries that best match the line and puts them in a slot.",
             _retrieve),  # type: ignore[arg-type]
    NodeView("Summarize", "Summarize", "Memory",
             "Folds older turns into a rolling summary so long conversations keep their thread.",
             _summarize),  # type: ignore[arg-type]
)}


# --- the table -----------------------------------------------------------------------------------


def fallback_view(type_name: str) -> NodeView:
    """A plain description for a plugin type that names none (or one that cannot be loaded)."""
    model = node_type(type_name).model
    doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    return NodeView(type_name, type_name, PLUGIN_CATEGORY, doc or f"A {type_name} node (from a plugin).")


@cache
def view_of(type_name: str) -> NodeView:
    """The editor's description of a registered node type. Raises KeyError for an unknown type."""
    if type_name in BUILTIN_VIEWS:
        return BUILTIN_VIEWS[type_name]
    entry = node_type(type_name)
    if not entry.editor:
        return fallback_view(type_name)
    module, _, attribute = entry.editor.partition(":")
    try:
        view = getattr(importlib.import_module(module), attribute)
        if not isinstance(view, NodeView):
            raise TypeError(f"{entry.editor} is a {type(view).__name__}, not an editor.node_types.NodeView")
    except Exception as exc:  # a broken plugin view must not stop the editor
        log.warning("node type %s: its editor description %s could not be loaded (%s: %s)",
                    type_name, entry.editor, type(exc).__name__, exc)
        return fallback_view(type_name)
    return view


def all_views() -> list[NodeView]:
    """Every registered type's view, in palette order: by category (the built-in categories first),
    then in the order the types were registered."""
    views = [view_of(name) for name in NODE_TYPES]
    categories = list(CATEGORY_COLOURS) + sorted({v.category for v in views} - set(CATEGORY_COLOURS))
    builtin_order = list(BUILTIN_VIEWS)
    return sorted(views, key=lambda v: (categories.index(v.category),
                                        builtin_order.index(v.type) if v.type in builtin_order else len(builtin_order)))


def categories() -> dict[str, list[NodeView]]:
    """Palette categories in order, each with its types' views."""
    out: dict[str, list[NodeView]] = {}
    for view in all_views():
        out.setdefault(view.category, []).append(view)
    return out


def category_colour(category: str) -> Colour:
    return CATEGORY_COLOURS.get(category, PLUGIN_COLOUR)
