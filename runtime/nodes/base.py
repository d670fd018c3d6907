"""What every node type is built on: the node model's base, the shared parameter blocks, and
the names exits and ids follow.

A node type is a pydantic model deriving from ``NodeBase``. The model says what the node
stores (its fields, with their help text and properties-dock group), which exits it has
(``exits``, ``exit_field``, ``exit_label``), how it runs (``run``), what validation checks
it adds (``check``, ``check_in_graph``) and what it costs in memory (``model_uses``). The
agent, the validator, the estimator and the editor call these and never test for a type.

Capabilities other nodes ask about are class attributes (``PLAYER_FACING``,
``WRITES_SUMMARY``, ``RUNTIME_SYSTEM_PROMPT``) or mixins (``ModelParams``), not type names.
"""

from __future__ import annotations

import functools
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.backends.base import REPEAT_LAST_N
from runtime.names import (
    ID_PATTERN,
    OPTIONAL_SLOT_PATTERN,
    SLOT_PATTERN,
    FreeFormData,
    VariableValue,
    without_surrogates,
)
from runtime.prompting.budget import TOKENS_PER_MESSAGE

if TYPE_CHECKING:  # pragma: no cover
    from runtime.models.journal import DecodeJournal
    from runtime.nodes.checks import NodeChecks
    from runtime.nodes.running import NodeRun

END = ""  # an exit that names no node ends the turn

__all__ = [
    "END",
    "ID_PATTERN",
    "OPTIONAL_SLOT_PATTERN",
    "REPEAT_LAST_N",
    "SLOT_PATTERN",
    "TOKENS_PER_MESSAGE",
    "FieldError",
    "ModelParams",
    "ModelUse",
    "NodeBase",
    "SamplingParams",
    "Strict",
    "VariableValue",
    "field_help",
    "is_valid_id",
    "replies_checked",
]


class FieldError(ValueError):
    """A cross-field constraint broken; ``field`` names the field the error belongs to. A lone
    surrogate quoted from the value is written as U+FFFD (pydantic encodes messages as UTF-8)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(without_surrogates(message))
        self.field = field


def _number_check(annotation: Any) -> tuple[bool, bool] | None:
    """How ``Strict`` checks a field: (a number field, True is a value of it) for numbers and
    optional numbers, (a tuple of numbers, False) for positions; None for anything else."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (int, float):
        return True, False
    if origin in (typing.Union, types.UnionType) and any(a in (int, float) for a in args):
        return True, bool in args
    if origin is tuple and args and all(a in (int, float) or a is Ellipsis for a in args):
        return False, False
    return None


def _refused_number(value: Any, name: str) -> str:
    if type(value) is bool:
        return f"{name} must be a number, not {str(value).lower()}"
    if type(value) is float and not math.isfinite(value):
        return f"{name} must be a finite number, not {value}"
    return ""


class Strict(BaseModel):
    """Base of every asset model: unknown keys are errors, assignments are validated, and number
    fields refuse true/false and NaN or infinity however the model is built (from a file, which
    asset_file checks first, or from Python objects: a paste, the editor, a plugin, a test)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_or_nan_numbers(cls, data: Any) -> Any:
        # A model validator, not a field one: it also sees assignments (the whole record, with the
        # new value), and a "before" field validator may not touch a discriminator ('type').
        if isinstance(data, dict):
            for name, (number, bool_allowed) in _number_checks(cls).items():
                value = data.get(name)
                if number:
                    message = "" if bool_allowed and type(value) is bool else _refused_number(value, name)
                elif type(value) in (tuple, list):
                    message = next((m for m in (_refused_number(v, name) for v in value) if m), "")
                else:
                    message = ""
                if message:
                    raise FieldError(name, message)
        return data

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        """What the ``number``-th new record of this model starts as in a list editor (a value the
        model accepts; records with required fields override this)."""
        return cls().model_dump()


@functools.cache
def _number_checks(model: type[BaseModel]) -> dict[str, tuple[bool, bool]]:
    checks = {name: _number_check(info.annotation) for name, info in model.model_fields.items()}
    return {name: check for name, check in checks.items() if check is not None}


def field_help(text: str, group: str = "General", **extra: Any) -> dict[str, Any]:
    """A field's help text (the editor's tooltip) and its group in the properties dock."""
    return {"description": text, "json_schema_extra": {"group": group, **extra}}


@dataclass(frozen=True)
class ModelUse:
    """One context a node keeps on a model: what the estimator sizes and the editor holds fixed."""

    model_name: str  # as the node names it; '' uses the agent's default model
    context_size: int  # 0 uses the model's own size
    field: str = "model_name"  # the node field the model is set in


def context_zero_text(trained: int | None) -> str:
    """What a Context Size of 0 stands for, as the editor and the command line show it."""
    return f"0 = the model's own ({trained:,})" if trained else "0 = the model's own"


class ModelParams(Strict):
    """Parameters every node that calls a language model has."""

    model_name: str = Field(
        "", **field_help("Model file for this node. Empty uses the agent's default model.", "Model")
    )
    context_size: int = Field(
        0,
        ge=0,
        le=1_048_576,
        **field_help("This node's context window in tokens. 0 uses the model's own size. Fixed for the agent's lifetime.", "Model"),
    )


class AnswerInContext(Strict):
    """A model-backed node whose answer shares its context with the prompt: ``ANSWER_FIELD`` tokens of
    ``context_size`` are kept for the answer, and at least ``PROMPT_ROOM`` must stay for the prompt.
    List it before ``NodeBase`` so its ``field_limits`` is the node's."""

    ANSWER_FIELD: ClassVar[str] = "max_tokens"
    PROMPT_ROOM: ClassVar[int] = 1

    def field_limits(self) -> dict[str, int | None]:
        context = getattr(self, "context_size", 0)
        return {self.ANSWER_FIELD: context - self.PROMPT_ROOM if context else None}

    @model_validator(mode="after")
    def _room_for_prompt(self) -> AnswerInContext:
        context, answer = getattr(self, "context_size", 0), getattr(self, self.ANSWER_FIELD)
        if context and answer > context - self.PROMPT_ROOM:
            below = ("less than" if self.PROMPT_ROOM == 1 else f"at least {self.PROMPT_ROOM} below")
            why = "" if self.PROMPT_ROOM == 1 else " to leave room for the prompt"
            raise FieldError(self.ANSWER_FIELD, f"{self.ANSWER_FIELD} ({answer}) must be {below} "
                                                f"context_size ({context}){why}")
        return self


class SamplingParams(Strict):
    temperature: float = Field(0.7, ge=0.0, le=2.0, **field_help("Sampling temperature; 0 always picks the likeliest token.", "Sampling"))
    top_p: float = Field(0.95, gt=0.0, le=1.0, **field_help("Nucleus sampling: keep the smallest set of tokens whose probability reaches this.", "Sampling"))
    min_p: float = Field(0.05, ge=0.0, lt=1.0, **field_help("Drop tokens whose probability is below this fraction of the likeliest token's (llama.cpp's min-p); 0 turns it off. Only at a temperature above 0.", "Sampling"))
    # 1.0 (off) is what a node without the field had before the field existed; new nodes start at
    # NEW_NODE_FIELDS' 1.1 (runtime.nodes.generate).
    repeat_penalty: float = Field(1.0, ge=1.0, le=2.0, **field_help(f"Make tokens used in the last {REPEAT_LAST_N} tokens (prompt and reply) less likely: 1.0 is off, 1.1 is mild. Stops a reply from looping one phrase up to Max Tokens.", "Sampling"))
    seed: int = Field(1, ge=-1, **field_help("Random seed. A fixed seed (0 or more, the default) repeats replies, so a replay on the same build gives the same replies; -1 picks a new one every call. The Conversation dock can re-roll every seed at once.", "Sampling"))


# How far from the canvas's origin a node or comment may be, and how large a comment, in canvas units
# (a node is about 300 wide): an asset at 1e308 validated, then crashed the editor (SIGSEGV in Qt's
# drawing, whose sums of such numbers overflow).
CANVAS_EXTENT = 1e8


def within_canvas(pair: tuple[float, float], what: str = "position") -> tuple[float, float]:
    """``pair`` when both numbers are within ``CANVAS_EXTENT``; a ValueError naming the limit else."""
    if any(abs(x) > CANVAS_EXTENT for x in pair):
        raise ValueError(f"a {what} on the canvas is within {CANVAS_EXTENT:g} of 0, not {list(pair)}")
    return pair


class NodeBase(Strict):
    id: str = Field(pattern=ID_PATTERN, **field_help("Stable id; exits and diagnostics refer to the node by it."))
    title: str = Field("", **field_help("Name shown on the canvas. Empty shows the id."))
    position: tuple[float, float] = Field((0.0, 0.0), **field_help("Position on the editor canvas.", "Layout"))
    metadata: FreeFormData = Field(
        default_factory=dict, **field_help("Free-form data kept as it is (tools may store notes here).", "Layout")
    )
    bypassed: bool = Field(False, **field_help(
        "Bypassed (Ctrl+B): the turn passes straight along the node's default exit without running it."))

    @field_validator("position")
    @classmethod
    def _on_the_canvas(cls, v: tuple[float, float]) -> tuple[float, float]:
        return within_canvas(v)

    # Its replies are what the player hears (the turn's reply; a Summarize node before it delays it).
    PLAYER_FACING: ClassVar[bool] = False
    # It writes the rolling summary that nodes with history_mode 'summarized' read.
    WRITES_SUMMARY: ClassVar[bool] = False
    # The test conversation streams its output as it is generated (replies, tool calls).
    STREAMS_TO_CHAT: ClassVar[bool] = False
    # Its system prompt can be changed between turns (Agent.set_system_prompt).
    RUNTIME_SYSTEM_PROMPT: ClassVar[bool] = False
    # Fields written to a file only when set (not empty, not false): fields added to the type later,
    # so that files saved before them save unchanged.
    WRITTEN_WHEN_SET: ClassVar[tuple[str, ...]] = ()
    # The game answers it as it runs (a Tool Call's result comes from the game): what follows is
    # grounded in the game's state, not in the player's word (``Asset.game_events``).
    ASKS_THE_GAME: ClassVar[bool] = False
    # Its ``check`` reads files (a knowledge file), so it runs on every validation; other types'
    # ``check`` results are kept while the node is unchanged (``runtime.asset.validation.Validator``).
    CHECK_READS_FILES: ClassVar[bool] = False
    # What a node added in the editor starts with beyond the field defaults. The field defaults are
    # what a file without the field means, so they stay as they were; better starting values go here.
    NEW_NODE_FIELDS: ClassVar[dict[str, Any]] = {}

    @property
    def type_name(self) -> str:
        return type(self).model_fields["type"].default

    @property
    def display_title(self) -> str:
        return self.title or self.id

    def speaks(self) -> bool:
        """Whether its output is also spoken aloud as it is written (Generate and Speak). A
        player-facing node that does not speak is only shown to the player as text."""
        return False

    def guards_the_line(self) -> bool:
        """Whether this node checks the player's line against rules before the graph answers (a line
        guard): red-team runs measure its false positives by running it alone on benign lines."""
        return False

    def slots_written(self) -> list[str]:
        """The slots a run of it may write (its output goes to the slot named by its id): what
        ``Asset.reply_tags`` may name."""
        return [self.id]

    def checks_reply_of(self) -> str:
        """The node whose reply this node checks before the player sees it (a Guard on that node's
        slot), or ''. The agent holds that node's tokens and sentences back until this node runs."""
        return ""

    # --- exits ------------------------------------------------------------------------------

    def exits(self) -> dict[str, str]:
        """Port name -> target node id ('' is END), in display order."""
        return {}

    def exit_field(self, port: str) -> str:
        """Where exit ``port`` is stored, as a dotted field path ('default_exit', 'intents.2.exit').
        Raises KeyError for a port the node does not have."""
        if port not in self.exits():
            raise KeyError(port)
        return port

    def bypass_port(self) -> str:
        """The port a bypassed node passes the turn along: its default exit, else its fallback exit,
        else its first port; '' for a node without exits (the turn ends there)."""
        ports = list(self.exits())
        return next((p for p in ("default_exit", "fallback_exit") if p in ports), ports[0] if ports else "")

    def exit_label(self, port: str) -> str:
        """The text the canvas shows beside exit ``port``."""
        return {"default_exit": "next", "fallback_exit": "fallback"}.get(port, port)

    def exit_line_kind(self, port: str) -> str:
        """The kind of player line that takes exit ``port``, in the graph's words ('' when the node
        cannot say); simulated players in guided mode are asked for such lines."""
        return ""

    def with_exits(self, targets: dict[str, str]) -> NodeBase:
        """A copy of this node with the exits in ``targets`` (port -> node id) pointed anew."""
        raw = self.model_dump()
        for port, target in targets.items():
            *path, last = self.exit_field(port).split(".")
            holder: Any = raw
            for key in path:
                holder = holder[int(key)] if isinstance(holder, list) else holder[key]
            holder[last] = target
        return type(self).model_validate(raw)

    # --- models -----------------------------------------------------------------------------

    def uses_model(self) -> bool:
        return isinstance(self, ModelParams)

    def model_uses(self) -> list[ModelUse]:
        """The contexts this node keeps on models (the estimator sizes one per entry)."""
        if isinstance(self, ModelParams):
            return [ModelUse(self.model_name, self.context_size)]
        return []

    def history_budget(self, model_context: int | None) -> int | None:
        """The prompt budget this node fits replayed history into, or None if it replays none (a
        Summarize node warns when it would fold only after such a node has trimmed)."""
        return None

    def field_limits(self) -> dict[str, int | None]:
        """Upper bounds one field puts on another (the editor narrows its spin boxes to them)."""
        return {}

    # --- behaviour --------------------------------------------------------------------------

    def run(self, run: NodeRun) -> str:
        """Run the node for this turn; return the port taken. Raise ``TurnError`` to fail the turn."""
        raise NotImplementedError(f"node type {self.type_name} does not say how it runs")

    def read_ahead(self, run: NodeRun, line: str) -> DecodeJournal | None:
        """Between turns (``Agent.warm``): read what this node's next prompt starts with into its
        cache, ``line`` being the start of the next turn's line where it is known; returns its decode
        journal after, or None (the default: a node that reads nothing ahead)."""
        return None

    def check(self, checks: NodeChecks) -> None:
        """Report this node's own problems (``checks.error`` / ``checks.warning``): from its own fields
        only (and ``checks.asset_dir``), since the editor keeps the result while the node is unchanged.
        A rule that reads files sets ``CHECK_READS_FILES``; one that needs other nodes or the model
        files belongs in ``check_in_graph``."""

    def check_in_graph(self, checks: NodeChecks) -> None:
        """Report problems that depend on the rest of the graph (after reachability is known)."""


def unique_names(field: str, what: str) -> Any:
    """A validator for the list of records in ``field`` (tools, intents, attributes of one node): it
    refuses two records of one name, naming the repeated ones (``what`` says what a record is)."""

    def check(cls: type, records: list[Any]) -> list[Any]:
        names = [r.name for r in records]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"{what} names must be unique; repeated: {', '.join(repeated)}")
        return records

    return field_validator(field)(check)


def replies_checked(nodes: Mapping[str, NodeBase]) -> dict[str, list[str]]:
    """Reply guard id -> the player-facing nodes whose replies it checks before they are spoken: the
    one it names (``checks_reply_of``), then every other speaking node wired into it (an exit that
    leads to it), in graph order. The agent holds all of them back; the guard checks the one that led
    to it. A guard on a slot that is not a player-facing node's reply is not in it."""
    out: dict[str, list[str]] = {}
    for node in nodes.values():
        named = node.checks_reply_of()
        if named in nodes and nodes[named].PLAYER_FACING:
            out[node.id] = [named]
    for node in nodes.values():
        if not node.PLAYER_FACING or node.checks_reply_of() or node.guards_the_line():
            continue  # a guard's own canned line is not checked again
        for target in dict.fromkeys(node.exits().values()):
            if target in out and node.id not in out[target]:
                out[target].append(node.id)
    return out


def is_valid_id(text: str) -> bool:
    return bool(re.fullmatch(ID_PATTERN, text))  # fullmatch: "$" alone also matches before a final newline
