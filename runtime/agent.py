"""The agent: one character's conversation, run turn by turn through its workflow graph.

An ``Agent`` owns the dialog history, the agent variables, each node's window start
and any system prompt changed at runtime. ``run_turn`` runs the graph from the start
node, following ``default_exit`` and classifier exits until an exit names no node
(END). A turn either succeeds and is added to the history, or fails (a backend error,
a bad template, a tool without a result, a runaway loop, cancellation) and leaves
the agent exactly as it was before the turn.

Conventions a designer can rely on:

- Slots live for one turn. Classifiers write the slots they name, a Retrieve node
  writes its ``slot``, and every Generate, GenerateAndSpeak and ToolCall node writes
  its output (a ToolCall node: the tool's result) to the slot named by its own id, so
  a later node can read it through ``input`` or ``{{slots.ID}}``.
- The turn's reply is what the player-facing nodes (Generate, GenerateAndSpeak) with
  ``history_role: assistant`` wrote, joined by new lines. A node with ``history_role:
  none`` is a hidden step: its output is in the diagnostics and its slot, not the reply.
- A ToolCall node's history is its call-and-result pairs, kept or left out by its
  ``disposition``; its ``history_role`` is not used.
- Agent variables persist across turns; change them, or a node's system prompt,
  between turns. A changed system prompt changes the start of that node's prompt, so
  its next call reads the whole prompt again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.asset import (
    END,
    PLAYER_FACING_TYPES,
    Asset,
    ClassifyAttributes,
    ClassifyIntent,
    GeneratingNode,
    NodeBase,
    Retrieve,
    Summarize,
    ToolCall,
    VariableValue,
)
from runtime.backends.base import Backend, ChatMessage, GenerationRequest, GenerationResult
from runtime.budget import PromptBudget, message_tokens
from runtime.diagnostics import (
    NodeDiagnostics,
    NodeInput,
    NodeTimings,
    NodeTokens,
    NodeTrim,
    PromptMessage,
    RetrievedEntry,
    SummaryRecord,
    TurnDiagnostics,
)
from runtime.events import (
    Event,
    EventCallback,
    NodeFinished,
    NodeStarted,
    SentenceSplitter,
    Speak,
    Summarized,
    Token,
    ToolCalled,
    TurnFinished,
    TurnWarning,
)
from runtime.history import DialogHistory, Entry, HistoryError, Reply, SavedDialog, ToolExchange, Turn
from runtime.problems import Problem
from runtime.prompt import build_prompt, current_turn_messages, slot_text
from runtime.retrieval import KnowledgeIndex, knowledge_index
from runtime.summaries import run_summarize

log = logging.getLogger("parley.runtime")

# (node id, tool name, arguments) -> the tool's result as text
ToolResultFunction = Callable[[str, str, dict[str, Any]], str]

CLASSIFY_INTENT_MAX_TOKENS = 32


class TurnError(Exception):
    """A turn that could not finish; the agent is left as it was before the turn."""

    def __init__(self, message: str, node_id: str = "", field: str = "") -> None:
        self.node_id = node_id
        self.field = field
        where = ".".join(p for p in (node_id, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class TurnCancelled(TurnError):
    """The caller cancelled the turn."""


@dataclass
class TurnResult:
    turn: int
    reply: str
    path: list[str]
    slots: dict[str, Any]
    diagnostics: TurnDiagnostics | None  # None when the asset turns diagnostics off


@dataclass
class _Turn:
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

    def emit(self, event: Event) -> None:
        if self.on_event is not None:
            self.on_event(event)


class Agent:
    def __init__(self, asset: Asset, backend: Backend, asset_dir: str | None = None) -> None:
        self.asset = asset
        self.backend = backend
        self.asset_dir = asset_dir
        self.history = DialogHistory()
        self.variables: dict[str, VariableValue] = dict(asset.variables)
        self.system_prompts: dict[str, str] = {}  # node id -> system prompt set at runtime
        self.windows: dict[str, int] = {}  # node id -> window start (only moves forward)
        self._nodes = {n.id: n for n in asset.nodes}
        self._token_counts: dict[tuple[str, str], int] = {}
        self._knowledge: dict[str, KnowledgeIndex] = {}  # Retrieve node id -> its entries and ranker
        self._running = threading.Lock()

    # --- parameters ---------------------------------------------------------------------------

    def set_system_prompt(self, node_id: str, text: str) -> None:
        """Change a generating node's system prompt for the turns to come."""
        if not isinstance(self._nodes.get(node_id), GeneratingNode):
            raise KeyError(f"no Generate, GenerateAndSpeak or ToolCall node with id {node_id!r}")
        self.system_prompts[node_id] = text

    def system_prompt(self, node: GeneratingNode) -> str:
        return self.system_prompts.get(node.id, node.system_prompt)

    def set_variable(self, name: str, value: VariableValue) -> None:
        self.variables[name] = value

    # --- history ------------------------------------------------------------------------------

    def export_dialog(self) -> SavedDialog:
        """The history and the state that decides future prompts (see ``runtime.history``)."""
        return SavedDialog(self.history.copy(), dict(self.windows), dict(self.variables), dict(self.system_prompts))

    def import_dialog(self, saved: SavedDialog, source: str = "<history>") -> None:
        """Replace the conversation with ``saved``. Raises ``HistoryError`` (changing nothing)
        if it names nodes this asset does not have."""
        problems = [
            Problem("error", "no Generate, GenerateAndSpeak or ToolCall node has this id in the asset", source,
                    field=f"system_prompts.{node_id}")
            for node_id in saved.system_prompts if not isinstance(self._nodes.get(node_id), GeneratingNode)
        ]
        if problems:
            raise HistoryError(problems)
        self.history = saved.history.copy()
        self.windows = dict(saved.windows)
        self.variables = {**self.asset.variables, **saved.variables}
        self.system_prompts = dict(saved.system_prompts)

    def seed_history(self, turns: list[Turn]) -> None:
        """Start the conversation from ``turns`` (no summaries; every node's window starts at 0)."""
        self.history = DialogHistory([Turn(t.player, list(t.entries)) for t in turns], [])
        self.windows = {}

    def edit_turn(self, index: int, player: str | None = None, entries: list[Entry] | None = None) -> None:
        """Rewrite an earlier turn. Prompts that include it change from there on; a summary
        that already covers it is not rewritten."""
        turn = self.history.turns[index]
        self.history.turns[index] = Turn(turn.player if player is None else player,
                                         list(turn.entries if entries is None else entries))

    def truncate_history(self, count: int) -> None:
        """Keep only the first ``count`` turns, and the summaries that cover none of the rest."""
        self.history.turns = self.history.turns[:count]
        self.history.summaries = [s for s in self.history.summaries if s.covered_through < count]
        self.windows = {k: min(v, count) for k, v in self.windows.items()}

    # --- running a turn -----------------------------------------------------------------------

    def run_turn(
        self,
        player_line: str,
        instructions: str = "",
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
        tool_result: ToolResultFunction | None = None,
    ) -> TurnResult:
        """Run the graph once for ``player_line``. Raises ``TurnError``, ``BackendError`` or
        ``TemplateError``/``InputError``; on any failure the agent is unchanged."""
        if not self._running.acquire(blocking=False):
            raise TurnError("a turn is already running for this agent")
        try:
            return self._run_turn(player_line, instructions, on_event, cancel or threading.Event(), tool_result)
        finally:
            self._running.release()

    def _run_turn(self, player_line, instructions, on_event, cancel, tool_result) -> TurnResult:
        started = time.perf_counter()
        run = _Turn(player_line, instructions, on_event, cancel, tool_result)
        before = (list(self.history.summaries), dict(self.windows), dict(self.variables))
        try:
            node_id = self.asset.start_node
            if not node_id:
                raise TurnError("the asset has no start node", field="start_node")
            steps = 0
            while node_id != END:
                steps += 1
                if steps > self.asset.max_steps_per_turn:
                    loop = " -> ".join(run.path[-8:])
                    raise TurnError(
                        f"the turn ran {self.asset.max_steps_per_turn} nodes without reaching END (last: {loop}). "
                        "Check the exits for a loop, or raise max_steps_per_turn.",
                        field="max_steps_per_turn",
                    )
                node = self._nodes.get(node_id)
                if node is None:
                    where = run.path[-1] if run.path else ""
                    raise TurnError(f"exit names no node: {node_id!r}", where)
                if cancel.is_set():
                    raise TurnCancelled("the turn was cancelled", node.id)
                run.path.append(node.id)
                node_id = self._run_node(node, run)
        except BaseException:
            self.history.summaries, self.windows, self.variables = before
            raise

        index = len(self.history.turns)
        self.history.turns.append(Turn(player_line, run.entries))
        reply = "\n".join(r for r in run.replies if r)
        diagnostics = None
        if self.asset.enable_diagnostics:
            diagnostics = TurnDiagnostics(
                turn=index, player=player_line, instructions=instructions, path=run.path, nodes=run.nodes,
                reply=reply, total_ms=_ms(started),
                warnings=[f"{n.node}: {w}" for n in run.nodes for w in n.warnings],
            )
        run.emit(TurnFinished(index, reply, list(run.path)))
        return TurnResult(index, reply, list(run.path), dict(run.slots), diagnostics)

    def _run_node(self, node: NodeBase, run: _Turn) -> str:
        """Run one node; returns the id of the node to run next ('' is END)."""
        run.emit(NodeStarted(node.id, node.type))
        started = time.perf_counter()
        diag = NodeDiagnostics(node=node.id, type=node.type)
        if isinstance(node, GeneratingNode):
            port = self._run_generating(node, run, diag)
        elif isinstance(node, Summarize):
            port = self._run_summarize(node, run, diag)
        elif isinstance(node, ClassifyIntent):
            port = self._run_classify_intent(node, run, diag)
        elif isinstance(node, ClassifyAttributes):
            port = self._run_classify_attributes(node, run, diag)
        elif isinstance(node, Retrieve):
            port = self._run_retrieve(node, run, diag)
        else:  # pragma: no cover - every node type is handled above
            raise TurnError(f"cannot run a node of type {node.type}", node.id)
        next_node = node.exits()[port]
        diag.exit, diag.next_node = port, next_node
        diag.timings.total_ms = _ms(started)
        for warning in diag.warnings:
            log.warning("%s: %s", node.id, warning)
            run.emit(TurnWarning(node.id, warning))
        run.nodes.append(diag)
        run.emit(NodeFinished(node.id, node.type, diag.output, port, next_node))
        return next_node

    # --- helpers shared by node types ---------------------------------------------------------

    def _model(self, node: NodeBase) -> str:
        model = self.asset.model_for(node)
        if not model:
            raise TurnError("no model: set the node's model_name or the agent's default_model", node.id, "model_name")
        return model

    def _context_size(self, node: NodeBase, model: str) -> int:
        return getattr(node, "context_size", 0) or self.backend.model_context_size(model)

    def _counter(self, model: str) -> Callable[[str], int]:
        def count(text: str) -> int:
            key = (model, text)
            if key not in self._token_counts:
                if len(self._token_counts) > 200_000:
                    self._token_counts.clear()
                self._token_counts[key] = self.backend.count_tokens(model, text)
            return self._token_counts[key]

        return count

    def _line(self, node: NodeBase, run: _Turn, slot: str) -> str:
        if not slot:
            return run.player
        if slot not in run.slots:
            raise TurnError(f"reads slot {slot!r}, which no earlier node wrote this turn", node.id, "input")
        return slot_text(run.slots[slot])

    def _generate(
        self, node: NodeBase, model: str, request: GenerationRequest, run: _Turn, on_token=None
    ) -> GenerationResult:
        session = self.backend.session(node.id, model, getattr(node, "context_size", 0))
        result = session.generate(request, on_token, run.cancel)
        if result.cancelled:
            raise TurnCancelled("the turn was cancelled", node.id)
        return result

    @staticmethod
    def _record(diag: NodeDiagnostics, messages: list[ChatMessage], result: GenerationResult | None,
                budget: int | None, counted: int) -> None:
        diag.input = NodeInput(prompt=[PromptMessage(role=m.role, content=m.content, name=m.name) for m in messages])
        diag.tokens = NodeTokens(budget=budget, counted=counted)
        if result is not None:
            diag.output = result.text
            diag.tokens = NodeTokens(
                budget=budget, prompt=result.prompt_tokens, counted=counted, reused=result.reused,
                evaluated=result.evaluated, generated=result.generated, cold=result.cold,
            )
            diag.timings = NodeTimings(prompt_ms=result.prompt_ms, generate_ms=result.generate_ms)
            if result.finish_reason == "length":
                diag.warnings.append(f"the output was cut at max_tokens ({result.generated} tokens)")

    def _budget(self, node: NodeBase, context: int, max_tokens: int, field: str = "max_tokens") -> PromptBudget:
        try:
            return PromptBudget(context, max_tokens)
        except ValueError as exc:
            raise TurnError(str(exc), node.id, field) from None

    # --- node types ---------------------------------------------------------------------------

    def _run_generating(self, node: GeneratingNode, run: _Turn, diag: NodeDiagnostics) -> str:
        model = self._model(node)
        try:
            budget = PromptBudget.for_node(node, self.backend.model_context_size(model))
        except ValueError as exc:
            raise TurnError(str(exc), node.id, "max_tokens") from None
        count = self._counter(model)
        line = self._line(node, run, node.input)
        current = current_turn_messages(
            node, line, run.instructions, run.slots, self.variables, run.entries, self.asset.name
        )
        prompt = build_prompt(
            node, system_prompt=self.system_prompt(node), history=self.history,
            window_start=self.windows.get(node.id, 0), current=current, budget=budget, count=count,
        )
        self.windows[node.id] = prompt.trim.window_start_after
        diag.warnings += prompt.warnings
        trim = prompt.trim
        diag.trim = NodeTrim(
            window_start_before=trim.window_start_before, window_start_after=trim.window_start_after,
            dropped_turns=trim.dropped_turns, triggered=trim.triggered, history_entries=prompt.history_entries,
        )

        request = GenerationRequest(
            prompt.messages, max_tokens=node.max_tokens, temperature=node.temperature, top_p=node.top_p,
            seed=node.seed, json_schema=_tool_schema(node) if isinstance(node, ToolCall) else None,
        )
        splitter = SentenceSplitter() if node.type == "GenerateAndSpeak" else None

        def on_token(text: str) -> None:
            run.emit(Token(node.id, text))
            if splitter is not None:
                for sentence in splitter.feed(text):
                    run.emit(Speak(node.id, sentence))

        result = self._generate(node, model, request, run, on_token)
        if splitter is not None:
            for sentence in splitter.flush():
                run.emit(Speak(node.id, sentence))
        self._record(diag, prompt.messages, result, budget.limit, prompt.counted_tokens)

        if isinstance(node, ToolCall):
            self._call_tool(node, result.text, run, diag)
        else:
            replay = node.history_role == "assistant"
            run.entries.append(Reply(node.id, result.text, replay))
            run.slots[node.id] = result.text
            if node.type in PLAYER_FACING_TYPES and replay:
                run.replies.append(result.text)
        return "default_exit"

    def _call_tool(self, node: ToolCall, text: str, run: _Turn, diag: NodeDiagnostics) -> None:
        tools = {t.name: t for t in node.tools}
        try:
            call = json.loads(text)
        except json.JSONDecodeError:
            call = None
        if not (isinstance(call, dict) and call.get("name") in tools and isinstance(call.get("arguments", {}), dict)):
            diag.warnings.append(f"the model did not write a valid tool call; no tool was called (output: {text[:80]!r})")
            return
        tool = tools[call["name"]]
        arguments = dict(call.get("arguments", {}))
        if tool.mock_result is not None:
            result = tool.mock_result
        elif run.tool_result is not None:
            result = str(run.tool_result(node.id, tool.name, arguments))
        else:
            raise TurnError(
                f"the model called {tool.name!r}, which has no mock_result, and no tool result was supplied; "
                "give the tool a mock_result or answer the call",
                node.id, "tools",
            )
        run.entries.append(ToolExchange(node.id, tool.name, arguments, result, node.disposition == "replay"))
        run.slots[node.id] = result
        run.emit(ToolCalled(node.id, tool.name, arguments, result))

    def _run_summarize(self, node: Summarize, run: _Turn, diag: NodeDiagnostics) -> str:
        model = self._model(node)
        context = self._context_size(node, model)
        self._budget(node, context, node.max_summary_tokens, "max_summary_tokens")
        count = self._counter(model)
        turns = self.history.turns + [Turn(run.player, list(run.entries))]
        fold = run_summarize(
            node, turns, self.history.summary, context, count,
            lambda request: self._generate(node, model, request, run), self.asset.name,
        )
        counted = sum(message_tokens(count(m.content)) for m in fold.messages)
        self._record(diag, fold.messages, fold.result, context - node.max_summary_tokens, counted)
        diag.warnings += fold.warnings
        if fold.summary is not None:
            summary = fold.summary
            self.history.summaries.append(summary)
            diag.output = summary.text
            diag.summary = SummaryRecord(
                covered_through=summary.covered_through, folded_turns=summary.folded_turns,
                summary_chars=summary.summary_chars, unsummarized_tokens=fold.unsummarized_tokens,
                shortened_turn=fold.shortened_turn, omitted_words=fold.omitted_words,
                summary_omitted_words=fold.summary_omitted_words,
            )
            if node.notify_client:
                run.emit(Summarized(node.id, summary.covered_through, summary.folded_turns,
                                    summary.summary_chars, summary.text))
        return "default_exit"

    def _run_classify_intent(self, node: ClassifyIntent, run: _Turn, diag: NodeDiagnostics) -> str:
        model = self._model(node)
        budget = self._budget(node, self._context_size(node, model), CLASSIFY_INTENT_MAX_TOKENS, "context_size")
        count = self._counter(model)
        names = [i.name for i in node.intents]
        none = next(n for n in ("none", "none_of_these", "no_intent_matches") if n not in names)
        lines = [f"- {i.name}: {i.description}" if i.description else f"- {i.name}" for i in node.intents]
        lines.append(f"- {none}: none of the above fits")
        system = f"{node.system_prompt.strip()}\n\nIntents:\n" + "\n".join(lines)
        messages = [ChatMessage("system", system), ChatMessage("user", self._line(node, run, node.input))]
        counted = sum(message_tokens(count(m.content)) for m in messages)
        if counted > budget.limit:
            diag.warnings.append(
                f"the classifier's prompt ({counted} tokens) does not fit its budget of {budget.limit}; "
                "took the fallback exit without asking the model. Raise context_size."
            )
            self._record(diag, messages, None, budget.limit, counted)
            run.slots[node.slot] = ""
            return "fallback_exit"
        request = GenerationRequest(messages, CLASSIFY_INTENT_MAX_TOKENS, temperature=0.0, seed=0, choices=names + [none])
        result = self._generate(node, model, request, run)
        self._record(diag, messages, result, budget.limit, counted)
        chosen = result.text.strip()
        if chosen in names:
            run.slots[node.slot] = chosen
            return f"intent:{chosen}"
        run.slots[node.slot] = ""
        return "fallback_exit"

    def _run_classify_attributes(self, node: ClassifyAttributes, run: _Turn, diag: NodeDiagnostics) -> str:
        if not node.attributes:
            return "default_exit"
        model = self._model(node)
        context = self._context_size(node, model)
        max_tokens = min(context // 2, 32 + 24 * len(node.attributes))
        budget = self._budget(node, context, max(1, max_tokens), "context_size")
        count = self._counter(model)
        lines = [
            f"- {a.name}{f' ({a.description})' if a.description else ''}: one of {', '.join(a.values)}"
            for a in node.attributes
        ]
        system = f"{node.system_prompt.strip()}\n\nAttributes:\n" + "\n".join(lines)
        messages = [ChatMessage("system", system), ChatMessage("user", self._line(node, run, node.input))]
        schema = {
            "type": "object",
            "properties": {a.name: {"enum": list(a.values)} for a in node.attributes},
            "required": [a.name for a in node.attributes],
            "additionalProperties": False,
        }
        counted = sum(message_tokens(count(m.content)) for m in messages)
        request = GenerationRequest(messages, budget.max_tokens, temperature=0.0, seed=0, json_schema=schema)
        result = self._generate(node, model, request, run)
        self._record(diag, messages, result, budget.limit, counted)
        try:
            values = json.loads(result.text)
        except json.JSONDecodeError:
            values = None
        if not isinstance(values, dict):
            diag.warnings.append("the model's answer was not a JSON object; no slot was written")
            return "default_exit"
        for attribute in node.attributes:
            value = values.get(attribute.name)
            if value in attribute.values:
                run.slots[attribute.target_slot] = value
            else:
                diag.warnings.append(f"no allowed value for {attribute.name!r}; slot {attribute.target_slot!r} not written")
        return "default_exit"

    def _run_retrieve(self, node: Retrieve, run: _Turn, diag: NodeDiagnostics) -> str:
        # kept across turns: the entries are embedded (or indexed) once, not every turn
        index = knowledge_index(node, self.asset_dir, self.backend, self.asset.name, self._knowledge.get(node.id))
        self._knowledge[node.id] = index
        query = self._line(node, run, node.query)
        if index.warning:
            diag.warnings.append(index.warning)
        found = index.rank(query, node.top_k)
        run.slots[node.slot] = [f.as_slot() for f in found]
        diag.input = NodeInput(prompt=[PromptMessage(role="user", content=query)])
        diag.retrieved = [RetrievedEntry(**f.as_slot()) for f in found]
        diag.output = "\n".join(f.entry.text for f in found)
        return "default_exit"


def _tool_schema(node: ToolCall) -> dict[str, Any]:
    """The JSON a ToolCall node must write: one call of one declared tool, with valid arguments."""
    branches = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in node.tools
    ]
    return branches[0] if len(branches) == 1 else {"oneOf": branches}


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
