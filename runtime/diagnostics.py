"""Turn diagnostics: one JSON object per turn, the data behind the Turn Inspector.

The models here are the schema: ``resources/schemas/turn-diagnostics.schema.json`` is
generated from ``TurnDiagnostics`` (``python -m runtime.schemas`` rewrites it) and a
test checks the committed file is current.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.names import without_surrogates


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromptMessage(_Model):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str = Field("", description="For tool messages and tool calls: the tool's name.")


class NodeInput(_Model):
    prompt: list[PromptMessage] = Field(
        default_factory=list,
        description="The messages exactly as the model received them: after summary, replay, templates and trimming.",
    )


class NodeTokens(_Model):
    budget: int | None = Field(None, description="Prompt budget: context size minus max_tokens. Null for nodes without a model.")
    prompt: int = Field(0, description="The rendered prompt's exact length in tokens (from the backend).")
    counted: int = Field(0, description="The prompt's cost as the budget counts it: tokenizer tokens plus 8 per message.")
    reused: int = Field(0, description="Prompt tokens kept from the node's KV cache.")
    evaluated: int = Field(0, description="Prompt tokens the model had to read.")
    generated: int = Field(0, description="Tokens generated.")
    cold: bool = Field(False, description="The node's KV cache had to be (re)created.")


class NodeTrim(_Model):
    window_start_before: int = Field(description="The node's window start before this turn (turns count from 0).")
    window_start_after: int = Field(description="Its window start after trimming; never smaller.")
    dropped_turns: int = Field(description="Whole turns this trim removed from the node's prompt.")
    triggered: bool = Field(description="The prompt passed the budget, so turns were dropped down to 75 % of it.")
    history_entries: int = Field(0, description="Earlier history entries sent (player lines, replies, tool pairs).")


class NodeTimings(_Model):
    total_ms: float = 0.0
    prompt_ms: float = Field(0.0, description="Reading the prompt (the part not reused from the KV cache).")
    generate_ms: float = 0.0


class SummaryRecord(_Model):
    covered_through: int
    folded_turns: int
    summary_chars: int
    unsummarized_tokens: int = Field(description="Tokens of the turns not yet summarized when the node ran.")
    shortened_turn: int | None = Field(
        None,
        description="A turn too long for the summarizer's context, folded with the middle of its long messages "
        "left out (marked '[... N words omitted ...]'); null when every turn was folded whole.",
    )
    omitted_words: int = Field(0, description="Words left out of the shortened turn.")
    summary_omitted_words: int = Field(
        0, description="Words left out of the middle of the previous summary to make room for the turn."
    )


class RetrievedEntry(_Model):
    id: str
    text: str
    score: float


class GuardCheck(_Model):
    check: str = Field(description="patterns, plugin:NAME or model.")
    policy: str = Field("", description="The policy this check found broken; empty when it found none.")
    why: str = Field("", description="What it found: the text a pattern matched and the pattern, or the check's reason.")
    ms: float = Field(0.0, description="How long the check took.")


class GuardRecord(_Model):
    checked: Literal["line", "reply"] = Field(description="line: the player's line or a slot; reply: a reply held back until the guard passed it.")
    text: str = Field("", description="The text checked (at most 20,000 characters).")
    policy: str = Field("", description="The policy broken (the first check to find one decides); empty when the text passed.")
    why: str = ""
    checks: list[GuardCheck] = Field(default_factory=list, description="Every check that ran, in order.")
    withdrew: str = Field("", description="The node whose reply was withdrawn (never shown, never replayed).")
    ms: float = Field(0.0, description="The guard's time, every check included.")


class NodeDiagnostics(_Model):
    node: str
    type: str
    input: NodeInput = Field(default_factory=NodeInput)
    output: str = ""
    exit: str = Field("", description="The port taken: default_exit, intent:NAME or fallback_exit.")
    next_node: str = Field("", description="The node that ran next; empty is END.")
    tokens: NodeTokens = Field(default_factory=NodeTokens)
    trim: NodeTrim | None = Field(None, description="For Generate, GenerateAndSpeak and ToolCall nodes.")
    summary: SummaryRecord | None = Field(None, description="For a Summarize node that folded turns.")
    retrieved: list[RetrievedEntry] | None = Field(None, description="For a Retrieve node.")
    guard: GuardRecord | None = Field(None, description="For a Guard node: what it checked, which check fired and why.")
    timings: NodeTimings = Field(default_factory=NodeTimings)
    warnings: list[str] = Field(default_factory=list)
    bypassed: bool = Field(False, description="The node is bypassed: it did not run, and the turn passed along "
                           "its default exit (exit says which).")


class TurnDiagnostics(_Model):
    turn: int = Field(description="The turn's index in the dialog history (turns count from 0).")
    player: str = Field(description="The player's line.")
    instructions: str = ""
    path: list[str] = Field(default_factory=list, description="Node ids in the order they ran (a bypassed node "
                            "too: it is passed along without running; its diagnostics say bypassed).")
    nodes: list[NodeDiagnostics] = Field(default_factory=list)
    reply: str = ""
    total_ms: float = 0.0
    warnings: list[str] = Field(default_factory=list)
    game_events: list[str] = Field(default_factory=list, description="The game events (Asset.game_events) the turn "
                                   "reached, by name, in order.")
    backend: str = Field("", description="What ran the turn's model calls: embedded (this computer), or a "
                         "server's profile name, address, kind and model.")

    def to_json_line(self) -> str:
        """One line of JSON. Lone surrogates (a line typed in bytes that were not UTF-8, an asset's
        ``\\ud800``) become U+FFFD, so the line can always be written to a UTF-8 file."""
        return without_surrogates(json.dumps(self.model_dump(mode="json"), ensure_ascii=False)) + "\n"


def turn_diagnostics_schema() -> dict:
    """The JSON Schema of one turn's diagnostics (``runtime.schemas`` writes it to resources/schemas)."""
    schema = TurnDiagnostics.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Parley turn diagnostics", **{
        k: v for k, v in schema.items() if k != "title"
    }}
