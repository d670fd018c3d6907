"""The dialog file format (``parley-dialog``, written as version 3; versions 1 and 2 are read).

It holds the whole conversation tree (``runtime.dialogue.tree``): every turn with the node of each
reply and its tool pairs, every alternative, the agent's state after each turn (summaries, each
node's window start, the agent variables, system prompts changed at runtime), the turn the
conversation is at and the branch last followed from each turn. Exporting then importing it gives
the same future prompts, and loading what was saved gives what was saved.

Version 3 writes each turn once (in ``turns``, each after its parent, one per line) and each turn's
state as what changed in it; the current branch is the path to ``current``. Version 2 wrote the
current branch twice (top-level ``turns`` and ``branches``): it is read only when the two agree.
Version 1 (no tree) loads as one branch whose earlier states are reconstructed.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError
from pydantic_core import ErrorDetails

from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Summary, ToolExchange, Turn
from runtime.dialogue.tree import AgentState, ConversationTree
from runtime.files.located import (
    MISSING_FIELD,
    UNKNOWN_KEY,
    Place,
    Wording,
    error_message,
    located_problems,
    validator_says,
)
from runtime.files.reading import MAX_INPUT_BYTES, parse_input_json, read_input_text
from runtime.files.writing import atomic_write_text
from runtime.models.journal import EMPTY, MAX_JOURNAL_TOKENS, Chunk, DecodeJournal
from runtime.names import (  # noqa: F401  (REPLACEMENT, VariableValue and without_surrogates: kept importable from here)
    ID_PATTERN,
    NODE_PATH_PATTERN,
    REPLACEMENT,
    SLOT_PATTERN,
    FreeFormData,
    VariableValue,
    lone_surrogates,
    shown_name,
    without_surrogates,
)
from runtime.problems import InputError, Problem

HISTORY_FORMAT = "parley-dialog"
HISTORY_VERSION = 4  # the version written; versions 1 to 3 are still read (``READ_VERSIONS``)
READ_VERSIONS = (1, 2, 3, 4)

# The largest history file written: the largest any reader of a user's file takes. A history that
# would be larger is not written (the file there is kept), since it could never be loaded again.
MAX_HISTORY_BYTES = MAX_INPUT_BYTES
# A file wrong in thousands of places is reported by its first few problems: enough to act on.
MAX_REPORTED_PROBLEMS = 20


class HistoryError(InputError):
    """A dialog history file that cannot be read (or written); every problem names the file and field."""


class HistoryConflict(HistoryError):
    """The file changed since the conversation was read from it (another process wrote it): not replaced."""


# --- the file format --------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Keys name nodes and variables; pydantic's patterns match the whole key ("x\n" is refused). A node
# is named as the agent runs it: a behaviour's nodes by namespaced ids (guard/reply).
NodeKey = Annotated[str, Field(pattern=NODE_PATH_PATTERN)]
VariableName = Annotated[str, Field(pattern=SLOT_PATTERN)]
WindowStart = Annotated[int, Field(ge=0)]
# JSON has no NaN or infinity (Python's reader takes them): refused, so what loads saves and loads the same.
FileVariableValue = bool | int | Annotated[float, Field(allow_inf_nan=False)] | str
SummaryIndex = Annotated[int, Field(ge=0)]
TurnId = Annotated[int, Field(ge=0)]


class ReplyInFile(_Strict):
    kind: Literal["reply"] = "reply"
    node: str = Field(pattern=NODE_PATH_PATTERN, description="Id of the node that wrote the reply.")
    text: str
    replay: bool = Field(True, description="False when the node's history_role was none: never replayed.")


class ToolExchangeInFile(_Strict):
    kind: Literal["tool"]
    node: str = Field(pattern=NODE_PATH_PATTERN, description="Id of the ToolCall node.")
    tool: str = Field(pattern=SLOT_PATTERN)
    # as an asset's metadata: what Parley can write back (nested 260 deep, an import took them and every
    # export failed)
    arguments: FreeFormData = Field(default_factory=dict)
    result: str
    replay: bool = Field(True, description="False when the node's disposition was omit.")


def _entry_kind(value: Any) -> str | None:
    # "kind" may be left out of a reply: seeded histories are mostly replies.
    if isinstance(value, dict):
        kind = value.get("kind", "reply")
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


EntryInFile = Annotated[
    Annotated[ReplyInFile, Tag("reply")] | Annotated[ToolExchangeInFile, Tag("tool")],
    Discriminator(_entry_kind, custom_error_type="entry_kind",
                  custom_error_message="an entry's kind is 'reply' or 'tool'"),
]


class TurnInFile(_Strict):
    player: str = Field(description="The player's line, exactly as said.")
    entries: list[EntryInFile] = Field(default_factory=list)


class SummaryInFile(_Strict):
    text: str
    covered_through: int = Field(ge=0, description="Index of the last turn covered (turns count from 0).")
    folded_turns: int = Field(ge=1)
    node: str = Field("", pattern=rf"^({NODE_PATH_PATTERN[1:-1]})?$")
    summary_chars: int | None = Field(None, description="Written for readers by version 2; recomputed on import.")


class StateInFile(_Strict):
    summaries: list[SummaryIndex] = Field(default_factory=list, description="Indexes into the summaries, oldest first.")
    windows: dict[NodeKey, WindowStart] = Field(default_factory=dict)
    variables: dict[VariableName, FileVariableValue] = Field(default_factory=dict)
    system_prompts: dict[NodeKey, str] = Field(default_factory=dict)


class ChunkInFile(_Strict):
    tokens: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, description="Token ids read by one decode call.")
    kept: int | None = Field(None, ge=1, description="Cells of the chunk the cache still held (default: all).")
    singles: bool = Field(False, description="Each token was read by a call of its own (generated tokens).")


class JournalChangeInFile(_Strict):
    """Version 4: how a node's decode journal changed in a turn: cut to ``keep`` cells, then ``chunks`` read."""

    keep: int = Field(0, ge=0)
    chunks: list[ChunkInFile] = Field(default_factory=list)


class StateChangeInFile(_Strict):
    """Version 3: a turn's state as what differs from the state before it (its parent's, or the
    start's for a first turn); a part left out is the same as there."""

    summaries: list[SummaryIndex] | None = None
    windows: dict[NodeKey, WindowStart] | None = None
    variables: dict[VariableName, FileVariableValue] | None = None
    system_prompts: dict[NodeKey, str] | None = None
    journals: dict[NodeKey, JournalChangeInFile] | None = Field(
        None, description="Version 4: the nodes whose decode journal changed in the turn, and how.")
    seed_salt: int | None = Field(None, ge=0, lt=2**31, description="Version 4: the seed salt the turn was "
                                  "generated with, when it differs from the turn before it.")
    warmed: dict[NodeKey, JournalChangeInFile] | None = Field(
        None, description="Version 4: the nodes whose cache was read ahead after the turn, each as a change of "
        "its journal after the turn (see journals).")


class BranchTurnInFile(TurnInFile):
    id: TurnId
    parent: int | None = Field(None, ge=0, description="The turn before it; null for a first turn.")
    edited: bool = False
    exact: bool = True
    state: StateInFile = Field(default_factory=StateInFile, description="The agent's state after the turn.")


class TreeTurnInFile(TurnInFile):
    """Version 3: one turn of the tree, listed after its parent."""

    id: TurnId
    parent: int | None = Field(None, ge=0, description="The turn before it; null (or left out) for a first turn.")
    edited: bool = False
    exact: bool = True
    state: StateChangeInFile = Field(default_factory=StateChangeInFile,
                                     description="The agent's state after the turn, as what changed in it.")
    followed: int | None = Field(None, ge=0, description="The turn after it that was followed last.")


class BranchesInFile(_Strict):
    start: StateInFile = Field(default_factory=StateInFile)
    summaries: list[SummaryInFile] = Field(default_factory=list)
    turns: list[BranchTurnInFile] = Field(default_factory=list)
    current: int | None = None


class DialogFile(_Strict):
    """Versions 1 and 2 (and a seeded file without a version): the current branch's turns at the top
    level; version 2 adds the tree (``branches``), whose current branch they must be."""

    format: Literal["parley-dialog"] = HISTORY_FORMAT
    version: Literal[1, 2] = 2
    turns: list[TurnInFile] = Field(default_factory=list)
    summaries: list[SummaryInFile] = Field(default_factory=list)
    windows: dict[NodeKey, WindowStart] = Field(default_factory=dict)
    variables: dict[VariableName, FileVariableValue] = Field(default_factory=dict)
    system_prompts: dict[NodeKey, str] = Field(default_factory=dict)
    branches: BranchesInFile | None = None
    seed_salt: int = Field(0, ge=0, description="Added to every fixed seed: re-rolled seeds give other replies.")


class TreeDialogFile(_Strict):
    """Version 3: every turn once, in the tree; the current branch is the path to ``current``."""

    format: Literal["parley-dialog"] = HISTORY_FORMAT
    version: Literal[3, 4]
    seed_salt: int = Field(0, ge=0, description="Added to every fixed seed: re-rolled seeds give other replies.")
    current: int | None = Field(None, ge=0, description="The turn the conversation is at; null: before the first.")
    followed: int | None = Field(None, ge=0, description="The first turn that was followed last.")
    variables: dict[VariableName, FileVariableValue] = Field(
        default_factory=dict, description="The agent variables now (they may be changed between turns).")
    system_prompts: dict[NodeKey, str] = Field(
        default_factory=dict, description="System prompts set at runtime, now.")
    start: StateInFile = Field(default_factory=StateInFile, description="The state before the first turn.")
    summaries: list[SummaryInFile] = Field(default_factory=list, description="Every summary of the tree, once.")
    # Each a TreeTurnInFile, checked one by one (``_tree_turns``): one call into pydantic per turn,
    # not one for them all, so a thread reading a large history never holds up the others for long.
    turns: list[Any] = Field(default_factory=list)


# --- writing ----------------------------------------------------------------------------------


def _entry_dict(entry: Reply | ToolExchange) -> dict[str, Any]:
    if isinstance(entry, Reply):  # "kind" and "replay" are left out when they are the defaults
        out: dict[str, Any] = {"node": entry.node, "text": entry.text}
    else:
        out = {"kind": "tool", "node": entry.node, "tool": entry.tool, "arguments": entry.arguments,
               "result": entry.result}
    if not entry.replay:
        out["replay"] = False
    return out


def _summary_dict(s: Summary) -> dict[str, Any]:
    out: dict[str, Any] = {"text": s.text, "covered_through": s.covered_through, "folded_turns": s.folded_turns}
    if s.node:
        out["node"] = s.node
    return out


def written_tree(saved: SavedDialog) -> ConversationTree:
    """The tree a file of ``saved`` holds: its own, or, for a history that kept none, its turns as
    one branch with their earlier states reconstructed (as ``Agent.import_dialog`` makes it)."""
    if saved.tree is not None:
        return saved.tree
    final = AgentState(tuple(saved.history.summaries), dict(saved.windows), dict(saved.variables),
                       dict(saved.system_prompts))
    return ConversationTree.from_turns(saved.history.turns, final)


def dumps_history(saved: SavedDialog) -> str:
    """The file's text (version 3): every turn of the tree once, on a line of its own, with its
    state as what changed in it. The history's turns, summaries and window starts are the current
    branch's; its variables and runtime system prompts are written as they are now. Lone surrogates
    (which an asset's ``\\ud800`` escape can put into a reply) are written as U+FFFD: the file stays
    UTF-8 that any JSON reader takes, and saving never fails."""
    with _no_garbage_collection():
        return _dumps(saved)


def _dumps(saved: SavedDialog) -> str:
    tree = written_tree(saved)
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    pool: dict[Summary, int] = {}

    def index(summary: Summary) -> int:
        return pool.setdefault(summary, len(pool))

    start = tree.start
    head: dict[str, Any] = {
        "format": HISTORY_FORMAT, "version": HISTORY_VERSION, "seed_salt": saved.seed_salt,
        "current": tree.current, "followed": tree.followed.get(None),
        "variables": dict(saved.variables), "system_prompts": dict(sorted(saved.system_prompts.items())),
        "start": {"summaries": [index(s) for s in start.summaries], "windows": dict(sorted(start.windows.items())),
                  "variables": dict(start.variables), "system_prompts": dict(sorted(start.system_prompts.items()))},
    }
    turns: list[str] = []
    for turn_id in tree.parents_first():
        node = tree.nodes[turn_id]
        before = tree.state_after(node.parent)
        after = node.after
        record: dict[str, Any] = {"id": turn_id}
        if node.parent is not None:
            record["parent"] = node.parent
        record["player"] = node.turn.player
        record["entries"] = [_entry_dict(e) for e in node.turn.entries]
        if node.edited:
            record["edited"] = True
        if not node.exact:
            record["exact"] = False
        change: dict[str, Any] = {}
        if after.summaries != before.summaries:
            change["summaries"] = [index(s) for s in after.summaries]
        if after.windows != before.windows:
            change["windows"] = dict(sorted(after.windows.items()))
        if after.variables != before.variables:
            change["variables"] = dict(after.variables)
        if after.system_prompts != before.system_prompts:
            change["system_prompts"] = dict(sorted(after.system_prompts.items()))
        if after.journals != before.journals:
            journals = {k: j.change_from(before.journals.get(k, EMPTY)) for k, j in sorted(after.journals.items())
                        if j != before.journals.get(k, EMPTY)}
            journals.update({k: {"keep": 0} for k in before.journals if k not in after.journals})
            if journals:
                change["journals"] = journals
        if after.seed_salt != before.seed_salt:
            change["seed_salt"] = after.seed_salt
        if after.warmed:
            change["warmed"] = {k: j.change_from(after.journals.get(k, EMPTY)) for k, j in sorted(after.warmed.items())}
        if change:
            record["state"] = change
        followed = tree.followed.get(turn_id)
        if followed is not None:
            record["followed"] = followed
        turns.append(encode(record))
    summaries = [encode(_summary_dict(s)) for s in pool]  # in the order of their indexes
    text = (encode(head)[:-1] + ',\n"summaries":' + _lines(summaries) + ',\n"turns":' + _lines(turns) + "}\n")
    return without_surrogates(text)


def _lines(items: list[str]) -> str:
    return "[\n" + ",\n".join(items) + "\n]" if items else "[]"


def history_to_dict(saved: SavedDialog) -> dict[str, Any]:
    """The file's JSON value (what ``dumps_history`` writes)."""
    return json.loads(dumps_history(saved))


# --- reading ----------------------------------------------------------------------------------


def history_from_dict(raw: Any, source: str = "<history>", check_surrogates: bool = True) -> SavedDialog:
    """Check and convert a parsed dialog file (any version read). Raises ``HistoryError`` naming
    every problem. What loads always has a tree (one branch for a file that kept none), and
    saving it and loading that again gives the same value. (``check_surrogates`` False: the
    caller knows no text in ``raw`` holds a lone surrogate.)"""
    if not isinstance(raw, dict):
        raise HistoryError([Problem("error", f"a dialog history is a JSON object, not {_json_type(raw)}", source)])
    version = raw.get("version", 2)
    if isinstance(version, int) and not isinstance(version, bool) and version > HISTORY_VERSION:
        raise HistoryError([Problem(
            "error", f"this history is version {version}; this Parley Studio reads up to version {HISTORY_VERSION}",
            source, field="version",
        )])
    model: type[DialogFile | TreeDialogFile] = TreeDialogFile if version in (3, 4) else DialogFile
    try:
        record = model.model_validate(raw)
    except ValidationError as exc:
        raise HistoryError(located_problems(exc, source, _field_place, _message)) from None
    except RecursionError:
        raise HistoryError([Problem("error", "nested too deeply", source)]) from None
    turns = _tree_turns(record.turns, source) if isinstance(record, TreeDialogFile) else None
    surrogates = _surrogate_problems(raw, source) if check_surrogates else []
    if surrogates:
        raise HistoryError(surrogates)
    if isinstance(record, TreeDialogFile):
        return _from_tree_file(record, turns or [], source)
    return _from_flat_file(record, source)


def _tree_turns(raw_turns: list[Any], source: str) -> list[TreeTurnInFile]:
    turns: list[TreeTurnInFile] = []
    problems: list[Problem] = []
    for i, raw in enumerate(raw_turns):
        try:
            turns.append(TreeTurnInFile.model_validate(raw))
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                err["loc"] = ("turns", i, *err["loc"])
                where, said = _field_place(err), _message(err)
                problems.append(Problem("error", said, source, field=where.field))
            if len(problems) >= MAX_REPORTED_PROBLEMS:
                break
        except RecursionError:
            problems.append(Problem("error", "nested too deeply", source, field=f"turns.{i}"))
    if problems:
        raise HistoryError(problems[:MAX_REPORTED_PROBLEMS])
    return turns


def _from_tree_file(record: TreeDialogFile, turns: list[TreeTurnInFile], source: str) -> SavedDialog:
    tree = _tree(record.summaries, record.start, turns, record.current, record.followed, "", True, source)
    state = tree.state_after(tree.current)
    history = DialogHistory(tree.turns(), list(state.summaries))
    return SavedDialog(history, dict(state.windows), dict(record.variables), dict(record.system_prompts),
                       seed_salt=record.seed_salt, tree=tree)


def _from_flat_file(record: DialogFile, source: str) -> SavedDialog:
    problems = _flat_problems(record, source)
    if problems:
        raise HistoryError(problems)
    turns = [_turn(t) for t in record.turns]
    summaries = [_summary(s) for s in record.summaries]
    saved = SavedDialog(DialogHistory(turns, summaries), dict(record.windows), dict(record.variables),
                        dict(record.system_prompts), seed_salt=record.seed_salt)
    if record.branches is None:  # a history that kept no tree: one branch, its earlier states reconstructed
        saved.tree = written_tree(saved)
        return saved
    b = record.branches
    saved.tree = _tree(b.summaries, b.start, b.turns, b.current, None, "branches.", False, source)
    problems = _differences(saved, saved.tree, source)
    if problems:
        raise HistoryError(problems)
    return saved


def _flat_problems(record: DialogFile, source: str) -> list[Problem]:
    count = len(record.turns)
    problems = _state_problems([s.covered_through for s in record.summaries], dict(record.windows), count, source,
                               lambda i: f"summaries.{i}.covered_through", "windows")
    return problems[:MAX_REPORTED_PROBLEMS]


def _differences(saved: SavedDialog, tree: ConversationTree, source: str) -> list[Problem]:
    """A version 2 file's turns, summaries and window starts are its current branch's: where they
    differ, the file is refused (which of the two is meant cannot be told)."""
    def problem(field: str, what: str) -> Problem:
        return Problem("error", f"{what}, but a version 2 history's top level is its current branch "
                       "(branches.current); make them the same, or remove branches", source, field=field)

    branch = tree.turns()
    state = tree.state_after(tree.current)
    turns = saved.history.turns
    if len(turns) != len(branch):
        return [problem("turns", f"{len(turns)} turns, where the current branch has {len(branch)}")]
    for i, (mine, theirs) in enumerate(zip(turns, branch)):
        if mine != theirs:
            return [problem(f"turns.{i}", f"turn {i} differs from the current branch's")]
    if saved.history.summaries != list(state.summaries):
        return [problem("summaries", "the summaries differ from the current branch's")]
    if saved.windows != dict(state.windows):
        node = next(k for k in sorted({*saved.windows, *state.windows})
                    if saved.windows.get(k) != state.windows.get(k))
        return [problem(f"windows.{shown_name(node)}", f"the window start {saved.windows.get(node)} differs from "
                        f"the current branch's ({state.windows.get(node)})")]
    return []


def _state_problems(covered: list[int], windows: dict[str, int], count: int, source: str,
                    summary_field: Callable[[int], str], windows_field: str) -> list[Problem]:
    """What is wrong with a state after ``count`` turns: summaries that cover turns not there yet
    or go back, window starts past the turns."""
    problems: list[Problem] = []
    previous = -1
    for i, through in enumerate(covered):
        if through >= count:
            problems.append(Problem("error", f"covered_through is {through}, but {_turns_lead(count)} to here "
                                    "(they count from 0)", source, field=summary_field(i)))
        elif through < previous:
            problems.append(Problem("error", "covered_through goes back; summaries must be in the order written",
                                    source, field=summary_field(i)))
        previous = max(previous, through)
    for node, start in windows.items():
        if start > count:
            problems.append(Problem("error", f"the window starts at turn {start}, but {_turns_lead(count)} to here",
                                    source, field=f"{windows_field}.{shown_name(node)}"))
    return problems


def _turns_lead(count: int) -> str:
    return "1 turn leads" if count == 1 else f"{count} turns lead"


def _turn(t: TurnInFile) -> Turn:
    return Turn(t.player, [
        Reply(e.node, e.text, e.replay) if e.kind == "reply"
        else ToolExchange(e.node, e.tool, dict(e.arguments), e.result, e.replay)  # type: ignore[union-attr]
        for e in t.entries
    ])


def _summary(s: SummaryInFile) -> Summary:
    return Summary(s.text, s.covered_through, s.folded_turns, s.node)


def _tree(summaries: list[SummaryInFile], start: StateInFile, turns: list[BranchTurnInFile] | list[TreeTurnInFile],
          current: int | None, first_followed: int | None, where: str, changes: bool, source: str
          ) -> ConversationTree:
    """The tree of a file's turns (``where``: the fields' prefix; ``changes``: turn states are
    what changed, version 3). Every state is checked against the turns that lead to it; every
    problem is named, or the tree is returned."""
    pool = [_summary(s) for s in summaries]
    problems: list[Problem] = []

    def full_state(s: StateInFile | StateChangeInFile, before: AgentState, count: int, position: int | None
                   ) -> AgentState:
        if (s.summaries is None and s.windows is None and s.variables is None and s.system_prompts is None
                and getattr(s, "journals", None) is None and getattr(s, "seed_salt", None) is None
                and getattr(s, "warmed", None) is None):
            # nothing changed in the turn (the common case among alternatives); a read-ahead is the turn's own
            return replace(before, warmed={}) if before.warmed else before
        # The field's name is made only for a problem: a large history has none, and many turns.
        field = f"{where}start" if position is None else f"{where}turns.{position}.state"
        chosen = before.summaries
        if s.summaries is not None:
            chosen = tuple(pool[i] for i in s.summaries if i < len(pool))
            if len(chosen) < len(s.summaries):
                problems.extend(Problem("error", f"names summary {i}, but there are {len(pool)} ({where}summaries, "
                                        "from 0)", source, field=f"{field}.summaries.{k}")
                                for k, i in enumerate(s.summaries) if i >= len(pool))
            if chosen and chosen[-1].covered_through >= count or any(
                    a.covered_through > b.covered_through for a, b in itertools.pairwise(chosen)):
                named = [i for i in s.summaries if i < len(pool)]
                problems.extend(_state_problems(
                    [x.covered_through for x in chosen], {}, count, source,
                    lambda k: f"{where}summaries.{named[k]}.covered_through (in {field}.summaries)", ""))
        windows = before.windows
        if s.windows is not None:
            windows = s.windows
            if any(start > count for start in windows.values()):
                problems.extend(_state_problems([], windows, count, source, str, f"{field}.windows"))
        variables = before.variables if s.variables is None else s.variables
        prompts = before.system_prompts if s.system_prompts is None else s.system_prompts
        journals = before.journals
        changed = getattr(s, "journals", None)
        if changed is not None:
            journals = _journals(before.journals, changed, f"{field}.journals", source, problems)
        salt = getattr(s, "seed_salt", None)
        warmed = getattr(s, "warmed", None)
        ahead = {} if warmed is None else _journals(journals, warmed, f"{field}.warmed", source, problems)
        return AgentState(chosen, windows, variables, prompts, journals,
                          before.seed_salt if salt is None else salt,
                          {k: v for k, v in ahead.items() if k in warmed and v != journals.get(k)} if warmed else {})

    empty = AgentState()
    tree = ConversationTree(full_state(start, empty, 0, None))
    depth: dict[int, int] = {}
    for i, t in enumerate(turns):
        if t.id in tree.nodes:
            problems.append(Problem("error", f"turn id {t.id} is used twice", source, field=f"{where}turns.{i}.id"))
            continue
        if t.parent is not None and t.parent not in tree.nodes:
            problems.append(Problem("error", f"parent {t.parent} is not a turn listed before it", source,
                                    field=f"{where}turns.{i}.parent"))
            continue
        count = 1 if t.parent is None else depth[t.parent] + 2
        before = tree.state_after(t.parent) if changes else empty
        after = full_state(t.state, before, count, i)
        depth[t.id] = count - 1
        tree.add(t.parent, _turn(t), after, t.edited, t.exact, turn_id=t.id)
        if len(problems) >= MAX_REPORTED_PROBLEMS:
            break
    if not problems:
        followed = [(None, first_followed, f"{where}followed")] if first_followed is not None else []
        if changes:
            followed += [(t.id, t.followed, f"{where}turns.{i}.followed")
                         for i, t in enumerate(turns) if t.followed is not None]  # type: ignore[union-attr]
        for parent, child, field in followed:
            if child not in tree.nodes or tree.nodes[child].parent != parent:
                after = "a first turn" if parent is None else f"a turn after turn {parent}"
                problems.append(Problem("error", f"{child} is not {after}", source, field=field))
            else:
                tree.followed[parent] = child
        if current is not None and current not in tree.nodes:
            problems.append(Problem("error", f"current is {current}, which is not a turn of the tree", source,
                                    field=f"{where}current"))
    if problems:
        raise HistoryError(problems[:MAX_REPORTED_PROBLEMS])
    tree.select(current)
    return tree


def _journals(before: Mapping[str, DecodeJournal], changes: dict[str, JournalChangeInFile], field: str,
              source: str, problems: list[Problem]) -> dict[str, DecodeJournal]:
    out = dict(before)
    for node, change in changes.items():
        prior = before.get(node, EMPTY)
        where = f"{field}.{shown_name(node)}"
        if change.keep > prior.length:
            problems.append(Problem("error", f"keeps {change.keep} cells of a journal that held {prior.length} "
                                    "before the turn", source, field=f"{where}.keep"))
            continue
        chunks = []
        for i, c in enumerate(change.chunks):
            kept = len(c.tokens) if c.kept is None else c.kept
            if kept > len(c.tokens):
                problems.append(Problem("error", f"keeps {kept} cells of a chunk of {len(c.tokens)} tokens", source,
                                        field=f"{where}.chunks.{i}.kept"))
                break
            chunks.append(Chunk(tuple(c.tokens), kept, c.singles))
        journal = prior.cut(change.keep).then(chunks)
        if journal.length > MAX_JOURNAL_TOKENS:
            problems.append(Problem("error", f"the journal holds {journal.length} tokens; at most {MAX_JOURNAL_TOKENS} "
                                    "are read", source, field=where))
            continue
        if journal.length:
            out[node] = journal
        else:
            out.pop(node, None)
    return out


def unknown_node_problems(saved: SavedDialog, node_ids: set[str], source: str = "<history>") -> list[Problem]:
    """Windows a history keeps for nodes the asset does not have (in its state, or in any turn's state
    of its branches): each names the field. ``Agent.import_dialog`` refuses such a history."""
    states = [("", saved.windows)]
    if saved.tree is not None:
        states.append(("start.", saved.tree.start.windows))
        states.extend((f"turns[id {n.id}].state.", n.after.windows)
                      for n in sorted(saved.tree.nodes.values(), key=lambda n: n.id))
    problems: list[Problem] = []
    for prefix, windows in states:
        for node_id in windows:
            if node_id not in node_ids:
                problems.append(Problem("error", f"a window for {shown_name(node_id)}, which is not a node of the "
                                        "asset; remove it, or load the history into the asset it was saved from",
                                        source, field=f"{prefix}windows.{shown_name(node_id)}"))
                if len(problems) >= MAX_REPORTED_PROBLEMS:
                    return problems
    return problems


def parse_history(text: str, source: str = "<history>") -> SavedDialog:
    with _no_garbage_collection():
        try:
            raw = _decoded_in_steps(text)
        except (ValueError, RecursionError):
            raw = parse_input_json(text, source, HistoryError)  # the error, with its line and column
        # Parsed JSON holds a lone surrogate only where the text has one, or a \uD800-\uDFFF escape.
        return history_from_dict(raw, source, check_surrogates=_MIGHT_HOLD_SURROGATES.search(text) is not None)


_MIGHT_HOLD_SURROGATES = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, pos: int) -> int:
    """Where the JSON white space at ``pos`` ends."""
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  (it matches anywhere, if only "")


def _decoded_in_steps(text: str) -> Any:
    """``json.loads(text)``, one value of the top levels at a time: the top object's values, the
    objects in it, and the items of arrays in those (a history's turns) are each one call into
    the C decoder, so a thread reading a large history lets the others (the window) run between
    them. Raises ValueError (``json.JSONDecodeError``) where ``json.loads`` would."""
    value, end = _decode_value(text, _skip(text, 0), 0)
    end = _skip(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _decode_value(text: str, pos: int, depth: int) -> tuple[Any, int]:
    opening = text[pos:pos + 1]
    if opening == "{" and depth < 2:
        out: dict[str, Any] = {}
        pos = _skip(text, pos + 1)
        if text[pos:pos + 1] == "}":
            return out, pos + 1
        while True:
            if text[pos:pos + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, pos)
            if text[pos:pos + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
            out[key], pos = _decode_value(text, _skip(text, pos + 1), depth + 1)
            pos = _skip(text, pos)
            if text[pos:pos + 1] == "}":
                return out, pos + 1
            if text[pos:pos + 1] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            pos = _skip(text, pos + 1)
    if opening == "[" and depth < 3:
        items: list[Any] = []
        pos = _skip(text, pos + 1)
        if text[pos:pos + 1] == "]":
            return items, pos + 1
        while True:
            item, pos = _DECODER.raw_decode(text, pos) if depth >= 2 else _decode_value(text, pos, depth + 1)
            items.append(item)
            pos = _skip(text, pos)
            if text[pos:pos + 1] == "]":
                return items, pos + 1
            if text[pos:pos + 1] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            pos = _skip(text, pos + 1)
    return _DECODER.raw_decode(text, pos)


@contextlib.contextmanager
def _no_garbage_collection() -> Iterator[None]:
    """Python's cycle collector, paused: a large history makes millions of objects, none of them
    garbage, and each full collection walks them all again (half the time of loading 100,000 turns)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_history(path: str | os.PathLike[str]) -> SavedDialog:
    return parse_history(read_input_text(path, HistoryError, MAX_HISTORY_BYTES), str(path))


FileStamp = tuple[int, int, int] | None  # a file's inode, size and modification time (ns); None: no file


def file_stamp(path: str | os.PathLike[str]) -> FileStamp:
    """What tells whether ``path`` was written since: ``save_history(..., expected=)`` compares it."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def save_history(saved: SavedDialog, path: str | os.PathLike[str], expected: FileStamp | bool = False) -> None:
    """Write ``saved`` to ``path`` atomically. Raises ``HistoryError`` and leaves the file as it was
    when the history would be over ``MAX_HISTORY_BYTES`` (no reader would take it), and
    ``HistoryConflict`` when ``expected`` (a ``file_stamp`` taken when the conversation was read
    from or first meant for ``path``) no longer matches: another process wrote the file since.
    ``expected=False`` replaces whatever is there. Raises OSError when the file cannot be written."""
    text = dumps_history(saved)
    data = text.encode("utf-8")  # no lone surrogates are left in it
    if len(data) > MAX_HISTORY_BYTES:
        raise HistoryError([Problem(
            "error", f"not written: the history would be {len(data) / 2**20:,.1f} MB, and a history over "
            f"{MAX_HISTORY_BYTES / 2**20:,.0f} MB cannot be read back; the file there is kept. Rewind, or save a "
            "shorter conversation", str(path))])
    if expected is not False and file_stamp(path) != expected:
        raise HistoryConflict([Problem(
            "error", "not replaced: the file changed since this conversation read it (another program or "
            "chat wrote it); it is kept as it is", str(path))])
    atomic_write_text(path, text)


def _surrogate_problems(raw: Any, source: str) -> list[Problem]:
    """Every text (value or key) holding a lone surrogate, by field, in file order (the first few)."""
    return [Problem("error", lone.message("key"), source, field=".".join(shown_name(part) for part in lone.path))
            for lone in itertools.islice(lone_surrogates(raw), MAX_REPORTED_PROBLEMS)]


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "true/false", type(None): "null"}.get(type(value), "a number")


def _user_loc(err: ErrorDetails) -> tuple[list[Any], bool]:
    """Where an error is, as the user wrote it, and whether it is a dict key that was refused."""
    # Drop pydantic's union tags ("reply", "tool") from the path: users never wrote them.
    raw_loc = list(err["loc"])
    loc = [
        part for i, part in enumerate(raw_loc)
        if not (part in ("reply", "tool") and i >= 2 and raw_loc[i - 2] == "entries")
    ]
    bad_key = bool(loc) and loc[-1] == "[key]"  # pydantic's mark for a dict key that was refused
    return (loc[:-1] if bad_key else loc), bad_key


def _field_place(err: ErrorDetails) -> Place:
    return Place(field=".".join(shown_name(part) for part in _user_loc(err)[0]))


_WORDING: Wording = {
    "extra_forbidden": UNKNOWN_KEY,
    "missing": MISSING_FIELD,
    "union_tag_invalid": "an entry's kind is 'reply' or 'tool'",
    "union_tag_not_found": "an entry needs a 'kind' ('reply' or 'tool')",
    "literal_error": lambda err: (f"not a Parley dialog history (format must be {HISTORY_FORMAT!r})"
                                  if _user_loc(err)[0] == ["format"]
                                  else f"a history's version is {', '.join(map(str, READ_VERSIONS))}"
                                  if _user_loc(err)[0] == ["version"] else validator_says(err)),
}


def _message(err: ErrorDetails) -> str:
    loc, bad_key = _user_loc(err)
    if bad_key:
        group = loc[-2] if len(loc) >= 2 else ""
        what = ("a variable name is a letter or _, then letters, digits or _" if group == "variables"
                else "a node id is a letter or _, then letters, digits, _ or -")
        return f"{shown_name(loc[-1]) if loc else 'this key'} is not a valid name: {what}"
    return error_message(err, _WORDING)
