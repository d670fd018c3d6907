"""What a node sees while it runs: ``NodeRun``, the one door between the agent and a node type.

The agent makes a ``NodeRun`` for each node it runs and calls ``node.run(run)``. A node reaches
the agent through its methods only: the history (and adding a summary to it), the agent
variables, the node's window start and system prompt, the seed, the asset's folder and name,
the backend, and a cache kept across turns. ``run.turn`` is this turn's state (the player's
line, slots, entries, replies). What a node changes is rolled back by the agent if the turn
fails. The agent is seen only as ``AgentAccess``, so this package never imports ``runtime.agent``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult, TokenCallback
from runtime.diagnostics import NodeDiagnostics, NodeInput, NodeTimings, NodeTokens, PromptMessage
from runtime.dialogue.history import DialogHistory, Entry, Reply, Summary
from runtime.events import Event, EventCallback, NodeText
from runtime.models.journal import EMPTY, DecodeJournal
from runtime.nodes.base import NodeBase
from runtime.nodes.repetition import runaway_warning
from runtime.prompting.budget import PromptBudget
from runtime.prompting.language import with_answer_line
from runtime.prompting.prompt import PromptPart, slot_text

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
    # False: a tool with a mock_result is still asked of ``tool_result`` (a game serving the agent
    # implements its tools; the mocks are for testing in the editor).
    mock_tools: bool = True
    game_events: list[str] = field(default_factory=list)  # the marked events reached, by name
    tags: dict[str, str] = field(default_factory=dict)  # the asset's reply_tags sent so far: name -> value
    # Node id -> the tokens and sentences of its reply, held back until a Guard checks it.
    held: dict[str, list[Event]] = field(default_factory=dict)

    def emit(self, event: Event) -> None:
        if isinstance(event, NodeText) and event.node in self.held:
            self.held[event.node].append(event)
        elif self.on_event is not None:
            self.on_event(event)

    def hold(self, node_id: str) -> None:
        """Keep ``node_id``'s tokens and sentences back until ``release`` or ``withdraw``."""
        self.held.setdefault(node_id, [])

    def release(self, node_id: str) -> None:
        """Send on what ``node_id`` said while held (a guard passed it)."""
        for event in self.held.pop(node_id, []):
            self.emit(event)

    def withdraw(self, node_id: str) -> None:
        """Drop ``node_id``'s held reply: never sent, not part of the turn's reply, never replayed."""
        self.held.pop(node_id, None)
        for entry in [e for e in self.entries if isinstance(e, Reply) and e.node == node_id]:
            self.entries.remove(entry)
            if entry.text in self.replies:
                del self.replies[len(self.replies) - 1 - self.replies[::-1].index(entry.text)]

    def release_all(self) -> None:
        for node_id in list(self.held):
            self.release(node_id)


class AgentAccess(Protocol):
    """What ``NodeRun`` needs of the agent running the turn (``runtime.agent.Agent`` is one)."""

    backend: Any
    asset_dir: str | None
    history: DialogHistory
    variables: dict[str, Any]
    windows: dict[str, int]
    journals: dict[str, DecodeJournal]
    session_id: str
    asset: Any  # the graph that runs (``runtime.asset.model.Asset``); nodes read its ``language``

    @property
    def asset_name(self) -> str: ...
    def model_for(self, node: NodeBase) -> str: ...
    def system_prompt(self, node: Any) -> str: ...
    def seed_for(self, seed: int) -> int: ...
    def token_counter(self, model: str) -> Callable[[str], int]: ...
    def node_cache(self, node_id: str) -> dict[str, Any]: ...
    def folder_of(self, node_id: str) -> str | None: ...


class NodeRun:
    """One node's run within a turn: the turn so far, the node's diagnostics, and the methods
    through which a node reaches the agent and the helpers node types share (model lookup,
    token counting, generation, recording)."""

    def __init__(self, agent: AgentAccess, turn: TurnState, node: NodeBase, diag: NodeDiagnostics) -> None:
        self._agent = agent
        self.turn = turn
        self.node = node
        self.diag = diag

    # --- the agent, read ----------------------------------------------------------------------

    @property
    def backend(self):
        return self._agent.backend

    @property
    def source(self) -> str:
        """What errors name as the asset (its name)."""
        return self._agent.asset_name

    @property
    def asset_dir(self) -> str | None:
        """The folder relative paths in this node are read from, or None: the asset file's, or for a
        behaviour's node (``guard/retrieve``), the behaviour file's."""
        return self._agent.folder_of(self.node.id)

    @property
    def history(self) -> DialogHistory:
        """The agent's dialog history before this turn. Read it; ``add_summary`` is the one change."""
        return self._agent.history

    @property
    def variables(self) -> MappingProxyType[str, Any]:
        """The agent variables, read-only (``set_variable`` changes one)."""
        return MappingProxyType(self._agent.variables)

    @property
    def window_start(self) -> int:
        """The first turn this node's prompt may still hold (trimming only moves it forward)."""
        return self._agent.windows.get(self.node.id, 0)

    @property
    def language(self) -> str:
        """The agent's language, a BCP 47 tag (``Asset.language``), or '' when it has none."""
        return getattr(self._agent.asset, "language", "") or ""

    def system_prompt(self) -> str:
        """This node's system prompt: the asset's, or the one set at runtime. A player-facing node's
        ends with the agent's language ("Answer in German."; ``runtime.prompting.language``)."""
        own = self._agent.system_prompt(self.node)
        return with_answer_line(own, self.language) if self.node.PLAYER_FACING else own

    def seed(self, fixed: int) -> int:
        """The seed to generate with for the node's ``fixed`` seed (-1 stays random)."""
        return self._agent.seed_for(fixed)

    # --- the agent, changed (rolled back if the turn fails) -----------------------------------

    def move_window_start(self, start: int) -> None:
        self._agent.windows[self.node.id] = start

    def set_variable(self, name: str, value: Any) -> None:
        self._agent.variables[name] = value

    def add_summary(self, summary: Summary) -> None:
        self._agent.history.summaries.append(summary)

    # --- this turn and the node ---------------------------------------------------------------

    def line(self, slot: str, field: str = "input") -> str:
        """The player's line, or the text of ``slot`` written earlier this turn."""
        if not slot:
            return self.turn.player
        if slot not in self.turn.slots:
            raise TurnError(f"reads slot {slot!r}, which no earlier node wrote this turn", self.node.id, field)
        return slot_text(self.turn.slots[slot])

    def model(self) -> str:
        model = self._agent.model_for(self.node)
        if not model:
            raise TurnError("no model: set the node's model_name or the agent's default_model",
                            self.node.id, "model_name")
        return model

    def context_size(self, model: str) -> int:
        uses = self.node.model_uses()
        own = uses[0].context_size if uses else 0
        return own or self.backend.model_context_size(model)

    def counter(self, model: str) -> Callable[[str], int]:
        return self._agent.token_counter(model)

    def budget(self, context: int, max_tokens: int, field: str = "max_tokens") -> PromptBudget:
        try:
            return PromptBudget(context, max_tokens)
        except ValueError as exc:
            raise TurnError(str(exc), self.node.id, field) from None

    def cache(self) -> dict[str, Any]:
        """A dict this node keeps across turns for the agent's life (for work done once, such as an index)."""
        return self._agent.node_cache(self.node.id)

    # --- doing --------------------------------------------------------------------------------

    def generate(self, model: str, request: GenerationRequest, on_token: TokenCallback | None = None
                 ) -> GenerationResult:
        """Generate with this node's own context (its KV cache), rebuilt first to what it held at this
        point of the conversation (its decode journal), so the call reads as it did or would the
        first time. Raises ``TurnCancelled``."""
        request.journal = self._agent.journals.get(self.node.id, EMPTY)
        request.session_id = self._agent.session_id
        result = self._session(model).generate(request, on_token, self.turn.cancel)
        if result.cancelled:
            raise TurnCancelled("the turn was cancelled", self.node.id)
        if result.journal is not None:
            self._agent.journals[self.node.id] = result.journal
        return result

    def read_ahead(self, model: str, messages: list[ChatMessage]) -> DecodeJournal | None:
        """Read ``messages`` into this node's cache ahead of its next call (``Agent.warm``), from its
        journal at this point of the conversation; returns its journal after, None if it did not change."""
        before = self._agent.journals.get(self.node.id, EMPTY)
        after = self._session(model).read_ahead(before, messages, self.turn.cancel)
        if after is None or after == before:
            return None
        self._agent.journals[self.node.id] = after
        return after

    def _session(self, model: str) -> Any:
        uses = self.node.model_uses()
        key = f"{self._agent.session_id}/{self.node.id}" if self._agent.session_id else self.node.id
        return self.backend.session(key, model, uses[0].context_size if uses else 0)

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
                diag.warnings.append(runaway_warning(result.text, result.generated)
                                     or f"the output was cut at max_tokens ({result.generated} tokens)")

    def record_parts(self, parts: list[PromptPart], context_size: int) -> None:
        self.turn.prompts[self.node.id] = RecordedPrompt(parts, context_size)


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
