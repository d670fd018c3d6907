"""The node-type registry: the one table of every node type an asset can hold.

Each built-in type is one module here (its pydantic model, exits, how it runs, its validation
rules and estimator contribution all live on the model class). ``NODE_TYPES`` lists them, then
the types other packages add through the ``parley.node_types`` entry point.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."parley.node_types"]
    mood = "parley_mood:NODE_TYPE"

where ``NODE_TYPE`` is a ``NodeType`` whose model derives from ``runtime.nodes.NodeBase``. Its
``editor`` names the editor's description of the type (``"parley_mood.view:VIEW"``, an
``editor.node_types.NodeView``), so the runtime never imports the editor. Plugins are loaded once,
when this package is first imported; a plugin module must not import ``runtime.asset.model`` at import
time (the asset model is built from this table). See docs/node-types.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import metadata

from runtime.nodes.base import (
    END,
    ID_PATTERN,
    OPTIONAL_SLOT_PATTERN,
    SLOT_PATTERN,
    TOKENS_PER_MESSAGE,
    FieldError,
    ModelParams,
    ModelUse,
    NodeBase,
    SamplingParams,
    Strict,
    VariableValue,
    field_help,
    is_valid_id,
)
from runtime.nodes.checks import NodeChecks
from runtime.nodes.classify_attributes import Attribute, ClassifyAttributes
from runtime.nodes.classify_intent import ClassifyIntent, Intent
from runtime.nodes.generate import Generate, GenerateAndSpeak, GeneratingNode
from runtime.nodes.retrieve.node import KnowledgeEntry, Retrieve
from runtime.nodes.running import NodeRun, TurnCancelled, TurnError
from runtime.nodes.summarize.node import Summarize
from runtime.nodes.tool_call import Tool, ToolCall

log = logging.getLogger("parley.runtime")

ENTRY_POINT_GROUP = "parley.node_types"


@dataclass(frozen=True)
class NodeType:
    """One node type: its model class, and where the editor finds its description."""

    model: type[NodeBase]
    editor: str = ""  # "module:attribute" of its editor.node_types.NodeView ('' for the built-in types)
    package: str = ""  # the distribution that added it ('' for the built-in types)

    @property
    def name(self) -> str:
        return self.model.model_fields["type"].default


def _builtin(model: type[NodeBase]) -> NodeType:
    return NodeType(model)


# The table: the built-in types, then the plugins' (the editor orders its palette by category).
NODE_TYPES: dict[str, NodeType] = {
    t.name: t
    for t in map(_builtin, (Generate, GenerateAndSpeak, ToolCall, Summarize, ClassifyIntent, ClassifyAttributes,
                            Retrieve))
}
# Why a plugin could not be added (its entry point, then the reason); shown by `parley validate`
# and the editor's Problems dock rather than stopping either.
PLUGIN_PROBLEMS: list[str] = []


def node_type(name: str) -> NodeType:
    """The registered type called ``name``. Raises KeyError."""
    return NODE_TYPES[name]


def node_models() -> tuple[type[NodeBase], ...]:
    return tuple(t.model for t in NODE_TYPES.values())


def register(entry: NodeType) -> None:
    """Add a node type to the table. Only before ``runtime.asset.model`` is imported (plugins register
    while this package loads): the asset model's union of node types is built from the table."""
    model = entry.model
    if not (isinstance(model, type) and issubclass(model, NodeBase)) or "type" not in model.model_fields:
        raise TypeError("a node type's model derives from runtime.nodes.NodeBase and has a Literal 'type' field")
    if entry.name in NODE_TYPES:
        raise ValueError(f"node type {entry.name!r} is already registered")
    NODE_TYPES[entry.name] = entry


def _load_plugins() -> None:
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = point.dist.name if point.dist is not None else ""
        try:
            loaded = point.load()
            if not isinstance(loaded, NodeType):
                raise TypeError(f"{point.value} is a {type(loaded).__name__}, not a runtime.nodes.NodeType")
            register(NodeType(loaded.model, loaded.editor, loaded.package or package))
        except Exception as exc:  # a broken plugin must not stop the app or the CLI
            problem = f"node type plugin {point.name!r} ({point.value}) was not added: {type(exc).__name__}: {exc}"
            PLUGIN_PROBLEMS.append(problem)
            log.warning("%s", problem)


_load_plugins()

__all__ = [
    "END", "ENTRY_POINT_GROUP", "ID_PATTERN", "NODE_TYPES", "OPTIONAL_SLOT_PATTERN", "PLUGIN_PROBLEMS",
    "SLOT_PATTERN", "TOKENS_PER_MESSAGE", "Attribute", "ClassifyAttributes", "ClassifyIntent", "FieldError",
    "Generate", "GenerateAndSpeak", "GeneratingNode", "Intent", "KnowledgeEntry", "ModelParams", "ModelUse",
    "NodeBase", "NodeChecks", "NodeRun", "NodeType", "Retrieve", "SamplingParams", "Strict", "Summarize",
    "Tool", "ToolCall", "TurnCancelled", "TurnError", "VariableValue", "field_help", "is_valid_id", "node_models",
    "node_type", "register",
]
