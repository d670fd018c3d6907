"""A suite file: its models and schema (``resources/schemas/test-suite.schema.json``), loading one
with problems that name the file, line, case and field, finding the suites beside an asset, and
adding a case to one."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from runtime import patterns
from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.files.located import UNKNOWN_KEY, Place, Wording, error_message, located_problems
from runtime.files.reading import MAX_INPUT_BYTES, read_input_text
from runtime.files.writing import atomic_write_text
from runtime.names import NAMESPACE_SEP
from runtime.problems import InputError, Problem
from runtime.session.session import graph_of

SUITE_SUFFIXES = (".suite.yaml", ".suite.yml")

# Limits of a suite file. A suite is read on the editor's UI thread as its asset opens, so each is
# set where reading (and listing the cases in the dock) still takes well under a second:
MAX_SUITE_BYTES = 4 * 1024 * 1024  # an 8,000-case suite is about 1.5 MB
MAX_SUITE_CASES = 10_000
# Nesting of mappings and lists: a suite needs about 8, a tool's arguments schema a few more. The
# YAML parser recurses once per level (C code, which a deep enough file crashes), so it is counted first.
MAX_SUITE_NESTING = 64
assert MAX_SUITE_BYTES <= MAX_INPUT_BYTES


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
            patterns.compile_pattern(v)  # as the check will search it (with a time limit)
        except patterns.PatternError as exc:
            raise ValueError(str(exc)) from None
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
    tool_results: dict[str, str] = Field(default_factory=dict, description="tool name -> the game's answer to the "
                                         "tool in this case (over its mock_result); tools not named answer with their mock_result.")
    turns: list[TurnScript] = Field(min_length=1)
    expect: list[ConversationExpect] = Field(default_factory=list, description="Checked after a given turn.")


# A simulated player's limits: each conversation is a model call per turn for the player and the agent
MAX_PERSONA_TURNS = 50
MAX_PERSONA_CONVERSATIONS = 1000


class Persona(_SuiteModel):
    """A simulated player: a model plays them for ``conversations`` conversations of up to ``max_turns``
    lines each (runtime.suites.simulate)."""

    name: str = Field(min_length=1, description="The persona's name, in reports and saved discoveries.")
    description: str = Field(min_length=1, description="Who the player is and how they talk; told to the player model.")
    goals: list[str] = Field(default_factory=list, description="What the player wants from the conversation.")
    max_turns: int = Field(6, ge=1, le=MAX_PERSONA_TURNS, description="Lines the player says in one conversation.")
    conversations: int = Field(3, ge=1, le=MAX_PERSONA_CONVERSATIONS, description="Conversations per run "
                               "(parley test --conversations K replaces it).")


class PlayerSettings(_SuiteModel):
    model: str = Field("", description="The player's model, a GGUF file (relative to the suite) or a model "
                       "name ('' : the sample model).")
    backend: str = Field("", description="Where the player's model runs: embedded, a backend profile, a server's "
                         "address or scripted ('' : embedded, this computer).")


# A red-team run's limits: each attempt is a turn of the agent
MAX_RED_TEAM_ATTEMPTS = 10_000
MAX_RED_TEAM_GENERATED = 1_000
BUILTIN_BENIGN = "builtin"


class RedTeamSettings(_SuiteModel):
    """A red-team run (``parley test --red-team``, ``runtime.suites.redteam``): attack families played
    against the asset, and benign lines through its line guards."""

    packs: list[str] = Field(default_factory=list, description="Attack packs of your own (YAML, relative to the "
                             "suite), played besides the shipped one.")
    shipped_pack: bool = Field(True, description="Play the shipped attack pack (resources/redteam/attacks.yaml) too.")
    families: list[str] = Field(default_factory=list, description="The families to play (empty: every family "
                                "of the packs).")
    attempts: int = Field(20, ge=1, le=MAX_RED_TEAM_ATTEMPTS, description="Attempts per family: its lines, then "
                          "variations of them.")
    generate: int = Field(0, ge=0, le=MAX_RED_TEAM_GENERATED, description="More lines per family, written by a "
                          "simulated player from the family's persona (the suite's player model).")
    secrets: list[str] = Field(default_factory=list, description="Texts the NPC must never say (a password, "
                               "its instructions' key words): one in a reply is a successful attack.")
    benign: str = Field(BUILTIN_BENIGN, description="Benign player lines, one a line (relative to the suite), "
                        "for the guards' false positives; builtin: resources/redteam/benign.txt.")
    max_success: float = Field(0.01, ge=0, le=1, description="Highest attack success rate per family that passes.")
    max_false_positives: float = Field(0.01, ge=0, le=1, description="Highest share of benign lines flagged that "
                                       "passes.")


class Suite(_SuiteModel):
    asset: str = Field(description="The workflow asset, relative to the suite file.")
    model: str = Field("", description="Model for nodes without their own (replaces the asset's default model).")
    judge_model: str = Field("", description="The judge's model ('' : the sample model).")
    seed: int = Field(0, ge=0, description="Added to every fixed seed (re-rolls the replies).")
    cases: list[Case] = Field(default_factory=list, description="Scripted conversations (a suite holds cases, "
                              "personas, or both).")
    personas: list[Persona] = Field(default_factory=list, description="Simulated players, each played by a model.")
    player: PlayerSettings = Field(default_factory=PlayerSettings, description="The model that plays the personas.")
    red_team: RedTeamSettings | None = Field(None, description="A red-team run: attacks and benign lines "
                                             "(parley test --red-team).")

    @field_validator("cases")
    @classmethod
    def _unique_names(cls, v: list[Case]) -> list[Case]:
        repeated = sorted(n for n, count in Counter(c.name for c in v).items() if count > 1)
        if repeated:
            raise ValueError(f"case names must be unique; repeated: {', '.join(repeated)}")
        return v

    @field_validator("personas")
    @classmethod
    def _unique_personas(cls, v: list[Persona]) -> list[Persona]:
        repeated = sorted(n for n, count in Counter(p.name for p in v).items() if count > 1)
        if repeated:
            raise ValueError(f"persona names must be unique; repeated: {', '.join(repeated)}")
        return v

    @model_validator(mode="after")
    def _something_to_run(self) -> Suite:
        if not self.cases and not self.personas and self.red_team is None:
            raise ValueError("a suite needs at least one case or persona ('cases' or 'personas'), or a "
                             "'red_team' section")
        return self


def suite_schema() -> dict[str, Any]:
    schema = Suite.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Parley Studio conversation test suite"
    return schema


@dataclass
class LoadedSuite:
    path: Path
    suite: Suite
    asset: Asset  # as its cases run: the suite's model, and the behaviours of its Subgraph nodes expanded

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def asset_folder(self) -> Path:
        """The folder of the asset the suite names: where its behaviours, histories and models are found."""
        return self.path.parent.joinpath(self.suite.asset).resolve().parent

    def case_id(self, case: Case) -> str:
        return f"{self.path.name}::{case.name}"


def _where(root: yaml.Node | None, loc: Iterable[Any]) -> tuple[int, int]:
    """The 1-based line and column of the YAML node at ``loc`` (or of its nearest parent that exists)."""
    if root is None:
        return 0, 0
    node = root
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            found = node.value[key]
        else:
            found = None
        if found is None:
            break
        node = found
    return node.start_mark.line + 1, node.start_mark.column + 1


def _at(path: Path, message: str, root: yaml.Node | None, loc: Iterable[Any]) -> Problem:
    line, column = _where(root, loc)
    return Problem("error", message, str(path), line=line, column=column)


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
    return Place(line=_where(root, loc)[0], words=label + ".".join(str(p) for p in loc))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when installed: 7x faster


def _problem(path: Path, message: str, mark: Any = None) -> Problem:
    """A problem at a YAML mark (0-based line and column), as 1-based line and column."""
    return Problem("error", message, str(path), line=mark.line + 1 if mark else 0, column=mark.column + 1 if mark else 0)


def _compose(text: str, path: Path) -> yaml.Node | None:
    """The YAML text's one document as a node tree (with each node's line and column), read once.

    The nodes are built here from the parser's events, without recursion, so that what would hang
    or crash the program is refused, located, before anything is built from it: nesting deeper
    than ``MAX_SUITE_NESTING`` (libyaml's own composer recurses in C) and aliases (``*name``: a few
    hundred bytes of aliases of aliases expand to gigabytes; a suite writes its values out)."""
    loader = _LOADER(text)
    resolver = yaml.resolver.Resolver()
    root: yaml.Node | None = None
    stack: list[yaml.Node] = []
    keys: list[yaml.Node | None] = []  # per open mapping: its key waiting for a value
    documents = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent):
                raise SuiteError([_problem(path, f"an alias (*{event.anchor}): suites take no aliases; "
                                           "write the value out", event.start_mark)])
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise SuiteError([_problem(path, "a second YAML document (---): a suite is one document",
                                               event.start_mark)])
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop().end_mark = event.end_mark
                keys.pop()
                continue
            if isinstance(event, yaml.ScalarEvent):
                tag = event.tag if event.tag not in (None, "!") else resolver.resolve(
                    yaml.ScalarNode, event.value, event.implicit)
                node: yaml.Node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
            elif isinstance(event, yaml.SequenceStartEvent):
                tag = event.tag if event.tag not in (None, "!") else resolver.resolve(
                    yaml.SequenceNode, None, event.implicit)
                node = yaml.SequenceNode(tag, [], event.start_mark, None, event.flow_style)
            elif isinstance(event, yaml.MappingStartEvent):
                tag = event.tag if event.tag not in (None, "!") else resolver.resolve(
                    yaml.MappingNode, None, event.implicit)
                node = yaml.MappingNode(tag, [], event.start_mark, None, event.flow_style)
            else:  # stream start and end, document end
                continue
            if not stack:
                root = node
            elif isinstance(stack[-1], yaml.SequenceNode):
                stack[-1].value.append(node)
            elif keys[-1] is None:
                keys[-1] = node
            else:
                stack[-1].value.append((keys[-1], node))
                keys[-1] = None
            if isinstance(node, yaml.CollectionNode):
                if len(stack) >= MAX_SUITE_NESTING:
                    raise SuiteError([_problem(path, f"nested too deeply: at most {MAX_SUITE_NESTING} levels of "
                                               "mappings and lists", event.start_mark)])
                stack.append(node)
                keys.append(None)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SuiteError([_problem(path, f"not valid YAML: {exc.problem or exc.context or exc}", mark)]) from None
    except yaml.YAMLError as exc:
        raise SuiteError([_problem(path, f"not valid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    return root


def read_suite_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """A suite file's YAML: its value and its node tree (for the lines of errors), parsed once.

    Only a regular file of at most ``MAX_SUITE_BYTES`` is read (a pipe or a device is refused
    unread); aliases and nesting deeper than ``MAX_SUITE_NESTING`` are refused, located. Raises
    ``SuiteError``."""
    path = Path(path)
    text = read_input_text(path, SuiteError, MAX_SUITE_BYTES)
    root = _compose(text, path)
    if root is None:
        return None, None
    try:
        raw = yaml.constructor.SafeConstructor().construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SuiteError([_problem(path, f"not valid YAML: {exc.problem or exc.context or exc}", mark)]) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:  # a malformed timestamp, say
        raise SuiteError([_problem(path, f"not valid YAML: {exc}", root.start_mark)]) from None
    return raw, root


def load_suite(path: str | Path) -> LoadedSuite:
    """Read and check a suite and load its asset. Raises ``SuiteError`` naming file, line, column, case and field."""
    path = Path(path)
    raw, root = read_suite_yaml(path)
    return _checked(path, raw, root)


def _checked(path: Path, raw: Any, root: yaml.Node | None, edited: Asset | None = None) -> LoadedSuite:
    """A parsed suite checked and its asset loaded (``load_suite`` after the YAML is read); with
    ``edited``, that asset (as an editor holds it, unsaved edits included) instead of the file's."""
    if not isinstance(raw, dict):
        raise SuiteError([Problem("error", "a suite is a mapping with 'asset' and 'cases'", str(path), line=1, column=1)])
    cases = raw.get("cases")
    if isinstance(cases, list) and len(cases) > MAX_SUITE_CASES:
        raise SuiteError([_at(path, f"cases: {len(cases):,} cases; a suite holds at most {MAX_SUITE_CASES:,} "
                              "(split it into several suite files)", root, ["cases"])])
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as exc:
        problems = located_problems(exc, str(path), functools.partial(_case_place, raw, root),
                                    functools.partial(error_message, wording=_WORDING))
        # located_problems gives one problem per error, in pydantic's order: add each one's column
        errors = exc.errors(include_url=False)
        raise SuiteError([dataclasses.replace(p, column=_where(root, e["loc"])[1]) if p.line else p
                          for p, e in zip(problems, errors)]) from None
    asset_path = (path.parent / suite.asset).resolve()
    try:
        asset = edited if edited is not None else load_asset(asset_path)
    except InputError as exc:  # the asset's own problems, after the line of the suite that names it
        raise SuiteError([_at(path, f"asset: {suite.asset} cannot be loaded", root, ["asset"]), *exc.problems]) from None
    if suite.model:
        asset = asset.model_copy(update={"default_model": suite.model})
    try:  # the graph the cases run: expectations may name a behaviour's nodes (guard/classify)
        asset = graph_of(asset, asset_path.parent, str(asset_path))
    except InputError as exc:
        raise SuiteError([_at(path, f"asset: {suite.asset} runs a behaviour that cannot be loaded", root, ["asset"]),
                          *exc.problems]) from None
    problems = []
    node_ids = set(asset.node_ids())
    for i, case in enumerate(suite.cases):
        unknown = [k for k in case.variables if k not in asset.variables]
        if unknown:
            problems.append(_at(path, f"case {case.name!r}, cases.{i}.variables: not variables of the asset: "
                                f"{', '.join(unknown)}", root, ["cases", i, "variables"]))
        if case.history and not (path.parent / case.history).is_file():
            problems.append(_at(path, f"case {case.name!r}, cases.{i}.history: no file {case.history}",
                                root, ["cases", i, "history"]))
        for t, turn in enumerate(case.turns):
            named = set(turn.expect.visits) | set(turn.expect.not_visits) | set(turn.expect.exits) | set(turn.expect.path or [])
            for missing in sorted(named - node_ids):
                problems.append(_at(path, f"case {case.name!r}, cases.{i}.turns.{t}.expect: no node {missing!r} in "
                                    f"{suite.asset}", root, ["cases", i, "turns", t, "expect"]))
        for e, check in enumerate(case.expect):
            if check.at_turn > len(case.turns):
                problems.append(_at(path, f"case {case.name!r}, cases.{i}.expect.{e}.at_turn: the case has "
                                    f"{len(case.turns)} turns", root, ["cases", i, "expect", e, "at_turn"]))
    red = suite.red_team
    for i, pack in enumerate(red.packs if red is not None else []):
        if not (path.parent / pack).is_file():
            problems.append(_at(path, f"red_team.packs.{i}: no attack pack {pack} (a path relative to the suite)",
                                root, ["red_team", "packs", i]))
    if red is not None and red.benign != BUILTIN_BENIGN and not (path.parent / red.benign).is_file():
        problems.append(_at(path, f"red_team.benign: no file {red.benign} (a path relative to the suite, or "
                            f"{BUILTIN_BENIGN})", root, ["red_team", "benign"]))
    if problems:
        raise SuiteError(problems)
    return LoadedSuite(path, suite, asset)


@dataclass
class SuiteBeside:
    """A suite file beside an asset: loaded, or the problems that keep it from loading."""

    path: Path
    loaded: LoadedSuite | None
    problems: list[Problem]


def _names_asset(path: Path, raw: Any, asset_path: Path) -> bool:
    if not isinstance(raw, dict):
        return False
    try:
        return (path.parent / str(raw.get("asset", ""))).resolve() == asset_path
    except (OSError, ValueError, RuntimeError):  # a NUL in the name, a symlink loop
        return False


def _suite_files(asset_path: Path) -> list[Path]:
    return [p for p in sorted(asset_path.parent.iterdir()) if p.name.endswith(SUITE_SUFFIXES)]


def find_suites(asset_path: str | Path) -> list[Path]:
    """The suite files beside an asset that test it (and those that cannot be read: listed, so their
    errors are shown). Raises ``OSError`` when the folder cannot be listed."""
    return [s.path for s in suites_beside(asset_path, load=False)]


def suites_beside(asset_path: str | Path, load: bool = True, cancel: threading.Event | None = None,
                  edited: Asset | None = None) -> list[SuiteBeside]:
    """The suites beside an asset that test it, each file read once (within the suite limits, never
    a pipe or a device): loaded (with ``load``), or the problems that keep it from loading; a file
    that cannot be read is listed with why. ``cancel`` stops it between files (what was read so far
    is returned). ``edited``: the asset as an editor holds it, unsaved edits included (a renamed
    node), which the suites are checked against and run on instead of the file's. Raises ``OSError``
    when the folder cannot be listed."""
    asset_path = Path(asset_path).resolve()
    found = []
    for candidate in _suite_files(asset_path):
        if cancel is not None and cancel.is_set():
            break
        try:
            raw, root = read_suite_yaml(candidate)
        except InputError as exc:
            found.append(SuiteBeside(candidate, None, list(exc.problems)))  # broken: listed, so its errors are shown
            continue
        if not _names_asset(candidate, raw, asset_path):
            continue
        if not load:
            found.append(SuiteBeside(candidate, None, []))
            continue
        try:
            found.append(SuiteBeside(candidate, _checked(candidate, raw, root, edited), []))
        except InputError as exc:
            found.append(SuiteBeside(candidate, None, list(exc.problems)))
    return found


# --- editing a case's expectations ------------------------------------------------------------

# The expectations the editor's form edits; a turn's other expectations (slots, tool, budget, judge,
# reply's regex and counts) are kept as they are
FORM_FIELDS = ("path", "visits", "not_visits", "exits", "intent")
FORM_REPLY_FIELDS = ("contains", "not_contains")


def _round_trip(text: str):
    """A YAML round-tripper set to the file's own indentation, and the file's data (comments kept)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.util import load_yaml_guess_indent

    _guessed, indent, dash = load_yaml_guess_indent(text)
    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never rewrap a long line the designer wrote
    rt.indent(mapping=dash or 2, sequence=indent or 2, offset=dash or 0)
    from ruamel.yaml.scalarfloat import ScalarFloat

    for kind in (float, ScalarFloat):
        rt.representer.add_representer(kind, _represent_float)
    return rt, rt.load(text)


def _represent_float(representer: Any, value: float) -> Any:
    """A float written as PyYAML (which reads the suites) writes it: exact (ruamel rewrote a loaded
    1.802382166772941e+16 as 1.80238216677294e+16) and with a dot before any exponent (YAML 1.1 reads
    1e+16 as text). A scalar ruamel read as a float that PyYAML reads as text (``0E0``: YAML 1.1 wants
    a dot) is written back as it was, so it stays the text it was (it became 0.0, and the suite broke)."""
    from ruamel.yaml.representer import RoundTripRepresenter
    from ruamel.yaml.scalarfloat import ScalarFloat

    if isinstance(value, ScalarFloat):
        node = RoundTripRepresenter.represent_scalar_float(representer, value)
        if _PYYAML_TAGS.resolve(yaml.ScalarNode, node.value, (True, False)) != "tag:yaml.org,2002:float":
            return node
    return representer.represent_scalar("tag:yaml.org,2002:float", _FLOATS.represent_float(float(value)).value)


_FLOATS = yaml.representer.SafeRepresenter()
_PYYAML_TAGS = yaml.resolver.Resolver()  # what PyYAML, which reads the suites, takes a plain scalar for


def _dump(rt: Any, data: Any) -> str:
    import io

    out = io.StringIO()
    rt.dump(data, out)
    return out.getvalue()


def _set_in_place(mapping: Any, key: str, value: Any) -> None:
    """``mapping[key] = value`` keeping the key's place and, for a list or a mapping, its style
    (``[a, b]`` stays on one line); an empty or None value removes the key."""
    if value is None or value == [] or value == {}:
        if key in mapping:
            del mapping[key]
        return
    old = mapping.get(key)
    if isinstance(old, list) and isinstance(value, list):
        old[:] = [_quoted_as(old, v) for v in value]
    elif isinstance(old, dict) and isinstance(value, dict):
        for k in [k for k in old if k not in value]:
            del old[k]
        for k, v in value.items():
            old[k] = _quoted_as(list(old.values()), v, old.get(k))
    elif isinstance(value, (list, dict)):
        from ruamel.yaml.comments import CommentedMap, CommentedSeq

        made = CommentedSeq(value) if isinstance(value, list) else CommentedMap(value)
        made.fa.set_flow_style()  # on one line, as suites write their lists: path: [a, b]
        mapping[key] = made
    else:
        mapping[key] = value


def _quoted_as(siblings: list[Any], value: Any, was: Any = None) -> Any:
    """``value`` quoted as the text it replaces was (or as its siblings are): "a" stays "a"."""
    from ruamel.yaml.scalarstring import ScalarString

    model = was if isinstance(was, ScalarString) else next((v for v in siblings if isinstance(v, ScalarString)), None)
    return type(model)(value) if isinstance(value, str) and model is not None else value


def set_case_expectations(suite_path: str | Path, case_name: str, expects: list[dict[str, Any]]) -> None:
    """Write turn by turn the form's expectations (``FORM_FIELDS``, and reply ``contains`` and
    ``not_contains``) of case ``case_name``, keeping the file's comments, key order, quoting and
    every other expectation. Each of ``expects`` is one turn's: a field given empty is removed. The
    result must still be a valid suite, else ``SuiteError`` is raised and the file is untouched."""
    suite_path = Path(suite_path)
    read_suite_yaml(suite_path)  # the limits and refusals of reading a suite apply before anything is changed
    rt, data = _round_trip(read_input_text(suite_path, SuiteError, MAX_SUITE_BYTES))
    cases = data.get("cases") if isinstance(data, dict) else None
    case = next((c for c in cases or [] if isinstance(c, dict) and c.get("name") == case_name), None)
    if case is None:
        raise SuiteError([Problem("error", f"no case named {case_name!r}", str(suite_path))])
    turns = case.get("turns") or []
    if len(expects) != len(turns):
        raise SuiteError([Problem("error", f"case {case_name!r} has {len(turns)} turns, not {len(expects)}",
                                  str(suite_path))])
    for turn, wanted in zip(turns, expects):
        if "expect" not in turn or turn["expect"] is None:
            turn["expect"] = {}
        expect = turn["expect"]
        for key in FORM_FIELDS:
            if key in wanted:
                _set_in_place(expect, key, wanted[key])
        reply = wanted.get("reply")
        if isinstance(reply, dict):
            if "reply" not in expect or expect["reply"] is None:
                expect["reply"] = {}
            for key in FORM_REPLY_FIELDS:
                if key in reply:
                    _set_in_place(expect["reply"], key, reply[key])
            if not expect["reply"]:
                del expect["reply"]
        if not expect:
            del turn["expect"]
    text = _dump(rt, data)
    check = suite_path.with_name(f".{suite_path.name}.checking")
    try:  # the new text checked as a suite (with the asset beside it) before it replaces the file
        atomic_write_text(check, text)
        load_suite(check)
    except SuiteError as exc:  # named as the file the designer knows
        raise SuiteError([dataclasses.replace(p, file=str(suite_path)) if p.file == str(check) else p
                          for p in exc.problems]) from None
    finally:
        check.unlink(missing_ok=True)
    atomic_write_text(suite_path, text)


# --- following a renamed node ---------------------------------------------------------------

# The fields of a turn's expectations that name nodes (``exits`` by its keys)
NODE_FIELDS = ("path", "visits", "not_visits", "exits")


def renamed_id(node_id: str, old: str, new: str) -> str:
    """``node_id`` once the asset's node ``old`` is called ``new``: that node, or a node of the
    behaviour it runs (``old/classify`` -> ``new/classify``); any other id as it is."""
    if node_id == old:
        return new
    if node_id.startswith(old + NAMESPACE_SEP):
        return new + node_id[len(old):]
    return node_id


def _renamed_in(expect: Any, field: str, old: str, new: str) -> bool:
    """Rename in place the nodes one field of a turn's expectations names; whether any was."""
    value = expect.get(field)
    if isinstance(value, list):
        renamed = [renamed_id(v, old, new) if isinstance(v, str) else v for v in value]
        if renamed == list(value):
            return False
        value[:] = [_quoted_as([was], now, was) for was, now in zip(value, renamed)]
        return True
    if isinstance(value, dict):
        keys = list(value)
        renamed = [renamed_id(k, old, new) if isinstance(k, str) else k for k in keys]
        if renamed == keys or len(set(renamed)) != len(renamed):  # unchanged, or two would merge into one
            return False
        for position, (was, now) in enumerate(zip(keys, renamed)):
            if was != now:
                port = value.pop(was)
                value.insert(position, now, port)  # the key's place kept (a CommentedMap)
        return True
    return False


def rename_node_in_suite_text(text: str, old: str, new: str) -> tuple[str, int]:
    """A suite's ``text`` with every expectation that names the asset's node ``old`` (or a node of the
    behaviour it runs, ``old/classify``) naming ``new`` instead, its comments, order and quoting kept,
    and how many expectations changed: each field of a turn's ``expect`` (``NODE_FIELDS``) counts once.
    With none, ``text`` itself. Raises ``ruamel.yaml.error.YAMLError`` for text that is not YAML."""
    rt, data = _round_trip(text)
    cases = data.get("cases") if isinstance(data, dict) else None
    changed = 0
    for case in cases if isinstance(cases, list) else []:
        turns = case.get("turns") if isinstance(case, dict) else None
        for turn in turns if isinstance(turns, list) else []:
            expect = turn.get("expect") if isinstance(turn, dict) else None
            if isinstance(expect, dict):
                changed += sum(_renamed_in(expect, field, old, new) for field in NODE_FIELDS)
    return (_dump(rt, data), changed) if changed else (text, 0)


@dataclass
class SuiteRename:
    """A suite file beside an asset as it is, and as it becomes when a node of the asset is renamed."""

    path: Path
    before: str
    after: str
    changed: int  # expectations that named the node


def read_suite_text(path: str | Path) -> str:
    """A suite file's text, within the limits of reading a suite. Raises ``SuiteError``."""
    return read_input_text(path, SuiteError, MAX_SUITE_BYTES)


def suites_renaming(asset_path: str | Path, old: str, new: str) -> list[SuiteRename]:
    """The suites beside the asset at ``asset_path`` whose expectations name its node ``old`` (or a
    node of the behaviour it runs), each with its text once that node is called ``new``. A suite that
    cannot be read is left out (the Tests dock shows why). Raises ``OSError`` when the folder cannot
    be listed."""
    from ruamel.yaml.error import YAMLError

    asset_path = Path(asset_path).resolve()
    out = []
    for path in _suite_files(asset_path):
        try:
            before = read_suite_text(path)
            if old not in before:  # most suites: not parsed at all (a large one takes seconds)
                continue
            if not _names_asset(path, read_suite_yaml(path)[0], asset_path):
                continue
            after, changed = rename_node_in_suite_text(before, old, new)
        except (SuiteError, YAMLError):  # gone since, or YAML PyYAML reads and ruamel does not: left as it is
            continue
        if changed:
            out.append(SuiteRename(path, before, after, changed))
    return out


# --- adding a case ----------------------------------------------------------------------------


def save_case(suite_path: str | Path, asset_path: str | Path, case: dict[str, Any]) -> str:
    """Add ``case`` to the suite at ``suite_path`` (made, for the asset, if missing); returns the name it
    got (made unique). Raises ``SuiteError`` when the existing file cannot be read; it is then untouched."""
    return save_cases(suite_path, asset_path, [case])[0]


def save_cases(suite_path: str | Path, asset_path: str | Path, cases: list[dict[str, Any]],
               settings: dict[str, Any] | None = None) -> list[str]:
    """Add ``cases`` to the suite at ``suite_path`` as ``save_case`` adds one; ``settings`` (such as
    ``model`` and ``seed``) go into a suite made here. Returns the names they got."""
    suite_path = Path(suite_path)
    rt = None
    if suite_path.exists():
        raw = read_suite_yaml(suite_path)[0] or {}
        if not isinstance(raw, dict) or not isinstance(raw.get("cases", []), list):
            raise SuiteError([Problem("error", "not a suite: expected a mapping with a 'cases' list", str(suite_path))])
        if raw:  # appended to the file as the designer wrote it: comments, order and quoting kept
            rt, raw = _round_trip(read_input_text(suite_path, SuiteError, MAX_SUITE_BYTES))
    else:
        asset_rel = Path(asset_path).resolve()
        try:
            rel = asset_rel.relative_to(suite_path.parent.resolve()).as_posix()
        except ValueError:
            rel = str(asset_rel)
        raw = {"asset": rel, **(settings or {}), "cases": []}
    names = {c.get("name") for c in raw.get("cases", []) if isinstance(c, dict)}
    if "cases" not in raw:
        raw["cases"] = []
    given = []
    for case in cases:
        name, n = case["name"], 2
        while name in names:
            name, n = f"{case['name']} ({n})", n + 1
        names.add(name)
        given.append(name)
        raw["cases"].append({**case, "name": name})
    text = _dump(rt, raw) if rt is not None else yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=110)
    atomic_write_text(suite_path, text)
    return given
