"""The dialog file format (``parley-dialog`` version 2).

It holds the history (``runtime.dialogue.history``) plus the agent state that decides future
prompts: each node's window start, the agent variables and any system prompts changed at
runtime. Exporting then importing it gives the same future prompts. Version 2 adds
``branches``: the whole conversation tree (``runtime.dialogue.tree``) with every alternative
reply and the state after each turn; version 1 files (no tree) still load, as one branch.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator
from pydantic_core import ErrorDetails

from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Summary, ToolExchange, Turn
from runtime.files.located import (
    MISSING_FIELD,
    UNKNOWN_KEY,
    Place,
    Wording,
    error_message,
    located_problems,
    validator_says,
)
from runtime.files.reading import parse_input_json, read_input_text
from runtime.names import (  # noqa: F401  (REPLACEMENT and without_surrogates: kept importable from here)
    ID_PATTERN,
    REPLACEMENT,
    SLOT_PATTERN,
    VariableValue,
    lone_surrogates,
    shown_name,
    without_surrogates,
)
from runtime.problems import InputError, Problem

if TYPE_CHECKING:  # pragma: no cover
    from runtime.dialogue.tree import ConversationTree


HISTORY_FORMAT = "parley-dialog"
HISTORY_VERSION = 2


class HistoryError(InputError):
    """A dialog history file that cannot be read; every problem names the file and field."""


# --- the file format --------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# Keys name nodes and variables; pydantic's patterns match the whole key ("x\n" is refused).
NodeKey = Annotated[str, Field(pattern=ID_PATTERN)]
VariableName = Annotated[str, Field(pattern=SLOT_PATTERN)]
WindowStart = Annotated[int, Field(ge=0)]


class ReplyInFile(_Strict):
    kind: Literal["reply"] = "reply"
    node: str = Field(pattern=ID_PATTERN, description="Id of the node that wrote the reply.")
    text: str
    replay: bool = Field(True, description="False when the node's history_role was none: never replayed.")


class ToolExchangeInFile(_Strict):
    kind: Literal["tool"]
    node: str = Field(pattern=ID_PATTERN, description="Id of the ToolCall node.")
    tool: str = Field(pattern=SLOT_PATTERN)
    arguments: dict[str, Any] = Field(default_factory=dict)
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
    node: str = Field("", pattern=r"^([A-Za-z_][A-Za-z0-9_\-]*)?$")
    summary_chars: int | None = Field(None, description="Written for readers; recomputed on import.")


class StateInFile(_Strict):
    summaries: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, description="Indexes into branches.summaries, oldest first.")
    windows: dict[NodeKey, WindowStart] = Field(default_factory=dict)
    variables: dict[VariableName, VariableValue] = Field(default_factory=dict)
    system_prompts: dict[NodeKey, str] = Field(default_factory=dict)


class BranchTurnInFile(TurnInFile):
    id: int = Field(ge=0)
    parent: int | None = Field(None, ge=0, description="The turn before it; null for a first turn.")
    edited: bool = False
    exact: bool = True
    state: StateInFile = Field(default_factory=StateInFile, description="The agent's state after the turn.")


class BranchesInFile(_Strict):
    start: StateInFile = Field(default_factory=StateInFile)
    summaries: list[SummaryInFile] = Field(default_factory=list)
    turns: list[BranchTurnInFile] = Field(default_factory=list)
    current: int | None = None

    @model_validator(mode="after")
    def _a_tree(self) -> BranchesInFile:
        seen: set[int] = set()
        for i, turn in enumerate(self.turns):
            if turn.id in seen:
                raise ValueError(f"turns.{i}.id {turn.id} is used twice")
            if turn.parent is not None and turn.parent not in seen:
                raise ValueError(f"turns.{i}.parent {turn.parent} is not a turn listed before it")
            for state_owner, state in ((f"turns.{i}", turn.state),):
                bad = [s for s in state.summaries if s >= len(self.summaries)]
                if bad:
                    raise ValueError(f"{state_owner}.state.summaries names summary {bad[0]}, but there are "
                                     f"{len(self.summaries)}")
            seen.add(turn.id)
        if self.current is not None and self.current not in seen:
            raise ValueError(f"current is {self.current}, which is not a turn of the tree")
        return self


class DialogFile(_Strict):
    format: Literal["parley-dialog"] = HISTORY_FORMAT
    version: int = Field(HISTORY_VERSION, ge=1)
    turns: list[TurnInFile] = Field(default_factory=list)
    summaries: list[SummaryInFile] = Field(default_factory=list)
    windows: dict[NodeKey, WindowStart] = Field(default_factory=dict)
    variables: dict[VariableName, VariableValue] = Field(default_factory=dict)
    system_prompts: dict[NodeKey, str] = Field(default_factory=dict)
    branches: BranchesInFile | None = None
    seed_salt: int = Field(0, ge=0, description="Added to every fixed seed: re-rolled seeds give other replies.")

    @model_validator(mode="after")
    def _consistent(self) -> DialogFile:
        count = len(self.turns)
        previous = -1
        for i, summary in enumerate(self.summaries):
            if summary.covered_through >= count:
                raise ValueError(
                    f"summaries.{i}.covered_through is {summary.covered_through} but the history has only "
                    f"{count} turns (they count from 0)"
                )
            if summary.covered_through < previous:
                raise ValueError(f"summaries.{i}.covered_through goes back; summaries must be in the order written")
            previous = summary.covered_through
        for node, start in self.windows.items():
            if start > count:
                raise ValueError(f"windows.{shown_name(node)} is {start} but the history has only {count} turns")
        return self


def _turn_dict(turn: Turn) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for entry in turn.entries:
        if isinstance(entry, Reply):
            entries.append({"kind": "reply", "node": entry.node, "text": entry.text, "replay": entry.replay})
        else:
            entries.append({
                "kind": "tool", "node": entry.node, "tool": entry.tool, "arguments": entry.arguments,
                "result": entry.result, "replay": entry.replay,
            })
    return {"player": turn.player, "entries": entries}


def _summary_dict(s: Summary) -> dict[str, Any]:
    return {"text": s.text, "covered_through": s.covered_through, "folded_turns": s.folded_turns, "node": s.node,
            "summary_chars": s.summary_chars}


def _branches_dict(tree: ConversationTree) -> dict[str, Any]:
    pool: dict[Summary, int] = {}

    def state(s) -> dict[str, Any]:
        return {"summaries": [pool.setdefault(x, len(pool)) for x in s.summaries],
                "windows": dict(sorted(s.windows.items())), "variables": dict(s.variables),
                "system_prompts": dict(sorted(s.system_prompts.items()))}

    start = state(tree.start)
    turns = []
    for node in sorted(tree.nodes.values(), key=lambda n: n.id):  # a parent's id is always smaller
        turns.append({"id": node.id, "parent": node.parent, **_turn_dict(node.turn), "edited": node.edited,
                      "exact": node.exact, "state": state(node.after)})
    summaries = [_summary_dict(s) for s, _ in sorted(pool.items(), key=lambda item: item[1])]
    return {"start": start, "summaries": summaries, "turns": turns, "current": tree.current}


def history_to_dict(saved: SavedDialog) -> dict[str, Any]:
    out = {
        "format": HISTORY_FORMAT,
        "version": HISTORY_VERSION,
        "turns": [_turn_dict(t) for t in saved.history.turns],
        "summaries": [_summary_dict(s) for s in saved.history.summaries],
        "windows": dict(sorted(saved.windows.items())),
        "variables": dict(saved.variables),
        "system_prompts": dict(sorted(saved.system_prompts.items())),
        "seed_salt": saved.seed_salt,
    }
    if saved.tree is not None:
        out["branches"] = _branches_dict(saved.tree)
    return out


def dumps_history(saved: SavedDialog) -> str:
    """The file's text. Lone surrogates (which an asset's ``\\ud800`` escape can put into a reply)
    are written as U+FFFD: the file stays UTF-8 that any JSON reader takes, and saving never fails."""
    return without_surrogates(json.dumps(history_to_dict(saved), indent=2, ensure_ascii=False)) + "\n"


def history_from_dict(raw: Any, source: str = "<history>") -> SavedDialog:
    """Check and convert a parsed dialog file. Raises ``HistoryError`` naming every problem."""
    if not isinstance(raw, dict):
        raise HistoryError([Problem("error", f"a dialog history is a JSON object, not {_json_type(raw)}", source)])
    version = raw.get("version", HISTORY_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > HISTORY_VERSION:
        raise HistoryError([Problem(
            "error", f"this history is version {version}; this Parley Studio reads up to version {HISTORY_VERSION}",
            source, field="version",
        )])
    try:
        record = DialogFile.model_validate(raw)
    except ValidationError as exc:
        raise HistoryError(located_problems(exc, source, _field_place, _message)) from None
    except RecursionError:
        raise HistoryError([Problem("error", "nested too deeply", source)]) from None
    surrogates = _surrogate_problems(raw, source)
    if surrogates:
        raise HistoryError(surrogates)
    turns = [_turn(t) for t in record.turns]
    summaries = [Summary(s.text, s.covered_through, s.folded_turns, s.node) for s in record.summaries]
    saved = SavedDialog(
        DialogHistory(turns, summaries), dict(record.windows), dict(record.variables), dict(record.system_prompts),
        seed_salt=record.seed_salt,
    )
    if record.branches is not None:
        saved.tree = _tree(record.branches)
        if [t.player for t in saved.tree.turns()] != [t.player for t in turns]:
            raise HistoryError([Problem("error", "the current branch's turns differ from the history's turns",
                                        source, field="branches.current")])
    return saved


def _turn(t: TurnInFile) -> Turn:
    return Turn(t.player, [
        Reply(e.node, e.text, e.replay) if isinstance(e, ReplyInFile)
        else ToolExchange(e.node, e.tool, dict(e.arguments), e.result, e.replay)
        for e in t.entries
    ])


def _tree(branches: BranchesInFile) -> ConversationTree:
    from runtime.dialogue.tree import AgentState, ConversationTree

    pool = [Summary(s.text, s.covered_through, s.folded_turns, s.node) for s in branches.summaries]

    def state(s: StateInFile) -> AgentState:
        return AgentState(tuple(pool[i] for i in s.summaries), dict(s.windows), dict(s.variables),
                          dict(s.system_prompts))

    tree = ConversationTree(state(branches.start))
    for t in branches.turns:
        tree.add(t.parent, _turn(t), state(t.state), t.edited, t.exact, turn_id=t.id)
    tree.select(branches.current)
    return tree


def unknown_node_problems(saved: SavedDialog, node_ids: set[str], source: str = "<history>") -> list[Problem]:
    """Windows a history keeps for nodes the asset does not have (in its state, or in any turn's state
    of its branches): each names the field. ``Agent.import_dialog`` refuses such a history."""
    states = [("", saved.windows)]
    if saved.tree is not None:
        states.append(("branches.start.", saved.tree.start.windows))
        states.extend((f"branches.turns[id {n.id}].state.", n.after.windows)
                      for n in sorted(saved.tree.nodes.values(), key=lambda n: n.id))
    problems: list[Problem] = []
    for prefix, windows in states:
        for node_id in windows:
            if node_id not in node_ids:
                problems.append(Problem("error", f"a window for {shown_name(node_id)}, which is not a node of the "
                                        "asset; remove it, or load the history into the asset it was saved from",
                                        source, field=f"{prefix}windows.{shown_name(node_id)}"))
                if len(problems) >= _MAX_REPORTED:
                    return problems
    return problems


def parse_history(text: str, source: str = "<history>") -> SavedDialog:
    return history_from_dict(parse_input_json(text, source, HistoryError), source)


def load_history(path: str | os.PathLike[str]) -> SavedDialog:
    return parse_history(read_input_text(path, HistoryError), str(path))


def save_history(saved: SavedDialog, path: str | os.PathLike[str]) -> None:
    from runtime.files.writing import atomic_write_text

    atomic_write_text(path, dumps_history(saved))


_MAX_REPORTED = 20


def _surrogate_problems(raw: Any, source: str) -> list[Problem]:
    """Every text (value or key) holding a lone surrogate, by field, in file order (the first few)."""
    return [Problem("error", lone.message("key"), source, field=".".join(shown_name(part) for part in lone.path))
            for lone in itertools.islice(lone_surrogates(raw), _MAX_REPORTED)]


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
                                  if _user_loc(err)[0] == ["format"] else validator_says(err)),
}


def _message(err: ErrorDetails) -> str:
    loc, bad_key = _user_loc(err)
    if bad_key:
        group = loc[-2] if len(loc) >= 2 else ""
        what = ("a variable name is a letter or _, then letters, digits or _" if group == "variables"
                else "a node id is a letter or _, then letters, digits, _ or -")
        return f"{shown_name(loc[-1]) if loc else 'this key'} is not a valid name: {what}"
    return error_message(err, _WORDING)
