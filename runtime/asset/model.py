"""The workflow asset model: one agent's node graph.

Each node type is one module of ``runtime.nodes`` and one entry of its registry
(``runtime.nodes.NODE_TYPES``, plugins included); ``Node`` is the discriminated union over
``type`` built from that table, and rebuilt when a type is registered later (a plugin that
imports this module while the registry is loading it). Field order is the order keys are written in a saved file,
so keep new fields at the end of their model to keep diffs small. Field descriptions are
the help text the editor shows as tooltips, and ``json_schema_extra["group"]`` says which
section of the properties dock a field belongs in.

Unknown keys are rejected (a typo such as ``max_token`` is an error naming the node and
field), except inside the free-form ``metadata`` objects, which are kept as they are.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator

from runtime.names import FreeFormData
from runtime.nodes import (
    END,
    ID_PATTERN,
    NODE_TYPES,  # the registry's own table (name -> NodeType), not a copy
    SLOT_PATTERN,
    TOKENS_PER_MESSAGE,
    Attribute,
    ClassifyAttributes,
    ClassifyIntent,
    FieldError,
    Generate,
    GenerateAndSpeak,
    GeneratingNode,
    Intent,
    KnowledgeEntry,
    ModelParams,
    NodeBase,
    NodeType,
    Retrieve,
    SamplingParams,
    Strict,
    Summarize,
    Tool,
    ToolCall,
    VariableValue,
    field_help,
    is_valid_id,
    load_plugins,
    node_model,
    node_models,
    when_registered,
)
from runtime.nodes.base import within_canvas
from runtime.prompting.language import OPTIONAL_LANGUAGE_TAG, language_tag_problem

ASSET_VERSION = 2  # 2: comments (backdrops and notes) and bypassed nodes
_help = field_help
DoubleText = Literal["queue", "reject", "latest_wins", "interrupt"]


def _node_union() -> Any:
    return Annotated[Union[node_models()], Field(discriminator="type")]  # noqa: UP007 - built from the registry


Node = _node_union()

__all__ = [
    "ASSET_VERSION", "END", "ID_PATTERN", "NODE_TYPES", "SLOT_PATTERN", "TOKENS_PER_MESSAGE", "Asset", "Attribute",
    "ClassifyAttributes", "ClassifyIntent", "Comment", "FieldError", "GameEvent", "Generate", "GenerateAndSpeak", "GeneratingNode",
    "Intent", "KnowledgeEntry", "ModelParams", "Node", "NodeBase", "Retrieve", "SamplingParams", "Strict",
    "Summarize", "Tool", "ToolCall", "VariableValue", "is_valid_id", "new_node", "palette_node",
]


# Backdrops and notes an asset may hold: each is drawn as its own item, and 100,000 took over 3
# minutes to open; a canvas with more is no longer readable anyway.
MAX_COMMENTS = 2_000


class Comment(Strict):
    """A comment on the canvas: a backdrop (a titled, coloured rectangle; the nodes inside it move
    with it) or a note (free text). Comments are layout only: never run, never part of a prompt."""

    id: str = Field(pattern=ID_PATTERN, **_help("Stable id, unique among the asset's comments."))
    kind: Literal["backdrop", "note"] = Field(**_help("A backdrop groups the nodes inside it; a note holds free text."))
    title: str = Field("", **_help("The backdrop's title (a note may have one too)."))
    text: str = Field("", **_help("Free text."))
    color: tuple[int, int, int] = Field((60, 70, 90), **_help("Red, green and blue, 0-255 each.", "Layout"))
    position: tuple[float, float] = Field((0.0, 0.0), **_help("Top-left corner on the editor canvas.", "Layout"))
    size: tuple[float, float] = Field((400.0, 240.0), **_help("Width and height on the canvas, above 0.", "Layout"))
    metadata: FreeFormData = Field(default_factory=dict, **_help("Free-form data kept as it is.", "Layout"))

    @field_validator("color")
    @classmethod
    def _color_channels(cls, v: tuple[int, int, int]) -> tuple[int, int, int]:
        if any(not 0 <= c <= 255 for c in v):
            raise ValueError(f"each colour channel is 0-255, not {list(v)}")
        return v

    @field_validator("size")
    @classmethod
    def _positive_size(cls, v: tuple[float, float]) -> tuple[float, float]:
        if any(not d > 0 for d in v):
            raise ValueError(f"width and height must be above 0, not {list(v)}")
        return within_canvas(v, "size")

    @field_validator("position")
    @classmethod
    def _on_the_canvas(cls, v: tuple[float, float]) -> tuple[float, float]:
        return within_canvas(v)

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return cls(id=f"comment_{number}", kind="note").model_dump()


class GameEvent(Strict):
    """A node or exit whose outcome the game acts on (a quest step, a reward, a price): validation
    warns when a player can reach it on their word alone, and red-team runs measure attacks on it."""

    name: str = Field(pattern=SLOT_PATTERN, description="What the game does there, as one word (quest_complete, reward, discount).")
    node: str = Field(pattern=ID_PATTERN, description="The node: the event happens when it runs, or when it takes Exit.")
    exit: str = Field("", description="One of the node's exits (its port: default_exit, intent:NAME, policy:NAME). Empty: when the node runs.")

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"name": f"event_{number}", "node": "node", "exit": ""}


class Asset(Strict):
    """One agent: its settings and its node graph."""

    version: int = Field(ASSET_VERSION, description="Format version; older files are migrated on load.")
    name: str = Field("Untitled agent", **_help("The agent's name."))
    default_model: str = Field("", **_help("Model file every node with an empty Model Name uses: a path, or a file name in the models folder.", "Model"))
    start_node: str = Field("", **_help("The node every turn starts at."))
    variables: dict[str, VariableValue] = Field(default_factory=dict, **_help("Agent variables and their initial values; templates read them as {{vars.NAME}}."))
    enable_diagnostics: bool = Field(True, **_help("Record each turn's diagnostics (prompts, budgets, trims, timings)."))
    max_steps_per_turn: int = Field(32, ge=1, le=10_000, **_help("Node runs allowed in one turn before it stops with an error (catches runaway loops)."))
    double_text: DoubleText = Field("queue", **_help(
        "When the player speaks again while the NPC is still answering (parley serve): queue answers each line in "
        "turn; reject refuses the new line (409 busy); latest_wins stops the reply and drops it with its line, then "
        "answers the new line; interrupt stops the reply, keeps the line and what was said of the reply (cut off), "
        "then answers the new line.", "Serving"))
    game_events: list[GameEvent] = Field(default_factory=list, **_help(
        "The nodes and exits whose outcome the game acts on (a quest step, a reward, a price). Validation warns when "
        "a player can reach one on their word alone; parley test --red-team measures attacks on each.", "Game"))
    reply_tags: list[str] = Field(default_factory=list, **_help(
        "Slots the game gets with each reply, for an emotion or an animation (mood, gesture): a Classify Attributes "
        "node fills them from its allowed values. parley serve sends a tag event as soon as a node writes one, "
        "before the reply's words, and the finished turn lists them.", "Game"))
    language: str = Field("", **_help(
        "The language the agent speaks, as a BCP 47 tag (de, fr, pt-BR). Its Generate and Generate and Speak "
        "nodes' system prompts end with \"Answer in German.\", and templates read {{language}} (German) and "
        "{{language_tag}} (de). Empty: the prompts say nothing about language.", pattern=OPTIONAL_LANGUAGE_TAG))
    metadata: FreeFormData = Field(default_factory=dict, **_help("Free-form data kept as it is.", "Layout"))
    nodes: list[Node] = Field(default_factory=list)
    comments: list[Comment] = Field(default_factory=list, max_length=MAX_COMMENTS, **_help("Backdrops and notes on the canvas; never sent to a model.", "Layout"))

    @field_validator("variables")
    @classmethod
    def _variable_names(cls, v: dict[str, VariableValue]) -> dict[str, VariableValue]:
        bad = [k for k in v if not re.fullmatch(SLOT_PATTERN, k)]
        if bad:
            raise ValueError(f"variable names must be identifiers: {', '.join(map(repr, bad))}")
        return v

    @field_validator("language")
    @classmethod
    def _language_tag(cls, v: str) -> str:
        problem = language_tag_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("reply_tags")
    @classmethod
    def _tag_names(cls, v: list[str]) -> list[str]:
        for index, name in enumerate(v):
            if not re.fullmatch(SLOT_PATTERN, name):
                raise FieldError(str(index), f"reply tag {name!r} is not a slot name (letters, digits and _)")
            if name in v[:index]:
                raise FieldError(str(index), f"reply tag {name!r} is listed twice")
        return v

    @field_validator("comments")
    @classmethod
    def _unique_comment_ids(cls, v: list[Comment]) -> list[Comment]:
        seen: set[str] = set()
        for index, comment in enumerate(v):
            if comment.id in seen:
                raise FieldError(f"{index}.id", f"comment id {comment.id!r} is used by an earlier comment; "
                                 "comment ids must be unique")
            seen.add(comment.id)
        return v

    def node(self, node_id: str) -> NodeBase:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def node_ids(self) -> list[str]:
        return [n.id for n in self.nodes]

    def model_source(self, own: str, field: str = "model_name") -> tuple[str, str]:
        """The model file of a node that names ``own`` in its ``field``, and the field it is set in:
        ``(own, field)``, or the agent's ``(default_model, "default_model")`` when ``own`` is empty.
        The one place that says a node's empty model name means the agent's default."""
        return (own, field) if own else (self.default_model, "default_model")

    def model_for(self, node: NodeBase) -> str:
        """The model file a model-backed node uses ('' when neither it nor the agent names one)."""
        return self.model_source(node.model_name if isinstance(node, ModelParams) else "")[0]


def new_node(type_name: str, node_id: str, **fields: Any) -> NodeBase:
    """A node of ``type_name`` with its field defaults (what a file that omits a field means)."""
    return node_model(type_name)(id=node_id, **fields)


def palette_node(type_name: str, node_id: str, **fields: Any) -> NodeBase:
    """A node the designer adds (the editor's palette, Add menu, Tab search): the field defaults
    with the type's ``NEW_NODE_FIELDS`` over them, then ``fields``."""
    model = node_model(type_name)
    return model(id=node_id, **{**model.NEW_NODE_FIELDS, **fields})


def _add_to_union(entry: NodeType) -> None:
    global Node
    Node = _node_union()
    Asset.model_fields["nodes"].annotation = list[Node]
    Asset.model_rebuild(force=True)


when_registered(_add_to_union)
load_plugins()  # a plugin that waited for this module to finish importing is added now

