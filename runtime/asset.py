"""The workflow asset model: one agent's node graph.

Every node type is one pydantic model; ``Node`` is the discriminated union over
``type``. Field order is the order keys are written in a saved file, so keep new
fields at the end of their model to keep diffs small. Field descriptions are the
help text the editor shows as tooltips, and ``json_schema_extra["group"]`` says
which section of the properties dock a field belongs in.

Unknown keys are rejected (a typo such as ``max_token`` is an error naming the
node and field), except inside the free-form ``metadata`` objects, which are kept
as they are.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.resources import default_prompt

ASSET_VERSION = 1
END = ""  # an exit that names no node ends the turn
ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
SLOT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
TOKENS_PER_MESSAGE = 8  # role headers and end-of-turn markers, as the spec counts them

_ID = re.compile(ID_PATTERN)


class FieldError(ValueError):
    """A cross-field constraint broken; ``field`` names the field the error belongs to."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


def _help(text: str, group: str = "General", **extra: Any) -> dict[str, Any]:
    return {"description": text, "json_schema_extra": {"group": group, **extra}}


# --- shared parameter blocks -------------------------------------------------------------------

HistoryRole = Literal["assistant", "none"]
Placement = Literal["before", "after"]
HistoryMode = Literal["full", "summarized", "last_n", "none"]
Disposition = Literal["replay", "omit"]


class NodeBase(Strict):
    id: str = Field(pattern=ID_PATTERN, **_help("Stable id; exits and diagnostics refer to the node by it."))
    title: str = Field("", **_help("Name shown on the canvas. Empty shows the id."))
    position: tuple[float, float] = Field((0.0, 0.0), **_help("Position on the editor canvas.", "Layout"))
    metadata: dict[str, Any] = Field(
        default_factory=dict, **_help("Free-form data kept as it is (tools may store notes here).", "Layout")
    )

    def exits(self) -> dict[str, str]:
        """Port name -> target node id ('' is END), in display order."""
        return {}

    def uses_model(self) -> bool:
        return False

    @property
    def display_title(self) -> str:
        return self.title or self.id


class ModelParams(Strict):
    """Parameters every node that calls a language model has."""

    model_name: str = Field(
        "", **_help("Model file for this node. Empty uses the agent's default model.", "Model")
    )
    context_size: int = Field(
        0,
        ge=0,
        le=1_048_576,
        **_help("This node's context window in tokens. 0 uses the model's own size. Fixed for the agent's lifetime.", "Model"),
    )


class SamplingParams(Strict):
    temperature: float = Field(0.7, ge=0.0, le=2.0, **_help("Sampling temperature; 0 always picks the likeliest token.", "Sampling"))
    top_p: float = Field(0.95, gt=0.0, le=1.0, **_help("Nucleus sampling: keep the smallest set of tokens whose probability reaches this.", "Sampling"))
    seed: int = Field(-1, ge=-1, **_help("Random seed; -1 picks a new one every call, 0 or more repeats replies.", "Sampling"))


class GeneratingNode(NodeBase, ModelParams, SamplingParams):
    """Generate, GenerateAndSpeak and ToolCall: nodes that build a prompt from the dialog history."""

    system_prompt: str = Field("", **_help("The node's instructions; never trimmed, so every token comes out of the history budget.", "Prompt", mustache=False, multiline=True))
    max_tokens: int = Field(256, ge=1, **_help("Tokens kept free for the answer. Must be below Context Size; the rest is the prompt budget.", "Model"))
    history_role: HistoryRole = Field("assistant", **_help("assistant: later turns see this node's output. none: its output is never replayed (a hidden reasoning step).", "History"))
    input: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$", **_help("Slot read as the current turn's line. Empty reads the player's line.", "Prompt"))
    template: str = Field("", **_help("Mustache template framing the current turn: {{instructions}}, {{#knowledge}}{{text}}{{/knowledge}}, {{slots.NAME}}, {{vars.NAME}}, {{input}}.", "Prompt", mustache=True, multiline=True))
    placement: Placement = Field("before", **_help("Whether the rendered template goes before or after the player's line.", "Prompt"))
    history_mode: HistoryMode = Field("full", **_help("full: all history that fits the budget. summarized: the summary plus the last History Window entries. last_n: exactly the last History Window entries. none: no history.", "History"))
    history_window: int = Field(8, ge=1, le=10_000, **_help("Entries (player lines, replies, tool pairs count as one each) kept by the summarized and last_n modes.", "History"))
    default_exit: str = Field(END, **_help("Node that runs next. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    def uses_model(self) -> bool:
        return True

    @model_validator(mode="after")
    def _max_tokens_below_context(self) -> GeneratingNode:
        if self.context_size and self.max_tokens >= self.context_size:
            raise FieldError(
                "max_tokens", f"max_tokens ({self.max_tokens}) must be less than context_size ({self.context_size})"
            )
        return self


class Generate(GeneratingNode):
    type: Literal["Generate"] = "Generate"


class GenerateAndSpeak(GeneratingNode):
    type: Literal["GenerateAndSpeak"] = "GenerateAndSpeak"


class Tool(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="Name the model calls the tool by.")
    description: str = Field("", description="What the tool does; shown to the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the call's arguments (an object schema).",
    )
    mock_result: str | None = Field(
        None, description="Result used in test conversations. Null asks the caller (the editor asks the designer)."
    )

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError("a tool's parameters must be a JSON Schema with type 'object'")
        props = v.get("properties", {})
        if not isinstance(props, dict):
            raise ValueError("'properties' must be an object mapping names to schemas")
        return v


class ToolCall(GeneratingNode):
    type: Literal["ToolCall"] = "ToolCall"
    tools: list[Tool] = Field(default_factory=list, **_help("Tools the model may call; one call per turn, constrained to a declared tool and its schema.", "Tools"))
    disposition: Disposition = Field("replay", **_help("replay: later turns see the call and its result as a pair. omit: they see neither.", "History"))

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, v: list[Tool]) -> list[Tool]:
        names = [t.name for t in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tool names must be unique; repeated: {', '.join(dupes)}")
        return v


class Summarize(NodeBase, ModelParams, SamplingParams):
    type: Literal["Summarize"] = "Summarize"
    context_size: int = Field(2048, ge=0, le=1_048_576, **_help("The summarizer's own context window (its own KV cache). 0 uses the model's size.", "Model"))
    temperature: float = Field(0.2, ge=0.0, le=2.0, **_help("Sampling temperature; low keeps summaries factual.", "Sampling"))
    trigger_tokens: int = Field(1024, ge=0, **_help("Fold when the turns not yet summarized reach this many tokens. Set it below the budget of the node that answers. 0 turns the token trigger off.", "Folding"))
    trigger_turns: int = Field(0, ge=0, **_help("Fold when this many turns are not yet summarized (for tests and authored pacing). 0 turns it off.", "Folding"))
    keep_recent_turns: int = Field(3, ge=0, **_help("The latest turns that are never folded and always replay word for word. Below 2 the character paraphrases what just happened.", "Folding"))
    max_summary_tokens: int = Field(256, ge=1, **_help("Hard cap on a summary's length; cuts mid-word. Must be at least 64 below Context Size.", "Folding"))
    system_prompt: str = Field(default_factory=lambda: default_prompt("summarize_system"), **_help("Instructions for the summarizer.", "Prompt", multiline=True))
    template: str = Field(default_factory=lambda: default_prompt("summarize_template"), **_help("Mustache template of the fold request: {{previous_summary}}, {{transcript}}, {{max_words}}.", "Prompt", mustache=True, multiline=True))
    notify_client: bool = Field(False, **_help("Emit a 'summarized' event with covered_through, folded_turns, summary_chars and the text.", "Folding"))
    default_exit: str = Field(END, **_help("Node that runs next. Empty ends the turn (the usual place: Summarize runs last).", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    def uses_model(self) -> bool:
        return True

    @model_validator(mode="after")
    def _room_for_prompt(self) -> Summarize:
        if self.trigger_tokens == 0 and self.trigger_turns == 0:
            raise FieldError("trigger_tokens", "set trigger_tokens or trigger_turns above 0, or the node never folds")
        if self.context_size and self.max_summary_tokens > self.context_size - 64:
            raise FieldError(
                "max_summary_tokens",
                f"max_summary_tokens ({self.max_summary_tokens}) must be at least 64 below "
                f"context_size ({self.context_size}) to leave room for the prompt"
            )
        return self


class Intent(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="Label the classifier answers with.")
    description: str = Field("", description="What lines with this intent look like; shown to the model.")
    exit: str = Field(END, description="Node that runs when this intent is chosen. Empty ends the turn.")


class ClassifyIntent(NodeBase, ModelParams):
    type: Literal["ClassifyIntent"] = "ClassifyIntent"
    context_size: int = Field(2048, ge=0, le=1_048_576, **_help("The classifier's own context window. 0 uses the model's size.", "Model"))
    system_prompt: str = Field(default_factory=lambda: default_prompt("classify_intent_system"), **_help("Instructions for the classifier.", "Prompt", multiline=True))
    input: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$", **_help("Slot to classify. Empty classifies the player's line.", "Prompt"))
    intents: list[Intent] = Field(default_factory=list, **_help("The labels the classifier may choose, each with its exit.", "Intents"))
    slot: str = Field("intent", pattern=SLOT_PATTERN, **_help("Slot the chosen intent's name is written to.", "Intents"))
    fallback_exit: str = Field(END, **_help("Node that runs when classification fails. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        out = {f"intent:{i.name}": i.exit for i in self.intents}
        out["fallback_exit"] = self.fallback_exit
        return out

    def uses_model(self) -> bool:
        return True

    @field_validator("intents")
    @classmethod
    def _unique_intents(cls, v: list[Intent]) -> list[Intent]:
        names = [i.name for i in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"intent names must be unique; repeated: {', '.join(dupes)}")
        return v


class Attribute(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="Attribute name shown to the model.")
    description: str = Field("", description="What the attribute means; shown to the model.")
    values: list[str] = Field(min_length=1, description="Allowed values; the output is always one of them.")
    slot: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$", description="Slot the value is written to. Empty uses the attribute's name.")

    @property
    def target_slot(self) -> str:
        return self.slot or self.name

    @field_validator("values")
    @classmethod
    def _unique_values(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("allowed values must be unique")
        if any(not s.strip() for s in v):
            raise ValueError("allowed values must not be empty")
        return v


class ClassifyAttributes(NodeBase, ModelParams):
    type: Literal["ClassifyAttributes"] = "ClassifyAttributes"
    context_size: int = Field(2048, ge=0, le=1_048_576, **_help("The classifier's own context window. 0 uses the model's size.", "Model"))
    system_prompt: str = Field(default_factory=lambda: default_prompt("classify_attributes_system"), **_help("Instructions for the classifier.", "Prompt", multiline=True))
    input: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$", **_help("Slot to read. Empty reads the player's line.", "Prompt"))
    attributes: list[Attribute] = Field(default_factory=list, **_help("Attributes to fill, each with its allowed values and slot.", "Attributes"))
    default_exit: str = Field(END, **_help("Node that runs next. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    def uses_model(self) -> bool:
        return True

    @field_validator("attributes")
    @classmethod
    def _unique_attributes(cls, v: list[Attribute]) -> list[Attribute]:
        names = [a.name for a in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"attribute names must be unique; repeated: {', '.join(dupes)}")
        return v


class KnowledgeEntry(Strict):
    id: str = Field("", description="Optional id shown in diagnostics.")
    text: str = Field(min_length=1, description="The fact, as the model should read it.")


class Retrieve(NodeBase):
    type: Literal["Retrieve"] = "Retrieve"
    entries: list[KnowledgeEntry] = Field(default_factory=list, **_help("Knowledge written in the asset.", "Knowledge"))
    source_file: str = Field("", **_help("A .jsonl (one {\"text\": ...} per line) or .txt (one entry per paragraph) file beside the asset.", "Knowledge"))
    query: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$", **_help("Slot used as the search query. Empty uses the player's line.", "Knowledge"))
    top_k: int = Field(3, ge=1, le=100, **_help("How many entries to retrieve.", "Knowledge"))
    slot: str = Field("knowledge", pattern=SLOT_PATTERN, **_help("Where the entries go; templates read them as {{#knowledge}}{{text}}{{/knowledge}}.", "Knowledge"))
    embedding_model: str = Field("", **_help("An embedding GGUF to rank by similarity. Empty ranks with BM25.", "Knowledge"))
    default_exit: str = Field(END, **_help("Node that runs next. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}


Node = Annotated[
    Generate | GenerateAndSpeak | ToolCall | Summarize | ClassifyIntent | ClassifyAttributes | Retrieve,
    Field(discriminator="type"),
]
NODE_TYPES: dict[str, type[NodeBase]] = {
    cls.model_fields["type"].default: cls
    for cls in (Generate, GenerateAndSpeak, ToolCall, Summarize, ClassifyIntent, ClassifyAttributes, Retrieve)
}
GENERATING_TYPES = ("Generate", "GenerateAndSpeak", "ToolCall")
PLAYER_FACING_TYPES = ("Generate", "GenerateAndSpeak")

VariableValue = bool | int | float | str


class Asset(Strict):
    """One agent: its settings and its node graph."""

    version: int = Field(ASSET_VERSION, description="Format version; older files are migrated on load.")
    name: str = Field("Untitled agent", **_help("The agent's name."))
    default_model: str = Field("", **_help("Model file every node with an empty Model Name uses: a path, or a file name in the models folder.", "Model"))
    start_node: str = Field("", **_help("The node every turn starts at."))
    variables: dict[str, VariableValue] = Field(default_factory=dict, **_help("Agent variables and their initial values; templates read them as {{vars.NAME}}."))
    enable_diagnostics: bool = Field(True, **_help("Record each turn's diagnostics (prompts, budgets, trims, timings)."))
    max_steps_per_turn: int = Field(32, ge=1, le=10_000, **_help("Node runs allowed in one turn before it stops with an error (catches runaway loops)."))
    metadata: dict[str, Any] = Field(default_factory=dict, **_help("Free-form data kept as it is.", "Layout"))
    nodes: list[Node] = Field(default_factory=list)

    @field_validator("variables")
    @classmethod
    def _variable_names(cls, v: dict[str, VariableValue]) -> dict[str, VariableValue]:
        bad = [k for k in v if not re.match(SLOT_PATTERN, k)]
        if bad:
            raise ValueError(f"variable names must be identifiers: {', '.join(map(repr, bad))}")
        return v

    def node(self, node_id: str) -> NodeBase:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def node_ids(self) -> list[str]:
        return [n.id for n in self.nodes]

    def model_for(self, node: NodeBase) -> str:
        """The model file a model-backed node uses."""
        return getattr(node, "model_name", "") or self.default_model


def new_node(type_name: str, node_id: str, **fields: Any) -> NodeBase:
    """A node of ``type_name`` with its defaults (the editor's palette and tests use this)."""
    return NODE_TYPES[type_name](id=node_id, **fields)


def is_valid_id(text: str) -> bool:
    return bool(_ID.match(text))
