"""The conversation as a tree of turns: every reply ever generated, each branch, and the agent's
exact state after each turn, so a designer can rewind, regenerate, edit and replay.

The dialog history (``runtime.dialogue.history.DialogHistory``) is one path through this tree: from the
first turn to the turn the agent is at (``current``). A turn's alternatives are its siblings
(turns with the same parent): regenerating turn N adds one, and so does saying something new
after rewinding to before turn N. Nothing is ever removed; the later turns of an abandoned path
stay in the tree as a branch to come back to.

Each turn keeps the state that, with the turns on its path, decides every later prompt: the
summaries written so far, every node's window start, the agent variables and any system prompts
changed at runtime (``AgentState``). Going back to a turn restores exactly that; turn slots live
for one turn and need nothing. A turn taken from a history that had no tree (an older file, a
seeded history) gets a reconstructed state and ``exact`` False.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from runtime.dialogue.history import SavedDialog, Summary, Turn
from runtime.models.journal import DecodeJournal
from runtime.names import VariableValue


@dataclass(frozen=True)
class AgentState:
    """What, besides the turns, decides an agent's future prompts."""

    summaries: tuple[Summary, ...] = ()
    windows: Mapping[str, int] = field(default_factory=dict)  # node id -> window start
    variables: Mapping[str, VariableValue] = field(default_factory=dict)
    system_prompts: Mapping[str, str] = field(default_factory=dict)  # node id -> system prompt set at runtime
    # node id -> how its KV cache was read up to here (a cache rebuilt this way reads on exactly as it did)
    journals: Mapping[str, DecodeJournal] = field(default_factory=dict)
    # The seed salt the turn was generated with (re-rolling seeds changes it for later turns only):
    # going back to a turn does not restore it, but a replay of the turn uses it.
    seed_salt: int = 0
    # node id -> its journal after a read-ahead that followed the turn (``Agent.warm``): the cache
    # read on, between turns, through the history the node's next prompt starts with. The next turn
    # reads on from it; a replay of that turn rebuilds it as it was read.
    warmed: Mapping[str, DecodeJournal] = field(default_factory=dict)

    def reading(self) -> dict[str, DecodeJournal]:
        """Each node's journal as the next turn finds it: as this turn left it, or as read ahead."""
        return {**self.journals, **self.warmed}


@dataclass(frozen=True)
class TurnNode:
    """One turn in the tree: what was said and written, and the agent's state after it."""

    id: int
    parent: int | None  # the turn before it on its path; None for a first turn
    turn: Turn
    after: AgentState
    edited: bool = False  # the designer edited its player line or a reply
    exact: bool = True  # False: ``after`` was reconstructed (a history that had no tree)


class ConversationTree:
    """Turns by id, their children, which branch was followed last, and the current turn."""

    def __init__(self, start: AgentState | None = None) -> None:
        self.start = start or AgentState()  # the state before the first turn
        self.nodes: dict[int, TurnNode] = {}
        self.children: dict[int | None, list[int]] = {None: []}
        self.followed: dict[int | None, int] = {}  # parent -> the child last followed from it
        self.current: int | None = None
        self._next_id = 0

    # --- reading ------------------------------------------------------------------------------

    def path(self, turn_id: int | None = ...) -> list[int]:  # type: ignore[assignment]
        """Turn ids from a first turn to ``turn_id`` (default: the current turn)."""
        node = self.current if turn_id is ... else turn_id
        out: list[int] = []
        while node is not None:
            out.append(node)
            node = self.nodes[node].parent
        out.reverse()
        return out

    def turns(self, turn_id: int | None = ...) -> list[Turn]:  # type: ignore[assignment]
        return [self.nodes[i].turn for i in self.path(turn_id)]

    def state_after(self, turn_id: int | None) -> AgentState:
        return self.start if turn_id is None else self.nodes[turn_id].after

    def alternatives(self, turn_id: int) -> list[int]:
        """The turns that could stand where ``turn_id`` stands (its siblings, itself included), oldest first."""
        return list(self.children[self.nodes[turn_id].parent])

    def twin(self, parent: int | None, turn: Turn, after: AgentState) -> int | None:
        """The turn after ``parent`` that says and writes what ``turn`` does and leaves the state
        ``after`` leaves (the seed salt aside: it only says how the same turn was sampled), if there
        is one: a replayed or regenerated turn that came out the same is that turn, not another
        alternative that reads the same (a designer could not tell the two apart)."""
        for sibling in self.children.get(parent, []):
            node = self.nodes[sibling]
            if node.turn == turn and replace(node.after, seed_salt=after.seed_salt, warmed=after.warmed) == after:
                return sibling
        return None

    def branch_steps(self, turn_id: int, path: list[int] | None = None) -> list[tuple[int, int, int]]:
        """Where ``turn_id``'s path leaves ``path`` (default: the current path) and which alternative it
        takes at each turn from there that has more than one: (turn index from 0, alternative from 1,
        alternatives). Two turns of the same depth off the path always differ in these."""
        path = self.path() if path is None else path
        own = self.path(turn_id)
        fork = next((i for i, (a, b) in enumerate(zip(own, path)) if a != b), min(len(own), len(path)))
        steps = []
        for index in range(fork, len(own)):
            siblings = self.alternatives(own[index])
            if len(siblings) > 1:
                steps.append((index, siblings.index(own[index]) + 1, len(siblings)))
        return steps

    def leaf_from(self, turn_id: int | None) -> int | None:
        """The end of the branch last followed from ``turn_id``."""
        node = turn_id
        while True:
            if node in self.followed:
                node = self.followed[node]
            elif self.children.get(node):
                node = self.children[node][-1]  # never followed (a loaded file): the newest
            else:
                return node

    def parents_first(self) -> list[int]:
        """Every turn id, each after its parent, alternatives in their order: depth first, so a branch
        reads from top to bottom. (Ids say nothing of the order: a file may give a turn a smaller id
        than its parent's.)"""
        order: list[int] = []
        stack = list(reversed(self.children.get(None, [])))
        while stack:
            turn_id = stack.pop()
            order.append(turn_id)
            stack.extend(reversed(self.children.get(turn_id, [])))
        return order

    def depth(self, turn_id: int) -> int:
        return len(self.path(turn_id)) - 1

    def __len__(self) -> int:
        return len(self.nodes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConversationTree):
            return NotImplemented
        return (self.start, self.nodes, self.children, self.current, self.followed) == (
            other.start, other.nodes, other.children, other.current, other.followed)

    __hash__ = None  # type: ignore[assignment]

    # --- changing -----------------------------------------------------------------------------

    def add(self, parent: int | None, turn: Turn, after: AgentState, edited: bool = False,
            exact: bool = True, turn_id: int | None = None) -> int:
        """Add a turn after ``parent`` (None: a first turn); returns its id. Does not move ``current``."""
        if parent is not None and parent not in self.nodes:
            raise KeyError(parent)
        new_id = self._next_id if turn_id is None else turn_id
        if new_id in self.nodes:
            raise ValueError(f"turn id {new_id} is taken")
        self._next_id = max(self._next_id, new_id + 1)
        self.nodes[new_id] = TurnNode(new_id, parent, turn, after, edited, exact)
        self.children.setdefault(parent, []).append(new_id)
        self.children.setdefault(new_id, [])
        return new_id

    def warm(self, turn_id: int, journals: Mapping[str, DecodeJournal]) -> None:
        """Record a read-ahead after ``turn_id``: ``journals`` are those nodes' journals now."""
        node = self.nodes[turn_id]
        self.nodes[turn_id] = replace(node, after=replace(node.after, warmed={**node.after.warmed, **journals}))

    def select(self, turn_id: int | None) -> None:
        """Make ``turn_id`` the current turn (None: before the first turn), and remember its path as
        the branch followed from each turn on it."""
        if turn_id is not None and turn_id not in self.nodes:
            raise KeyError(turn_id)
        self.current = turn_id
        path = self.path(turn_id)
        for parent, child in zip([None, *path[:-1]], path):
            self.followed[parent] = child

    def copy(self) -> ConversationTree:
        """A copy whose structure can change without touching this one (turn nodes are immutable)."""
        other = ConversationTree(self.start)
        other.nodes = dict(self.nodes)
        other.children = {k: list(v) for k, v in self.children.items()}
        other.followed = dict(self.followed)
        other.current = self.current
        other._next_id = self._next_id
        return other

    @classmethod
    def from_turns(cls, turns: list[Turn], final: AgentState, start: AgentState | None = None,
                   exact: bool = False) -> ConversationTree:
        """A tree of one path, from a history that kept no tree: each turn's state is reconstructed
        (the summaries that cover no later turn, window starts no later than it) except the last,
        which is ``final`` (with no turns, ``final`` is the start)."""
        if start is None:
            start = AgentState(variables=dict(final.variables), system_prompts=dict(final.system_prompts)) if turns \
                else final
        tree = cls(start)
        parent: int | None = None
        for index, turn in enumerate(turns):
            last = index == len(turns) - 1
            after = final if last else approximate_state(final, index + 1)
            parent = tree.add(parent, turn, after, exact=exact or last)
        tree.select(parent)
        return tree


def approximate_state(final: AgentState, count: int) -> AgentState:
    """The state after the first ``count`` turns, as near as ``final`` tells: the summaries that
    cover only those turns, and window starts no later than ``count``."""
    return AgentState(
        tuple(s for s in final.summaries if s.covered_through < count),
        {k: min(v, count) for k, v in final.windows.items()},
        dict(final.variables),
        dict(final.system_prompts),
        seed_salt=final.seed_salt,
    )


def keep_nodes(saved: SavedDialog, node_ids: Collection[str]) -> SavedDialog:
    """``saved`` with window starts and runtime system prompts only for ``node_ids``, in its own
    state and in every state of its tree: what a graph that lost nodes continues from
    (``Agent.import_dialog`` refuses a history that names nodes the asset lacks). ``saved`` is unchanged."""
    keep = set(node_ids)

    def kept(state: AgentState) -> AgentState:
        if all(k in keep for k in (*state.windows, *state.system_prompts, *state.journals)):
            return state
        return AgentState(state.summaries, {k: v for k, v in state.windows.items() if k in keep}, state.variables,
                          {k: v for k, v in state.system_prompts.items() if k in keep},
                          {k: v for k, v in state.journals.items() if k in keep}, state.seed_salt)

    tree = None
    if saved.tree is not None:
        tree = saved.tree.copy()
        tree.start = kept(tree.start)
        states: dict[int, AgentState] = {}  # by id: states shared between turns stay shared
        for turn_id, node in tree.nodes.items():
            after = states.get(id(node.after))
            if after is None:
                after = states[id(node.after)] = kept(node.after)
            if after is not node.after:
                tree.nodes[turn_id] = replace(node, after=after)
    return SavedDialog(saved.history.copy(), {k: v for k, v in saved.windows.items() if k in keep},
                       dict(saved.variables), {k: v for k, v in saved.system_prompts.items() if k in keep},
                       saved.seed_salt, tree)
