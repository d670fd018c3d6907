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

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from runtime.asset.behaviours import expand, node_folders
from runtime.asset.model import END, Asset, NodeBase, VariableValue
from runtime.backends.base import Backend, CallCancelled
from runtime.crashes import Running, turn_note
from runtime.diagnostics import NodeDiagnostics, TurnDiagnostics
from runtime.dialogue.dialog_file import MAX_REPORTED_PROBLEMS, HistoryError, unknown_node_problems
from runtime.dialogue.history import DialogHistory, Entry, Reply, SavedDialog, Turn
from runtime.dialogue.tree import AgentState, ConversationTree
from runtime.events import (
    Event,
    EventCallback,
    GameEventReached,
    NodeFinished,
    NodeStarted,
    ReplyTagged,
    TurnFinished,
    TurnWarning,
)
from runtime.models.journal import DecodeJournal
from runtime.names import shown_name
from runtime.nodes import failure_text
from runtime.nodes.base import replies_checked
from runtime.nodes.running import (
    NodeRun,
    RecordedPrompt,
    ToolResultFunction,
    TurnCancelled,
    TurnError,
    TurnState,
    elapsed_ms,
)
from runtime.problems import BackendError, InputError, Problem

log = logging.getLogger("parley.runtime")
# Token counts an agent remembers (message texts by model), the least recently used forgotten
# first: clearing them all at once made the next turn recount every message of a long history.
TOKEN_COUNT_CACHE = 200_000
MAX_PORT_CHARS = 64  # of an exit a node took but does not have, quoted in the error
# What ``change_params`` may change between turns; every other field of a node is the graph's.
RUNTIME_PARAMETERS = ("system_prompt", "temperature", "top_p", "min_p", "repeat_penalty", "seed", "max_tokens")


class StructuralChange(ValueError):
    """A change to what a session cannot change while it runs: the graph, a node's model or context,
    its tools or its exits."""

    def __init__(self, node_id: str, name: str) -> None:
        self.node_id, self.field = node_id, name
        super().__init__(f"{node_id}.{name} is part of the agent's graph, not a parameter; change it in the "
                         "asset and start a new session")

__all__ = ["Agent", "StructuralChange", "ToolResultFunction", "TurnCancelled", "TurnError", "TurnGuard", "TurnResult",
           "turn_reply"]


@dataclass(frozen=True)
class TurnGuard:
    """The first policy a turn's Guard nodes found broken, what a game reacts to (the guard calls the
    watch); every one that fired is also a ``Guarded`` event. Empty strings: no guard fired."""

    policy: str = ""
    exit: str = ""  # the port the guard took: "policy:NAME"
    node: str = ""  # the Guard node


@dataclass
class TurnResult:
    turn: int
    reply: str
    path: list[str]
    slots: dict[str, Any]
    diagnostics: TurnDiagnostics | None  # None when the asset turns diagnostics off
    # node id -> its prompt told apart by where each part came from (prompt-building nodes only)
    prompts: dict[str, RecordedPrompt] = field(default_factory=dict)
    turn_id: int = -1  # the turn's id in the conversation tree
    backend: str = ""  # what ran its model calls (``Backend.label``)
    # It said and wrote what an alternative of it already had (``ConversationTree.twin``): ``turn_id``
    # is that alternative's, and no new one was added.
    repeated: bool = False
    # Kept with diagnostics on or off: a game acts on them.
    guard: TurnGuard = field(default_factory=TurnGuard)
    game_events: list[str] = field(default_factory=list)  # the marked events reached (``Asset.game_events``), in order
    tags: dict[str, str] = field(default_factory=dict)  # the asset's reply_tags the turn's nodes wrote: name -> value


class Agent:
    def __init__(self, asset: Asset, backend: Backend, asset_dir: str | None = None, session_id: str = "") -> None:
        """Raises ``AssetError`` when a behaviour a Subgraph node runs cannot be read (from ``asset_dir``)."""
        # The asset as given; ``asset`` is the graph that runs, its behaviours' nodes added under
        # namespaced ids (``guard/classify``): the ids of the history, the diagnostics and the caches.
        self.source_asset = asset
        self.asset = expand(asset, asset_dir)
        self._folders = node_folders(self.asset)  # a behaviour's node -> its file's folder
        # Many agents on one backend (``parley serve``'s NPCs) each name their own node caches
        # "SESSION/NODE"; an agent alone on its backend (the editor's) keys them by node id.
        self.session_id = session_id
        self.backend = backend
        self.asset_dir = asset_dir
        self.history = DialogHistory()
        self.variables: dict[str, VariableValue] = dict(self.asset.variables)
        self.system_prompts: dict[str, str] = {}  # node id -> system prompt set at runtime
        self.windows: dict[str, int] = {}  # node id -> window start (only moves forward)
        self.journals: dict[str, DecodeJournal] = {}  # node id -> how its KV cache was read so far
        self._nodes = {n.id: n for n in self.asset.nodes}
        # The player-facing nodes whose replies a guard checks before they are spoken (the graph's
        # exits never change for an agent: change_params refuses them), so worked out once.
        self._held_replies = {h for held in replies_checked(self._nodes).values() for h in held}
        self._token_counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._node_caches: dict[str, dict[str, Any]] = {}  # node id -> what it keeps across turns
        self._running = threading.Lock()
        self.seed_salt = 0  # added to every fixed seed; re-rolling seeds changes it
        self.tree = ConversationTree(self._state())

    # --- parameters ---------------------------------------------------------------------------

    def set_system_prompt(self, node_id: str, text: str) -> None:
        """Change a generating node's system prompt for the turns to come."""
        if not self._has_runtime_system_prompt(node_id):
            raise KeyError(f"no Generate, GenerateAndSpeak or ToolCall node with id {node_id!r}")
        self.system_prompts[node_id] = text

    def _has_runtime_system_prompt(self, node_id: str) -> bool:
        node = self._nodes.get(node_id)
        return node is not None and node.RUNTIME_SYSTEM_PROMPT

    @property
    def asset_name(self) -> str:
        return self.asset.name

    def model_for(self, node: NodeBase) -> str:
        return self.asset.model_for(node)

    def system_prompt(self, node: Any) -> str:
        return self.system_prompts.get(node.id, node.system_prompt)

    def set_variable(self, name: str, value: VariableValue) -> None:
        self.variables[name] = value

    def change_params(self, node_id: str, changes: dict[str, Any]) -> None:
        """Change a node's parameters for the turns to come: its system prompt and sampling
        (``RUNTIME_PARAMETERS``). Raises ``KeyError`` for an unknown node, ``StructuralChange`` for
        any other field of the node (the graph, its model and context, its tools and exits are the
        asset's), and ``ValueError`` for a bad value; on any error nothing changes."""
        node = self._nodes.get(node_id)
        if node is None:
            raise KeyError(f"no node with id {node_id!r}")
        fields = type(node).model_fields
        for name in changes:
            if name in RUNTIME_PARAMETERS and (name in fields or name == "system_prompt"):
                continue
            if name in fields or name in ("type", "exits"):
                raise StructuralChange(node_id, name)
            raise ValueError(f"{node_id}.{name}: the {node.type_name} node has no such parameter "
                             f"(parameters: {', '.join(p for p in RUNTIME_PARAMETERS if p in fields)})")
        prompt = changes.get("system_prompt")
        if prompt is not None and not self._has_runtime_system_prompt(node_id):
            raise StructuralChange(node_id, "system_prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError(f"{node_id}.system_prompt: a text, not {type(prompt).__name__}")
        sampling = {k: v for k, v in changes.items() if k != "system_prompt"}
        if sampling:
            try:
                # validated under a plain id: a behaviour's node runs under a namespaced one (guard/reply)
                changed = type(node).model_validate({**node.model_dump(), **sampling, "id": "node"}).model_copy(
                    update={"id": node_id})
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"{node_id}.{where}: {first['msg']}") from None
            nodes = [changed if n.id == node_id else n for n in self.asset.nodes]
            self.asset = self.asset.model_copy(update={"nodes": nodes})
            self._nodes[node_id] = changed
        if prompt is not None:
            self.system_prompts[node_id] = prompt

    # --- history ------------------------------------------------------------------------------

    def export_dialog(self) -> SavedDialog:
        """The history, the state that decides future prompts and every branch (see ``runtime.dialogue.dialog_file``)."""
        return SavedDialog(self.history.copy(), dict(self.windows), dict(self.variables), dict(self.system_prompts),
                           self.seed_salt, self.tree.copy())

    def import_dialog(self, saved: SavedDialog, source: str = "<history>", *, foreign: bool = True) -> None:
        """Replace the conversation with ``saved``. Raises ``HistoryError`` (changing nothing)
        if it names nodes this asset does not have, or (``foreign``: a history from outside, not this
        agent's own conversation carried into its changed graph) variables the asset does not declare
        or replies by nodes it lacks."""
        problems = [
            Problem("error", "no Generate, GenerateAndSpeak or ToolCall node has this id in the asset", source,
                    field=f"system_prompts.{node_id}")
            for node_id in saved.system_prompts if not self._has_runtime_system_prompt(node_id)
        ]
        problems += unknown_node_problems(saved, set(self._nodes), source)
        if foreign:
            problems += self._foreign_problems(saved, source)
        if problems:
            raise HistoryError(problems)
        self.history = saved.history.copy()
        self.windows = dict(saved.windows)
        self.variables = {**self.asset.variables, **saved.variables}
        self.system_prompts = dict(saved.system_prompts)
        self.seed_salt = saved.seed_salt
        if saved.tree is not None:
            self.tree = saved.tree.copy()
        else:  # a history that kept no branches: one branch, its earlier states reconstructed
            self.journals = {}
            self.tree = ConversationTree.from_turns(self.history.turns, self._state())
        self.journals = {k: v for k, v in self.tree.state_after(self.tree.current).reading().items() if k in self._nodes}

    def _foreign_problems(self, saved: SavedDialog, source: str) -> list[Problem]:
        """A history from outside that names variables the asset does not declare (in its variables,
        or any turn's state) or a reply or tool call by a node the asset lacks (in any turn of the
        tree): each names its field, at most ``MAX_REPORTED_PROBLEMS``."""
        declared = ", ".join(self.asset.variables) or "none"
        problems: list[Problem] = []
        said: set[str] = set()  # each undeclared variable once, where it is first found

        def variables(names: Iterable[str], where: str) -> None:
            for name in names:
                if name not in self.asset.variables and name not in said:
                    said.add(name)
                    problems.append(Problem("error", f"variable {name!r} is not declared by the asset (its "
                                            f"variables: {declared}); declare it, or load the history into the asset "
                                            "it was saved from", source, field=f"{where}variables.{name}"))

        variables(saved.variables, "")
        nodes = sorted(saved.tree.nodes.values(), key=lambda n: n.id) if saved.tree is not None else []
        for node in nodes:
            variables(node.after.variables, f"turns[id {node.id}].state.")
        # a file's turns are its tree's (each named by its id); a history kept without a tree, its branch
        turns = [(f"turns[id {n.id}]", n.turn) for n in nodes] or \
            [(f"turns.{i}", t) for i, t in enumerate(saved.history.turns)]
        for where, turn in turns:
            for k, entry in enumerate(turn.entries):
                if entry.node not in self._nodes:
                    problems.append(Problem("error", f"written by {shown_name(entry.node)}, which is not a node of "
                                            "the asset; load the history into the asset it was saved from",
                                            source, field=f"{where}.entries.{k}.node"))
            if len(problems) >= MAX_REPORTED_PROBLEMS:
                break
        return problems[:MAX_REPORTED_PROBLEMS]

    def seed_history(self, turns: list[Turn]) -> None:
        """Start the conversation from ``turns`` (no summaries; every node's window starts at 0). The
        seeded turns are a new branch; earlier branches stay in the tree."""
        self.history = DialogHistory([Turn(t.player, list(t.entries)) for t in turns], [])
        self.windows = {}
        self.journals = {}  # no model read the seeded turns
        parent: int | None = None
        for turn in self.history.turns:
            parent = self.tree.add(parent, turn, self._state(), edited=True)
        self.tree.select(parent)

    def edit_turn(self, index: int, player: str | None = None, entries: list[Entry] | None = None) -> None:
        """Rewrite an earlier turn in place, keeping the turns after it. Prompts that include it change
        from there on; a summary that already covers it is not rewritten. The edited path is a new
        branch (marked edited); the original stays in the tree."""
        path = self.tree.path()
        turn = self.history.turns[index]
        edited = Turn(turn.player if player is None else player, list(turn.entries if entries is None else entries))
        parent = path[index - 1] if index else None
        for position in range(index, len(path)):
            old = self.tree.nodes[path[position]]
            parent = self.tree.add(parent, edited if position == index else old.turn, old.after,
                                   edited=old.edited or position == index, exact=old.exact)
        self.tree.select(parent)
        self.history.turns[index] = edited

    def truncate_history(self, count: int) -> None:
        """Keep only the first ``count`` turns (the same as ``rewind``)."""
        self.rewind(count)

    # --- branches: rewind, regenerate, edit and replay ------------------------------------------

    def _state(self) -> AgentState:
        return AgentState(tuple(self.history.summaries), dict(self.windows), dict(self.variables),
                          dict(self.system_prompts), dict(self.journals), self.seed_salt)

    def _go_to(self, turn_id: int | None) -> None:
        """Make ``turn_id`` the current turn: its path is the history, its state the agent's."""
        self.tree.select(turn_id)
        state = self.tree.state_after(turn_id)
        self.history = DialogHistory([Turn(t.player, list(t.entries)) for t in self.tree.turns()],
                                     list(state.summaries))
        self.windows = dict(state.windows)
        self.variables = {**self.asset.variables, **state.variables}
        self.system_prompts = {k: v for k, v in state.system_prompts.items() if self._has_runtime_system_prompt(k)}
        self.journals = {k: v for k, v in state.reading().items() if k in self._nodes}

    def go_to(self, turn_id: int | None) -> None:
        """Make ``turn_id`` the current turn (None: before the first), exactly as the agent was after it:
        its path is the history, its state the agent's (the seed salt stays as it is now)."""
        if turn_id is not None and turn_id not in self.tree.nodes:
            raise KeyError(f"no turn {turn_id} in this conversation")
        self._go_to(turn_id)

    def rewind(self, count: int) -> None:
        """Go back to before turn ``count`` (turns count from 0): the history, every node's window
        start, the summaries and the variables are exactly as they were then. The later turns stay in
        the tree as a branch (``select_turn`` goes back to them)."""
        path = self.tree.path()
        if not 0 <= count <= len(path):
            raise IndexError(f"cannot rewind to before turn {count + 1}: the conversation has {len(path)} turns")
        self._go_to(path[count - 1] if count else None)

    def select_turn(self, turn_id: int) -> None:
        """Follow the branch through ``turn_id`` to where it was last left (browse alternatives)."""
        if turn_id not in self.tree.nodes:
            raise KeyError(f"no turn {turn_id} in this conversation")
        self._go_to(self.tree.leaf_from(turn_id))

    def regenerate(self, index: int, **run: Any) -> TurnResult:
        """Run turn ``index`` again with its player line: a new alternative of that turn, or, when it
        comes out as one already did (the same seeds), that alternative (``TurnResult.repeated``). The
        turns after it stay on the old branch (``recorded_lines`` gives them to replay on the new one).
        On failure the conversation is as it was."""
        path = self.tree.path()
        line = self.tree.nodes[path[index]].turn.player
        return self._branch_from(index, line, edited=False, run=run)

    def edit_player_line(self, index: int, line: str, **run: Any) -> TurnResult:
        """Say ``line`` instead at turn ``index`` (a new, edited alternative of that turn)."""
        return self._branch_from(index, line, edited=True, run=run)

    def edit_reply(self, index: int, entries: list[Entry]) -> int:
        """Replace what the nodes wrote at turn ``index`` (the designer's own reply): a new, edited
        alternative of that turn with the same state after it; it becomes the current turn. Returns its id."""
        path = self.tree.path()
        old = self.tree.nodes[path[index]]
        turn = Turn(old.turn.player, list(entries))
        turn_id = self.tree.twin(old.parent, turn, old.after)
        if turn_id is None:
            turn_id = self.tree.add(old.parent, turn, old.after, edited=True, exact=old.exact)
        self._go_to(turn_id)
        return turn_id

    def keep_cut_turn(self, line: str, entries: list[Entry]) -> int:
        """Add a turn that did not run to its end (the player spoke over the reply): ``line`` and what
        was said of the reply, after the current turn, with the agent's state unchanged (no node read
        it). It is marked edited, as no model wrote it so. Returns its id."""
        turn = Turn(line, list(entries))
        self.history.turns.append(turn)
        turn_id = self.tree.add(self.tree.current, turn, self._state(), edited=True)
        self.tree.select(turn_id)
        return turn_id

    def recorded_lines(self, start: int) -> list[tuple[str, str]]:
        """The player lines (and the replies they got) of the current branch from turn ``start`` on:
        what ``replay`` sends again."""
        return [(node.turn.player, turn_reply(self.asset, node.turn)) for node in
                (self.tree.nodes[i] for i in self.tree.path()[start:])]

    def _branch_from(self, index: int, line: str, edited: bool, run: dict[str, Any]) -> TurnResult:
        before = self.tree.current
        self.rewind(index)
        try:
            return self.run_turn(line, edited=edited, **run)
        except BaseException:
            self._go_to(before)
            raise

    def reroll_seeds(self, salt: int) -> None:
        """Change every fixed seed by ``salt`` (0: the asset's own seeds): the same graph then writes
        other replies, reproducibly."""
        self.seed_salt = salt

    def seed_for(self, seed: int) -> int:
        """The seed a node with ``seed`` samples with (-1 stays random)."""
        return seed if seed < 0 else (seed + self.seed_salt) % 2**31

    # --- running a turn -----------------------------------------------------------------------

    def run_turn(
        self,
        player_line: str,
        instructions: str = "",
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
        tool_result: ToolResultFunction | None = None,
        edited: bool = False,
        mock_tools: bool = True,
        commit: Callable[[], bool] | None = None,
    ) -> TurnResult:
        """Run the graph once for ``player_line``, after the current turn (a new branch when the
        current turn already has later turns). Raises ``TurnError``, ``BackendError`` or
        ``TemplateError``/``InputError``; on any failure the agent is unchanged. ``mock_tools=False``
        asks ``tool_result`` for every tool call, mocked or not. A cancel set before the turn is kept
        cancels it, however late; ``commit``, when given, is asked last (False: cancelled), so a caller
        can tell a cancel that came in time from one that came after the turn was kept."""
        if not self._running.acquire(blocking=False):
            raise TurnError("a turn is already running for this agent")
        try:
            return self._run_turn(player_line, instructions, on_event, cancel or threading.Event(), tool_result,
                                  edited, mock_tools, commit)
        finally:
            self._running.release()

    def _run_turn(self, player_line, instructions, on_event, cancel, tool_result, edited=False,
                  mock_tools=True, commit=None) -> TurnResult:
        started = time.perf_counter()
        run = TurnState(player_line, instructions, on_event, cancel, tool_result, mock_tools=mock_tools)
        before = (list(self.history.summaries), dict(self.windows), dict(self.variables), dict(self.journals))
        try:
            with self.backend.stopping(cancel):
                self._walk(run, cancel)
            run.release_all()  # a reply no guard on this turn's path checked
            if cancel.is_set() or (commit is not None and not commit()):
                raise TurnCancelled("the turn was cancelled")
        except BaseException:
            self.history.summaries, self.windows, self.variables, self.journals = before
            raise

        index = len(self.history.turns)
        self.history.turns.append(Turn(player_line, run.entries))
        after = self._state()
        # A turn that came out as an alternative already did (a replay, or a regeneration with the same
        # seeds) is that alternative again: its later turns stay under it, and "2/2" never reads as "1/2".
        turn_id = self.tree.twin(self.tree.current, self.history.turns[-1], after)
        repeated = turn_id is not None
        if turn_id is None:
            turn_id = self.tree.add(self.tree.current, self.history.turns[-1], after, edited=edited)
        else:  # that alternative again, read ahead as it was after it: the next turn reads on as it did
            self.journals = {k: v for k, v in self.tree.nodes[turn_id].after.reading().items() if k in self._nodes}
        self.tree.select(turn_id)
        reply = "\n".join(r for r in run.replies if r)
        diagnostics = None
        if self.asset.enable_diagnostics:
            diagnostics = TurnDiagnostics(
                turn=index, player=player_line, instructions=instructions, path=run.path, nodes=run.nodes,
                reply=reply, total_ms=elapsed_ms(started),
                warnings=[f"{n.node}: {w}" for n in run.nodes for w in n.warnings], backend=self.backend.label,
                game_events=list(run.game_events),
            )
        run.emit(TurnFinished(index, reply, list(run.path)))
        fired = next((n for n in run.nodes if n.guard is not None and n.guard.policy), None)
        guard = TurnGuard(fired.guard.policy, fired.exit, fired.node) if fired is not None and fired.guard else TurnGuard()
        return TurnResult(index, reply, list(run.path), dict(run.slots), diagnostics, dict(run.prompts), turn_id,
                          self.backend.label, repeated, guard, list(run.game_events), dict(run.tags))

    def warm(self, line: str = "", cancel: threading.Event | None = None) -> dict[str, int]:
        """Read ahead, between turns: bring the cache of each node that has run and builds its prompt
        from the history (Generate, Generate and Speak, Tool Call) up to the prompt its next call
        starts with (``NodeBase.read_ahead``; ``line``: the start of the next turn's line, where
        it is known). A node on a branch this turn did not take would otherwise read every turn since
        it last ran at its next call, with the player waiting. Only the caches change, and the
        read-ahead is recorded after the current turn (``AgentState.warmed``): the next turn, and a
        replay of it, read on from it. Returns the tokens each node read; nothing while a turn runs,
        before the first turn, or on a backend with no cache to read into."""
        if self.tree.current is None or not self._running.acquire(blocking=False):
            return {}
        try:
            state = TurnState(line, "", None, cancel or threading.Event(), None)
            warmed: dict[str, DecodeJournal] = {}
            read: dict[str, int] = {}
            for node in self.asset.nodes:
                if state.cancel.is_set():
                    break
                if node.id not in self.journals or node.bypassed:
                    continue
                before = self.journals[node.id]
                try:
                    journal = node.read_ahead(NodeRun(self, state, node, NodeDiagnostics(node=node.id, type=node.type_name)),
                                              line)
                except (TurnError, BackendError, InputError) as exc:  # the next turn reports it
                    log.info("node %s: no read-ahead: %s", node.id, exc)
                    continue
                if journal is not None:
                    warmed[node.id] = journal
                    read[node.id] = journal.length - journal.shared(before)
            if warmed:
                self.tree.warm(self.tree.current, warmed)
            return read
        finally:
            self._running.release()

    def _walk(self, run: TurnState, cancel: threading.Event) -> None:
        """Run the graph's nodes from the start node to END."""
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

    def _run_node(self, node: NodeBase, run: TurnState) -> str:
        """Run one node; returns the id of the node to run next ('' is END)."""
        run.emit(NodeStarted(node.id, node.type_name))
        if node.id in self._held_replies:
            run.hold(node.id)
        started = time.perf_counter()
        diag = NodeDiagnostics(node=node.id, type=node.type_name, bypassed=node.bypassed)
        try:
            # A bypassed node is not run: the turn passes along its bypass port ('' when it has none: END).
            port = node.bypass_port() if node.bypassed else node.run(NodeRun(self, run, node, diag))
            exits = node.exits()
        except (TurnError, BackendError, InputError):
            raise
        except CallCancelled:  # Stop while a backend call other than generation ran (a token count)
            raise TurnCancelled("the turn was cancelled", node.id) from None
        # Any other failure of a node type's code (a plugin's above all, SystemExit included) fails the
        # turn, naming the node and its type, and the turn is rolled back; only Ctrl+C on the main
        # thread goes on as it is.
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
                raise
            log.warning("node %s (%s) raised", node.id, node.type_name, exc_info=exc)
            raise TurnError(f"the {node.type_name} node failed: {failure_text(exc)}", node.id) from exc
        if not isinstance(port, str) or (port not in exits and not (node.bypassed and not exits)):
            raise TurnError(f"the {node.type_name} node took exit {str(port)[:MAX_PORT_CHARS]!r}, which it does not "
                            f"have (its exits: {', '.join(map(str, exits)) or 'none'})", node.id)
        next_node = exits.get(port, END)
        diag.exit, diag.next_node = port, next_node
        diag.timings.total_ms = elapsed_ms(started)
        for warning in diag.warnings:
            log.warning("%s: %s", node.id, warning)
            run.emit(TurnWarning(node.id, warning))
        run.nodes.append(diag)
        for mark in self.asset.game_events:
            if mark.node == node.id and mark.exit in ("", port):
                run.game_events.append(mark.name)
                run.emit(GameEventReached(node.id, mark.name, mark.exit))
        for name in self.asset.reply_tags:
            if name in run.slots and run.tags.get(name) != str(run.slots[name]):
                run.tags[name] = value = str(run.slots[name])
                run.emit(ReplyTagged(node.id, name, value))
        run.emit(NodeFinished(node.id, node.type_name, diag.output, port, next_node))
        return next_node

    # --- what node types share -----------------------------------------------------------------

    def token_counter(self, model: str) -> Callable[[str], int]:
        """Token counts by ``model``'s tokenizer, cached (the same texts are counted every turn).
        The cache keeps whole numbers only: a backend that answers anything else (a list of ids, a
        negative count) is a ``BackendError`` here, not a list kept for the agent's lifetime."""
        counts = self._token_counts

        def count(text: str) -> int:
            key = (model, text)
            found = counts.get(key)
            if found is not None:
                counts.move_to_end(key)  # least recently used first: a long history keeps its counts
                return found
            counted = self.backend.count_tokens(model, text)
            if isinstance(counted, bool) or not isinstance(counted, int):
                raise BackendError(f"{self.backend.label} counted a text's tokens as a "
                                   f"{type(counted).__name__}, not a whole number")
            if counted < 0:
                raise BackendError(f"{self.backend.label} counted {counted} tokens in a text; a count is never "
                                   "negative")
            found = counts[key] = int(counted)  # a plain int, never a subclass carrying more
            if len(counts) > TOKEN_COUNT_CACHE:
                counts.popitem(last=False)
            return found

        return count

    def folder_of(self, node_id: str) -> str | None:
        """The folder relative paths in node ``node_id`` are read from: its behaviour file's for a
        behaviour's node, else the asset's (``asset_dir``)."""
        return self._folders.get(node_id, self.asset_dir)

    def node_cache(self, node_id: str) -> dict[str, Any]:
        """What a node keeps across turns (a Retrieve node's index); gone with the agent."""
        return self._node_caches.setdefault(node_id, {})


def noting_nodes(agent: Agent, running: Running, of: str, on_event: EventCallback | None = None) -> EventCallback:
    """``on_event`` for a turn of ``agent`` that first has ``running`` say which node runs now and on which
    model (``runtime.crashes.turn_note``), on the turn's own thread: a native crash in that node then
    names it. ``of`` names the conversation ("chat.json", "session npc-1 (chat.json)")."""

    def noted(event: Event) -> None:
        if isinstance(event, NodeStarted):
            node = agent._nodes.get(event.node)
            model = agent.model_for(node) if node is not None and node.uses_model() else ""
            # The history gains the turn only once it ends (a regeneration first goes back to before it).
            running.say(turn_note(len(agent.history.turns) + 1, of, event.node, model))
        if on_event is not None:
            on_event(event)

    return noted


def turn_reply(asset: Asset, turn: Turn) -> str:
    """What the player heard at ``turn`` (a run turn's ``reply``): the replies of player-facing nodes
    that replay, joined; a reply whose node is gone from ``asset`` still counts."""
    out = []
    ids = set(asset.node_ids())
    for entry in turn.entries:
        node = asset.node(entry.node) if entry.node in ids else None
        if isinstance(entry, Reply) and entry.replay and (node is None or node.PLAYER_FACING):
            out.append(entry.text)
    return "\n".join(t for t in out if t)
