"""Conversation test suites: scripted conversations with expectations checked against each turn of the graph.

A suite is a YAML file (schema: resources/schemas/test-suite.schema.json) naming an asset and holding
cases. A case is a list of player lines, each with what the turn must do:

- **path**: the nodes visited (``path`` exactly, ``visits``/``not_visits``), the exit a node took
  (``exits: {classify: "intent:greet"}``), the intent chosen, slots written, the tool called and its
  arguments (a partial match, or a JSON Schema);
- **reply**: ``contains``, ``not_contains``, ``regex``, ``max_words``, ``mentions_one_of``;
- **budget**: prompt tokens at most N, no trim this turn, a summary written this turn;
- **judge**: a rubric a model grades pass/fail with a reason (grammar-constrained to that answer);

and conversation-level expectations checked at a given turn (a fact from turn 2 recalled at turn 12).

Turns count from 1 in suites and reports. A case that cannot run (bad asset, a failed turn) fails with
the reason; it never stops the other cases. Every node visit and exit taken is counted (coverage).
"""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runtime.agent import Agent, TurnResult
from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.backends.base import Backend, ChatMessage, GenerationRequest
from runtime.backends.http import ServerUnavailable
from runtime.diagnostics import TurnDiagnostics
from runtime.dialogue.dialog_file import load_history
from runtime.dialogue.history import ToolExchange, Turn
from runtime.files.reading import read_input_text
from runtime.nodes.classify_intent import port_intent
from runtime.problems import BackendError, InputError, Problem

SUITE_SUFFIXES = (".suite.yaml", ".suite.yml")
JUDGE_KEY = "__judge__"
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"enum": ["pass", "fail"]}, "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}
JUDGE_SYSTEM = (
    "You grade one reply of a game character against a rubric. Read the player's line, the reply and the "
    "rubric. Answer with JSON: verdict \"pass\" if the reply meets the rubric, otherwise \"fail\", and a short "
    "reason in one sentence."
)


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
        problems = []
        for err in exc.errors(include_url=False):
            loc = list(err["loc"])
            case = ""
            if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
                cases = raw.get("cases")
                if isinstance(cases, list) and loc[1] < len(cases) and isinstance(cases[loc[1]], dict):
                    case = str(cases[loc[1]].get("name", ""))
            where = ".".join(str(p) for p in loc)
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            label = f"case {case!r}, " if case else ""
            problems.append(Problem("error", f"{label}{where}: {message}", str(path), line=_line_of(root, loc)))
        raise SuiteError(problems) from None
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


# --- results -----------------------------------------------------------------------------------


@dataclass
class Check:
    """One expectation, checked."""

    kind: str  # path, visits, exits, intent, slots, tool, reply, budget, judge
    passed: bool
    message: str  # what was expected and what happened


@dataclass
class TurnOutcome:
    number: int  # from 1
    line: str
    reply: str = ""
    path: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    result: TurnResult | None = None  # the runtime's result (diagnostics, prompt parts)
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and all(c.passed for c in self.checks)


@dataclass
class CaseResult:
    suite: str
    case: str
    repeat: int = 0
    turns: list[TurnOutcome] = field(default_factory=list)
    conversation: list[tuple[int, Check]] = field(default_factory=list)  # (turn from 1, check)
    error: str = ""
    seconds: float = 0.0
    model_seconds: float = 0.0  # the model's own prompt reading and generating
    visits: Counter = field(default_factory=Counter)  # node id -> times run
    exits: Counter = field(default_factory=Counter)  # (node id, port) -> times taken
    server: str = ""  # what ran the conversation: a fleet's server name, else the backend's label
    moved: list[str] = field(default_factory=list)  # in a fleet run: why it was run again on another server

    @property
    def passed(self) -> bool:
        return not self.error and all(t.passed for t in self.turns) and all(c.passed for _, c in self.conversation)

    @property
    def failures(self) -> list[str]:
        out = [self.error] if self.error else []
        for t in self.turns:
            if t.error:
                out.append(f"turn {t.number}: {t.error}")
            out += [f"turn {t.number}: {c.kind}: {c.message}" for c in t.checks if not c.passed]
        out += [f"after turn {n}: {c.kind}: {c.message}" for n, c in self.conversation if not c.passed]
        return out


# --- checking ------------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return re.findall(r"\w+(?:['\u2019-]\w+)*", text)


def check_reply(expect: ReplyExpect, reply: str) -> list[Check]:
    checks = []
    low = reply.lower()
    for text in expect.contains:
        checks.append(Check("reply", text.lower() in low, f"contains {text!r}"))
    for text in expect.not_contains:
        checks.append(Check("reply", text.lower() not in low, f"does not contain {text!r}"))
    if expect.regex:
        checks.append(Check("reply", re.search(expect.regex, reply, re.IGNORECASE) is not None,
                            f"matches /{expect.regex}/"))
    if expect.max_words is not None:
        count = len(_words(reply))
        checks.append(Check("reply", count <= expect.max_words, f"at most {expect.max_words} words (has {count})"))
    if expect.mentions_one_of:
        found = [m for m in expect.mentions_one_of
                 if re.search(rf"(?<!\w){re.escape(m.lower())}(?!\w)", low)]
        checks.append(Check("reply", bool(found), f"mentions one of {', '.join(expect.mentions_one_of)}"
                            + (f" (mentions {found[0]!r})" if found else " (mentions none)")))
    return checks


def _partial(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and _partial(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(_partial, expected, actual))
    return expected == actual


def check_turn(expect: TurnExpect, result: TurnResult, turn: Turn) -> list[Check]:
    """Every expectation of a turn except the judge's (which needs a model). ``turn`` is the turn as the
    history holds it (its tool exchanges)."""
    checks: list[Check] = []
    diag = result.diagnostics
    path = list(result.path)
    if expect.path is not None:
        checks.append(Check("path", path == expect.path, f"path {' > '.join(expect.path)} (took {' > '.join(path)})"))
    for node in expect.visits:
        checks.append(Check("path", node in path, f"visits {node} (took {' > '.join(path)})"))
    for node in expect.not_visits:
        checks.append(Check("path", node not in path, f"does not visit {node} (took {' > '.join(path)})"))
    taken = {n.node: n.exit for n in diag.nodes} if diag is not None else {}
    for node, port in expect.exits.items():
        checks.append(Check("exits", taken.get(node) == port, f"{node} takes {port} (took {taken.get(node) or 'none: not run'})"))
    if expect.intent is not None:
        chosen = next((name for p in taken.values() if (name := port_intent(p)) is not None), "")
        checks.append(Check("intent", chosen == expect.intent, f"intent {expect.intent or '(none)'} (chose {chosen or '(none)'})"))
    for slot, value in expect.slots.items():
        actual = result.slots.get(slot)
        checks.append(Check("slots", _partial(value, actual), f"slot {slot} = {value!r} (is {actual!r})"))
    if expect.tool is not None:
        calls = tool_calls(turn)
        match = [c for c in calls if c[0] == expect.tool.name]
        ok = bool(match) and _partial(expect.tool.arguments, match[0][1])
        detail = f"called {', '.join(f'{n}({json.dumps(a)})' for n, a in calls) or 'no tool'}"
        if ok and expect.tool.arguments_schema is not None:
            ok, why = _schema_valid(expect.tool.arguments_schema, match[0][1])
            detail += f"; {why}" if why else ""
        checks.append(Check("tool", ok, f"calls {expect.tool.name} with {json.dumps(expect.tool.arguments)} ({detail})"))
    if expect.reply is not None:
        checks += check_reply(expect.reply, result.reply)
    if expect.budget is not None and diag is not None:
        b = expect.budget
        prompts = {n.node: n.tokens.prompt or n.tokens.counted or 0 for n in diag.nodes}
        if b.max_prompt_tokens is not None:
            worst = max(prompts.items(), key=lambda kv: kv[1], default=("", 0))
            checks.append(Check("budget", worst[1] <= b.max_prompt_tokens,
                                f"prompts at most {b.max_prompt_tokens} tokens (largest: {worst[0]} {worst[1]})"))
        if b.no_trim:
            trimmed = [n.node for n in diag.nodes if n.trim is not None and n.trim.triggered]
            checks.append(Check("budget", not trimmed, f"no trim ({', '.join(trimmed) or 'none'} trimmed)"))
        if b.summary_written is not None:
            written = any(n.summary is not None for n in diag.nodes)
            checks.append(Check("budget", written == b.summary_written,
                                f"a summary {'is' if b.summary_written else 'is not'} written ({'one was' if written else 'none was'})"))
    return checks


def tool_calls(turn: Turn) -> list[tuple[str, dict[str, Any]]]:
    """The tools a turn called, with their arguments (its tool exchanges)."""
    return [(e.tool, dict(e.arguments)) for e in turn.entries if isinstance(e, ToolExchange)]


def _schema_valid(schema: dict[str, Any], value: Any) -> tuple[bool, str]:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - a test dependency
        return True, "jsonschema is not installed: the schema was not checked"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return False, f"arguments do not match the schema: {exc.message}"
    except jsonschema.SchemaError as exc:
        return False, f"the expectation's schema is not valid: {exc.message}"
    return True, ""


class Judge:
    """Grades a reply against a rubric with a model, constrained to a pass/fail verdict and a reason."""

    def __init__(self, backend: Backend, model: str) -> None:
        self.backend = backend
        self.model = model
        self._lock = threading.Lock()

    def grade(self, rubric: str, line: str, reply: str) -> Check:
        messages = [ChatMessage("system", JUDGE_SYSTEM),
                    ChatMessage("user", f"Player: {line}\nReply: {reply}\nRubric: {rubric}")]
        try:
            with self._lock:
                session = self.backend.session(JUDGE_KEY, self.model, 2048)
                result = session.generate(GenerationRequest(messages, 96, temperature=0.0, seed=0,
                                                            json_schema=JUDGE_SCHEMA))
            answer = json.loads(result.text)
            verdict, reason = answer["verdict"], str(answer.get("reason", "")).strip()
        except ServerUnavailable:
            raise  # the case, not the check, failed (a fleet run moves it to another server)
        except (BackendError, json.JSONDecodeError, KeyError, TypeError) as exc:
            return Check("judge", False, f"{rubric!r}: the judge could not answer ({exc})")
        return Check("judge", verdict == "pass", f"{rubric!r}: {verdict}: {reason or '(no reason given)'}")


# --- running -------------------------------------------------------------------------------------


def run_case(loaded: LoadedSuite, case: Case, backend: Backend, judge: Judge | None = None, repeat: int = 0,
             seed: int | None = None, on_turn: Callable[[TurnOutcome], None] | None = None,
             cancel: threading.Event | None = None, lost_server_raises: bool = False) -> CaseResult:
    """Run one case from a fresh agent. Never raises for a failing case: the reason is in the result.
    With ``lost_server_raises``, a server that cannot be reached (``ServerUnavailable``) is raised
    instead, so a fleet run can run the conversation again on another server."""
    out = CaseResult(loaded.name, case.name, repeat)
    started = time.perf_counter()
    try:
        asset_dir = str(loaded.path.parent.joinpath(loaded.suite.asset).resolve().parent)
        agent = Agent(loaded.asset, backend, asset_dir)
        if case.history:
            agent.import_dialog(load_history(loaded.path.parent / case.history), case.history)
        for name, value in case.variables.items():
            agent.set_variable(name, value)
        agent.reroll_seeds(loaded.suite.seed + (seed or 0) + repeat)
        summaries = 0
        for number, script in enumerate(case.turns, 1):
            if cancel is not None and cancel.is_set():
                out.error = "stopped"
                break
            outcome = TurnOutcome(number, script.say)
            out.turns.append(outcome)
            try:
                result = agent.run_turn(script.say, script.instructions, cancel=cancel,
                                        tool_result=_tool_answers(case.tool_results))
            except Exception as exc:  # a failed turn (a backend error, a bad template) fails the case, not the run
                if lost_server_raises and isinstance(exc, ServerUnavailable):
                    raise
                outcome.error = f"the turn failed: {exc}"
                if on_turn is not None:
                    on_turn(outcome)
                break
            outcome.result, outcome.reply, outcome.path = result, result.reply, list(result.path)
            for diag in result.diagnostics.nodes if result.diagnostics is not None else []:
                out.visits[diag.node] += 1
                out.exits[(diag.node, diag.exit)] += 1
                out.model_seconds += (diag.timings.prompt_ms + diag.timings.generate_ms) / 1000
                summaries += diag.summary is not None
            outcome.checks = check_turn(script.expect, result, agent.history.turns[-1])
            if script.expect.judge:
                outcome.checks.append(_judge(judge, script.expect.judge, script.say, result.reply))
            for check in (c for c in case.expect if c.at_turn == number):
                if check.reply is not None:
                    out.conversation += [(number, c) for c in check_reply(check.reply, result.reply)]
                if check.judge:
                    out.conversation.append((number, _judge(judge, check.judge, script.say, result.reply)))
                if check.summary_written is not None:
                    out.conversation.append((number, Check("budget", (summaries > 0) == check.summary_written,
                                                           f"a summary exists by turn {number}: {summaries > 0}")))
            if on_turn is not None:
                on_turn(outcome)
    except InputError as exc:
        out.error = str(exc)
    except ServerUnavailable as exc:
        if lost_server_raises:
            raise
        out.error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # the case cannot run at all (a broken history file, a backend that failed)
        out.error = f"{type(exc).__name__}: {exc}"
    out.seconds = time.perf_counter() - started
    return out


def _tool_answers(results: dict[str, str]):
    def answer(node_id: str, tool: str, arguments: dict[str, Any]) -> str:
        if tool not in results:
            raise InputError([Problem("error", f"the model called {tool!r}, which has no mock_result; give the case "
                                      f"tool_results: {{{tool}: ...}}", node_id=node_id, field="tools")])
        return results[tool]

    return answer


def _judge(judge: Judge | None, rubric: str, line: str, reply: str) -> Check:
    if judge is None:
        return Check("judge", False, f"{rubric!r}: no judge model")
    return judge.grade(rubric, line, reply)


def shard_of(case_id: str, shards: int) -> int:
    """The shard (from 0) a case belongs to: stable across machines and runs."""
    return zlib.crc32(case_id.encode("utf-8")) % shards


@dataclass
class Coverage:
    """How often each node ran and each exit was taken, over every case run on one asset."""

    asset: Asset
    visits: Counter = field(default_factory=Counter)
    exits: Counter = field(default_factory=Counter)

    def add(self, result: CaseResult) -> None:
        self.visits.update(result.visits)
        self.exits.update(result.exits)

    @property
    def all_exits(self) -> list[tuple[str, str]]:
        return [(n.id, port) for n in self.asset.nodes for port in n.exits()]

    @property
    def never_taken(self) -> list[tuple[str, str]]:
        return [e for e in self.all_exits if not self.exits.get(e)]

    @property
    def never_visited(self) -> list[str]:
        return [n.id for n in self.asset.nodes if not self.visits.get(n.id)]

    @property
    def percent(self) -> float:
        """Nodes visited and exits taken, out of all nodes and exits."""
        total = len(self.asset.nodes) + len(self.all_exits)
        covered = total - len(self.never_visited) - len(self.never_taken)
        return 100.0 * covered / total if total else 100.0


@dataclass
class Report:
    results: list[CaseResult] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)  # asset file -> coverage
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def pass_rates(self) -> dict[str, tuple[int, int]]:
        """suite::case -> (passed runs, runs)."""
        rates: dict[str, list[int]] = {}
        for r in self.results:
            rates.setdefault(f"{r.suite}::{r.case}", []).append(int(r.passed))
        return {k: (sum(v), len(v)) for k, v in rates.items()}

    def flaky(self) -> list[str]:
        return [k for k, (ok, n) in self.pass_rates().items() if 0 < ok < n]

    def coverage_percent(self) -> float:
        if not self.coverage:
            return 100.0
        return min(c.percent for c in self.coverage.values())


BackendFactory = Callable[[], Backend]


@dataclass
class Server:
    """One place to run conversations in a fleet run: a name for reports and a maker of backends."""

    name: str
    make_backend: BackendFactory
    lost: str = ""  # why it was given up on, once it was


def run_suites(loaded: list[LoadedSuite], make_backend: BackendFactory | list[Server], *, jobs: int = 1,
               repeat: int = 1, seed: int | None = None, shard: tuple[int, int] | None = None, judge_model: str = "",
               on_case: Callable[[CaseResult], None] | None = None,
               on_turn: Callable[[str, TurnOutcome], None] | None = None,
               cancel: threading.Event | None = None) -> Report:
    """Run every case (``repeat`` times each) on ``jobs`` threads, each with a backend of its own.

    ``make_backend`` may be a list of servers (a fleet): thread ``j`` runs its conversations on server
    ``j`` mod the number of servers, so a conversation stays on one server, its nodes on their slots.
    A server that cannot be reached mid-conversation is given up on, and the conversation runs again
    from its start on another server (its result says so in ``moved``); when no server is left, the
    cases left fail with the reason. Nothing is dropped: every case has a result."""
    servers = make_backend if isinstance(make_backend, list) else [Server("", make_backend)]
    fleet = isinstance(make_backend, list)
    work = [(s, c, k) for s in loaded for c in s.suite.cases for k in range(repeat)
            if shard is None or shard_of(s.case_id(c), shard[1]) == shard[0]]
    report = Report(coverage={str(s.path.parent / s.suite.asset): Coverage(s.asset) for s in loaded})
    jobs = max(1, min(jobs, len(work) or 1))
    made: list[Backend] = []
    lock = threading.Lock()
    started = time.perf_counter()
    results: list[CaseResult | None] = [None] * len(work)
    queue: list[tuple[int, list[str]]] = [(i, []) for i in range(len(work))]  # (work index, why it moved)
    bound = [servers[j % len(servers)] for j in range(jobs)]
    judge = judge_model or _judge_model(loaded)

    def rebind(j: int) -> Server | None:
        with lock:
            alive = [s for s in servers if not s.lost]
            if not alive:
                return None
            if bound[j].lost:
                bound[j] = min(alive, key=lambda s: sum(b is s for b in bound))
            return bound[j]

    def worker(j: int) -> None:
        backends: dict[int, tuple[Backend, Judge | None]] = {}
        while True:
            with lock:
                if not queue:
                    return
                index, moved = queue.pop(0)
            suite, case, k = work[index]
            server = rebind(j)
            if server is None:
                reasons = "; ".join(f"{s.name}: {s.lost}" for s in servers)
                results[index] = CaseResult(suite.name, case.name, k, error=f"no server left to run it ({reasons})",
                                            moved=moved)
                _done(results[index])
                continue
            try:
                if id(server) not in backends:
                    b = server.make_backend()
                    with lock:
                        made.append(b)
                    backends[id(server)] = (b, Judge(b, judge) if judge else None)
                b, jdg = backends[id(server)]
                result = run_case(suite, case, b, jdg, k, seed,
                                  (lambda t, cid=suite.case_id(case): on_turn(cid, t)) if on_turn else None, cancel,
                                  lost_server_raises=fleet)
                b.release_all()  # the next case starts from a fresh conversation: free its caches
            except ServerUnavailable as exc:
                with lock:
                    server.lost = server.lost or str(exc)
                    why = f"{server.name} failed ({exc}); run again from the start on another server"
                    queue.insert(0, (index, [*moved, why]))
                continue
            except BackendError as exc:
                result = CaseResult(suite.name, case.name, k, error=f"no backend: {exc}")
            made_here = backends.get(id(server))
            result.server = server.name or (made_here[0].label if made_here else "")
            result.moved = moved
            results[index] = result
            _done(result)

    def _done(result: CaseResult) -> None:
        if on_case is not None:
            on_case(result)

    try:
        if jobs <= 1:
            worker(0)
        else:
            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="parley-test") as pool:
                for future in [pool.submit(worker, j) for j in range(jobs)]:
                    future.result()
    finally:
        for b in made:
            b.close()
    for (suite, _case, _k), result in zip(work, results):
        assert result is not None  # every item ends with a result: run, failed, or no server left
        report.results.append(result)
        report.coverage[str(suite.path.parent / suite.suite.asset)].add(result)
    report.seconds = time.perf_counter() - started
    return report


def _judge_model(loaded: list[LoadedSuite]) -> str:
    if not any(t.expect.judge or any(e.judge for e in c.expect) for s in loaded for c in s.suite.cases
               for t in c.turns):
        return ""
    named = next((s.suite.judge_model for s in loaded if s.suite.judge_model), "")
    if named:
        return named
    from runtime.models.folder import SAMPLE_MODEL

    return SAMPLE_MODEL.file_name


# --- reports -------------------------------------------------------------------------------------


def report_json(report: Report) -> dict[str, Any]:
    return {
        "passed": report.passed,
        "seconds": round(report.seconds, 2),
        "cases": [{
            "suite": r.suite, "case": r.case, "repeat": r.repeat, "passed": r.passed, "error": r.error,
            "seconds": round(r.seconds, 3), "model_seconds": round(r.model_seconds, 3),
            "server": r.server, "moved": r.moved,
            "turns": [{"turn": t.number, "say": t.line, "reply": t.reply, "path": t.path, "passed": t.passed,
                       "error": t.error, "checks": [vars(c) for c in t.checks]} for t in r.turns],
            "conversation": [{"after_turn": n, **vars(c)} for n, c in r.conversation],
        } for r in report.results],
        "pass_rates": {k: {"passed": ok, "runs": n} for k, (ok, n) in report.pass_rates().items()},
        "flaky": report.flaky(),
        "coverage": {path: {
            "percent": round(c.percent, 1),
            "nodes": {n.id: c.visits.get(n.id, 0) for n in c.asset.nodes},
            "exits": {f"{node}.{port}": c.exits.get((node, port), 0) for node, port in c.all_exits},
            "never_taken": [f"{node}.{port}" for node, port in c.never_taken],
        } for path, c in report.coverage.items()},
    }


def report_junit(report: Report) -> str:
    from xml.sax.saxutils import quoteattr

    by_suite: dict[str, list[CaseResult]] = {}
    for r in report.results:
        by_suite.setdefault(r.suite, []).append(r)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuites tests="{len(report.results)}" failures="{sum(not r.passed for r in report.results)}" '
             f'time="{report.seconds:.2f}">']
    for suite, results in by_suite.items():
        failures = sum(not r.passed for r in results)
        lines.append(f'  <testsuite name={quoteattr(suite)} tests="{len(results)}" failures="{failures}">')
        for r in results:
            name = r.case + (f" (run {r.repeat + 1})" if any(x.repeat for x in results) else "")
            lines.append(f'    <testcase classname={quoteattr(suite)} name={quoteattr(name)} time="{r.seconds:.2f}">')
            if not r.passed:
                text = "\n".join(r.failures)
                lines.append(f"      <failure message={quoteattr(r.failures[0] if r.failures else 'failed')}>"
                             f"{_xml_text(text)}</failure>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def _xml_text(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape("".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 32))


# --- writing a case from a conversation ----------------------------------------------------------


def case_from_turns(name: str, turns: list[tuple[TurnDiagnostics, Turn]], variables: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """A case that says the same lines and expects the path they took: the nodes, each classifier's
    exit, the tools called. Replies are not pinned (models vary); add reply checks by hand."""
    out: list[dict[str, Any]] = []
    for diag, turn in turns:
        expect: dict[str, Any] = {"path": list(diag.path)}
        exits = {n.node: n.exit for n in diag.nodes if port_intent(n.exit) is not None or n.exit == "fallback_exit"}
        if exits:
            expect["exits"] = exits
        for tool, arguments in tool_calls(turn)[:1]:
            expect["tool"] = {"name": tool, "arguments": arguments}
        out.append({"say": diag.player, "expect": expect})
    case: dict[str, Any] = {"name": name}
    if variables:
        case["variables"] = dict(variables)
    case["turns"] = out
    return case


def save_case(suite_path: str | Path, asset_path: str | Path, case: dict[str, Any]) -> str:
    """Add ``case`` to the suite at ``suite_path`` (made, for the asset, if missing); returns the name it
    got (made unique). Raises ``SuiteError`` when the existing file cannot be read; it is then untouched."""
    from runtime.files.writing import atomic_write_text

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
