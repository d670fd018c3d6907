"""What a node sees while it runs: ``NodeRun``, the one interface between the agent and a node type.

The agent makes a ``NodeRun`` for each node it runs and calls ``node.run(run)``. Through it a
node reads the agent's state (history, variables, window starts), this turn's state (the
player's line, slots, entries, replies), and uses the backend; what it changes there is
rolled back by the agent if the turn fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult, TokenCallback
from runtime.budget import PromptBudget, message_tokens
from runtime.diagnostics import NodeDiagnostics, NodeInput, NodeTimings, NodeTokens, PromptMessage
from runtime.events import Event, EventCallback
from runtime.history import Entry
from runtime.nodes.base import NodeBase
from runtime.prompt import PromptPart, slot_text

if TYPE_CHECKING:  # pragma: no cover
    from runtime.agent import Agent

# (node id, tool name, arguments) -> the tool's result as text
ToolResultFunction = Callable[[str, str, dict[str, Any]], str]


class TurnError(Exception):
    """A turn that could not finish; the agent is left as it was before the turn."""

    def __init__(self, message: str, node_id: str = "", field: str = "") -> None:
        self.node_id = node_id
        self.field = field
        self.reason = message
        where = ".".join(p for p in (node_id, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class TurnCancelled(TurnError):
    """The caller cancelled the turn."""


@dataclass
class RecordedPrompt:
    """A prompt-building node's prompt, told apart by where each part came from (recorded as it is
    built, for the Turn Inspector), and the context size it was fitted to."""

    parts: list[PromptPart]
    context_size: int


@dataclass
class TurnState:
    """What one running turn has so far."""

    player: str
    instructions: str
    on_event: EventCallback | None
    cancel: threading.Event
    tool_result: ToolResultFunction | None
    slots: dict[str, Any] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    nodes: list[NodeDiagnostics] = field(default_factory=list)
    prompts: dict[str, RecordedPrompt] = field(default_factory=dict)  # node id -> its prompt's parts

    def emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)


class NodeRun:
    """One node's run within a turn: the agent, the turn so far, the node's diagnostics, and the
    helpers node types share (model lookup, token counting, generation, recording)."""

    def __init__(self, agent: Agent, turn: TurnState, node: NodeBase, diag: NodeDiagnostics) -> None:
        self.agent = agent
        self.turn = turn
        self.node = node
        self.diag = diag

    # --- reading ------------------------------------------------------------------------------

    @property
    def backend(self):
        return self.agent.backend

    @property
    def source(self) -> str:
        """What errors name as the asset (its name)."""
        return self.agent.asset.name

    def line(self, slot: str, field: str = "input") -> str:
        """The player's line, or the text of ``slot`` written earlier this turn."""
        if not slot:
            return self.turn.player
        if slot not in self.turn.slots:
            raise TurnError(f"reads slot {slot!r}, which no earlier node wrote this turn", self.node.id, field)
        return slot_text(self.turn.slots[slot])

    def model(self) -> str:
        model = self.agent.asset.model_for(self.node)
        if not model:
            raise TurnError("no model: set the node's model_name or the agent's default_model",
                            self.node.id, "model_name")
        return model

    def context_size(self, model: str) -> int:
        uses = self.node.model_uses()
        own = uses[0].context_size if uses else 0
        return own or self.backend.model_context_size(model)

    def counter(self, model: str) -> Callable[[str], int]:
        return self.agent.token_counter(model)

    def budget(self, context: int, max_tokens: int, field: str = "max_tokens") -> PromptBudget:
        try:
            return PromptBudget(context, max_tokens)
        except ValueError as exc:
            raise TurnError(str(exc), self.node.id, field) from None

    def cache(self) -> dict[str, Any]:
        """A dict this node keeps across turns for the agent's life (for work done once, such as an index)."""
        return self.agent.node_cache(self.node.id)

    # --- doing --------------------------------------------------------------------------------

    def generate(self, model: str, request: GenerationRequest, on_token: TokenCallback | None = None
                 ) -> GenerationResult:
        """Generate with this node's own context (its KV cache). Raises ``TurnCancelled``."""
        uses = self.node.model_uses()
        session = self.backend.session(self.node.id, model, uses[0].context_size if uses else 0)
        result = session.generate(request, on_token, self.turn.cancel)
        if result.cancelled:
            raise TurnCancelled("the turn was cancelled", self.node.id)
        return result

    def emit(self, event: Event) -> None:
        self.turn.emit(event)

    def record(self, messages: list[ChatMessage], result: GenerationResult | None, budget: int | None,
               counted: int) -> None:
        """Put the prompt, the output, token counts and timings in the node's diagnostics."""
        diag = self.diag
        diag.input = NodeInput(prompt=[PromptMessage(role=m.role, content=m.content, name=m.name) for m in messages])
        diag.tokens = NodeTokens(budget=budget, counted=counted)
        if result is not None:
            diag.output = result.text
            diag.tokens = NodeTokens(
                budget=budget, prompt=result.prompt_tokens, counted=counted, reused=result.reused,
                evaluated=result.evaluated, generated=result.generated, cold=result.cold,
            )
            diag.timings = NodeTimings(prompt_ms=result.prompt_ms, generate_ms=result.generate_ms)
            diag.warnings += result.warnings
            if result.finish_reason == "length":
                diag.warnings.append(f"the output was cut at max_tokens ({result.generated} tokens)")

    def record_parts(self, parts: list[PromptPart], context_size: int) -> None:
        self.turn.prompts[self.node.id] = RecordedPrompt(parts, context_size)

    @staticmethod
    def cost(messages: list[ChatMessage], count: Callable[[str], int]) -> int:
        return sum(message_tokens(count(m.content)) for m in messages)


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
