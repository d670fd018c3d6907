"""A suite file: its models and schema (``resources/schemas/test-suite.schema.json``), loading one
with problems that name the file, line, case and field, finding the suites beside an asset, and
adding a case to one."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.files.located import UNKNOWN_KEY, Place, Wording, error_message, located_problems
from runtime.files.reading import read_input_text
from runtime.files.writing import atomic_write_text
from runtime.problems import InputError, Problem

SUITE_SUFFIXES = (".suite.yaml", ".suite.yml")


class SuiteError(InputError):
    """A suite file that cannot be read; each problem names the file, line, case and field."""


class _SuiteModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- the file format ---------------------------------------------------------------------------


class ReplyExpect(_SuiteModel):
    contains: list[str] = Field(default_factory=list, description="Texts the reply must contain (case-insensitive).")
    not_contains: list[str] = Field(default_factory=list, description="Texts the reply must not contain (case-insensitive).")
    regex: str = Field("", description="A regular expression the reply must match (searched, case-insensitive).")
    max_words: int | None = Field(None, ge=0, description="At most this many words.")
    mentions_one_of: list[str] = Field(default_factory=list, description="At least one of these words or phrases, "
                                       "in any language's script (case-insensitive, whole words).")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return v


class ToolExpect(_SuiteModel):
    name: str = Field(description="The tool that must be called.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments that must be passed (a partial match).")
    arguments_schema: dict[str, Any] | None = Field(None, description="A JSON Schema the arguments must be valid for.")


class BudgetExpect(_SuiteModel):
    max_prompt_tokens: int | None = Field(None, ge=1, description="No node's prompt is longer than this.")
    no_trim: bool = Field(False, description="No node trimmed its history this turn.")
    summary_written: bool | None = Field(None, description="true: a summary was written this turn; false: none was.")


class TurnExpect(_SuiteModel):
    path: list[str] | None = Field(None, description="The nodes visited, exactly, in order.")
    visits: list[str] = Field(default_factory=list, description="Nodes the turn must visit.")
    not_visits: list[str] = Field(default_factory=list, description="Nodes the turn must not visit.")
    exits: dict[str, str] = Field(default_factory=dict, description="node id -> the exit it took (default_exit, "
                                  "fallback_exit, intent:NAME).")
    intent: str | None = Field(None, description="The intent a Classify Intent node chose ('' : none).")
    slots: dict[str, Any] = Field(default_factory=dict, description="Slots and the values they must hold at the end of the turn.")
    tool: ToolExpect | None = None
    reply: ReplyExpect | None = None
    budget: BudgetExpect | None = None
    judge: str = Field("", description="A rubric the judge model grades the reply against.")


class TurnScript(_SuiteModel):
    say: str = Field(description="The player's line.")
    instructions: str = Field("", description="This turn's {{instructions}}.")
    expect: TurnExpect = Field(default_factory=TurnExpect)


class ConversationExpect(_SuiteModel):
    at_turn: int = Field(ge=1, description="The turn (from 1) this is checked after.")
    reply: ReplyExpect | None = None
    judge: str = ""
    summary_written: bool | None = Field(None, description="true: some summary exists by then.")


class Case(_SuiteModel):
    name: str = Field(min_length=1)
    variables: dict[str, bool | int | float | str] = Field(default_factory=dict, description="Agent variables to start with.")
    history: str = Field("", description="A dialog history file (beside the suite) the conversation starts from.")
    tool_results: dict[str, str] = Field(default_factory=dict, description="tool name -> the result a tool without "
                                         "a mock_result returns in this case.")
    turns: list[TurnScript] = Field(min_length=1)
    expect: list[ConversationExpect] = Field(default_factory=list, description="Checked after a given turn.")


class Suite(_SuiteModel):
    asset: str = Field(description="The workflow asset, relative to the suite file.")
    model: str = Field("", description="Model for nodes without their own (replaces the asset's default model).")
    judge_model: str = Field("", description="The judge's model ('' : the sample model).")
    seed: int = Field(0, ge=0, description="Added to every fixed seed (re-rolls the replies).")
    cases: list[Case] = Field(min_length=1)

    @field_validator("cases")
    @classmethod
    def _unique_names(cls, v: list[Case]) -> list[Case]:
        names = [c.name for c in v]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"case names must be unique; repeated: {', '.join(repeated)}")
        return v


def suite_schema() -> dict[str, Any]:
    schema = Suite.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Parley Studio conversation test suite"
    return schema


@dataclass
class LoadedSuite:
    path: Path
    suite: Suite
    asset: Asset

    @property
    def name(self) -> str:
        return self.path.name

    def case_id(self, case: Case) -> str:
        return f"{self.path.name}::{case.name}"


def _line_of(root: yaml.Node | None, loc: Iterable[Any]) -> int:
    """The 1-based line of the YAML node at ``loc`` (or of its nearest parent that exists)."""
    node, line = root, (root.start_mark.line + 1 if root is not None else 0)
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            found = node.value[key]
        else:
            found = None
        if found is None:
            break
        node, line = found, found.start_mark.line + 1
    return line


_WORDING: Wording = {"extra_forbidden": UNKNOWN_KEY}


def _case_place(raw: dict[str, Any], root: yaml.Node | None, err: ErrorDetails) -> Place:
    """An error's line, and its case (by name) and field in words: ``case 'greets', cases.0.turns``."""
    loc = list(err["loc"])
    case = ""
    if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
        cases = raw.get("cases")
        if isinstance(cases, list) and loc[1] < len(cases) and isinstance(cases[loc[1]], dict):
            case = str(cases[loc[1]].get("name", ""))
    label = f"case {case!r}, " if case else ""
    return Place(line=_line_of(root, loc), words=label + ".".join(str(p) for p in loc))


def load_suite(path: str | Path) -> LoadedSuite:
    """Read and check a suite and load its asset. Raises ``SuiteError`` naming file, line, case and field."""
    path = Path(path)
    text = read_input_text(path, SuiteError)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SuiteError([Problem("error", f"not valid YAML: {getattr(exc, 'problem', None) or exc}", str(path),
                                  line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0)]) from None
    except RecursionError:
        raise SuiteError([Problem("error", "nested too deeply", str(path))]) from None
    if not isinstance(raw, dict):
        raise SuiteError([Problem("error", "a suite is a mapping with 'asset' and 'cases'", str(path), line=1)])
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as exc:
        raise SuiteError(located_problems(exc, str(path), functools.partial(_case_place, raw, root),
                                          functools.partial(error_message, wording=_WORDING))) from None
    asset_path = (path.parent / suite.asset).resolve()
    asset = load_asset(asset_path)
    if suite.model:
        asset = asset.model_copy(update={"default_model": suite.model})
    problems = []
    for i, case in enumerate(suite.cases):
        unknown = [k for k in case.variables if k not in asset.variables]
        if unknown:
            problems.append(Problem("error", f"case {case.name!r}, cases.{i}.variables: not variables of the asset: "
                                    f"{', '.join(unknown)}", str(path), line=_line_of(root, ["cases", i, "variables"])))
        if case.history and not (path.parent / case.history).is_file():
            problems.append(Problem("error", f"case {case.name!r}, cases.{i}.history: no file {case.history}",
                                    str(path), line=_line_of(root, ["cases", i, "history"])))
        node_ids = set(asset.node_ids())
        for t, turn in enumerate(case.turns):
            named = set(turn.expect.visits) | set(turn.expect.not_visits) | set(turn.expect.exits) | set(turn.expect.path or [])
            for missing in sorted(named - node_ids):
                problems.append(Problem("error", f"case {case.name!r}, cases.{i}.turns.{t}.expect: no node {missing!r} in "
                                        f"{suite.asset}", str(path), line=_line_of(root, ["cases", i, "turns", t, "expect"])))
        for e, check in enumerate(case.expect):
            if check.at_turn > len(case.turns):
                problems.append(Problem("error", f"case {case.name!r}, cases.{i}.expect.{e}.at_turn: the case has "
                                        f"{len(case.turns)} turns", str(path),
                                        line=_line_of(root, ["cases", i, "expect", e, "at_turn"])))
    if problems:
        raise SuiteError(problems)
    return LoadedSuite(path, suite, asset)


def find_suites(asset_path: str | Path) -> list[Path]:
    """The suite files beside an asset that test it."""
    asset_path = Path(asset_path).resolve()
    found = []
    for candidate in sorted(asset_path.parent.iterdir()):
        if candidate.name.endswith(SUITE_SUFFIXES):
            try:
                raw = yaml.safe_load(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                found.append(candidate)  # broken: listed, so its errors are shown
                continue
            if isinstance(raw, dict) and (candidate.parent / str(raw.get("asset", ""))).resolve() == asset_path:
                found.append(candidate)
    return found


# --- adding a case ----------------------------------------------------------------------------


def save_case(suite_path: str | Path, asset_path: str | Path, case: dict[str, Any]) -> str:
    """Add ``case`` to the suite at ``suite_path`` (made, for the asset, if missing); returns the name it
    got (made unique). Raises ``SuiteError`` when the existing file cannot be read; it is then untouched."""
    suite_path = Path(suite_path)
    if suite_path.exists():
        text = read_input_text(suite_path, SuiteError)
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise SuiteError([Problem("error", f"not valid YAML: {exc}", str(suite_path))]) from None
        if not isinstance(raw, dict) or not isinstance(raw.get("cases", []), list):
            raise SuiteError([Problem("error", "not a suite: expected a mapping with a 'cases' list", str(suite_path))])
    else:
        asset_rel = Path(asset_path).resolve()
        try:
            rel = asset_rel.relative_to(suite_path.parent.resolve()).as_posix()
        except ValueError:
            rel = str(asset_rel)
        raw = {"asset": rel, "cases": []}
    names = {c.get("name") for c in raw.get("cases", []) if isinstance(c, dict)}
    name, n = case["name"], 2
    while name in names:
        name, n = f"{case['name']} ({n})", n + 1
    raw.setdefault("cases", []).append({**case, "name": name})
    atomic_write_text(suite_path, yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=110))
    return name
