"""Checking a turn against what a suite expects of it (path, exits, intent, slots, tool, reply,
budget) and the judge that grades a reply against a rubric; and, the other way round, the case that
expects what a conversation did."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

from runtime import patterns
from runtime.agent import TurnResult
from runtime.backends.base import Backend, ChatMessage, GenerationRequest
from runtime.backends.http import ServerUnavailable
from runtime.diagnostics import TurnDiagnostics
from runtime.dialogue.history import ToolExchange, Turn
from runtime.nodes.classify_intent import port_intent
from runtime.problems import BackendError
from runtime.suites.file import ReplyExpect, TurnExpect

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


@dataclass
class Check:
    """One expectation, checked."""

    kind: str  # path, visits, exits, intent, slots, tool, reply, budget, judge
    passed: bool
    message: str  # what was expected and what happened
    node: str = ""  # the node whose choice the check is about (a failed path: the last node both paths share)


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
        checks.append(_regex_check(expect.regex, reply))
    if expect.max_words is not None:
        count = len(_words(reply))
        checks.append(Check("reply", count <= expect.max_words, f"at most {expect.max_words} words (has {count})"))
    if expect.mentions_one_of:
        found = [m for m in expect.mentions_one_of
                 if re.search(rf"(?<!\w){re.escape(m.lower())}(?!\w)", low)]
        checks.append(Check("reply", bool(found), f"mentions one of {', '.join(expect.mentions_one_of)}"
                            + (f" (mentions {found[0]!r})" if found else " (mentions none)")))
    return checks


def _regex_check(pattern: str, reply: str) -> Check:
    """Whether ``reply`` matches ``pattern`` (searched, case-insensitive), within ``runtime.patterns``' time limit."""
    try:
        found = patterns.search(pattern, reply)
    except patterns.PatternError as exc:  # a bad pattern is refused as the suite loads; a suite built in code may not be
        return Check("reply", False, f"matches /{pattern}/ ({exc})")
    return Check("reply", found, f"matches /{pattern}/")


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
    # A bypassed node is on the path (the turn reached it) but did not run: the messages say so.
    bypassed = {n.node for n in diag.nodes if n.bypassed} if diag is not None else set()
    took = _arrows([f"{node} (bypassed)" if node in bypassed else node for node in path])
    if expect.path is not None:
        checks.append(Check("path", path == expect.path, f"{_arrows(expect.path)} (took {took})",
                            "" if path == expect.path else _parting_node(expect.path, path)))
    for node in expect.visits:
        checks.append(Check("path", node in path, f"visits {node} (took {took})",
                            "" if node in path else (path[-1] if path else "")))
    for node in expect.not_visits:
        at = path.index(node) if node in path else -1
        checks.append(Check("path", at < 0, f"does not visit {node} (took {took})", path[at - 1] if at > 0 else ""))
    taken = {n.node: n.exit for n in diag.nodes} if diag is not None else {}
    for node, port in expect.exits.items():
        checks.append(Check("exits", taken.get(node) == port,
                            f"{node} takes {port} (took {_taken(taken.get(node), node in bypassed)})", node))
    if expect.intent is not None:
        chosen = next((name for p in taken.values() if (name := port_intent(p)) is not None), "")
        classifier = next((n for n, p in taken.items() if port_intent(p) is not None or p == "fallback_exit"), "")
        checks.append(Check("intent", chosen == expect.intent, f"intent {expect.intent or '(none)'} (chose "
                            f"{chosen or '(none)'})", "" if chosen == expect.intent else classifier))
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


def _taken(port: str | None, bypassed: bool) -> str:
    if not port:
        return "none: not run"
    return f"{port}, bypassed" if bypassed else port


def _arrows(path: list[str]) -> str:
    return " \u2192 ".join(path) if path else "(no node)"


def _parting_node(expected: list[str], actual: list[str]) -> str:
    """The node whose exit sent the turn another way: the last one both paths share before they part
    (the first node when they part at once)."""
    shared = 0
    while shared < min(len(expected), len(actual)) and expected[shared] == actual[shared]:
        shared += 1
    if shared:
        return actual[shared - 1]
    return actual[0] if actual else ""


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


def judge_check(judge: Judge | None, rubric: str, line: str, reply: str) -> Check:
    if judge is None:
        return Check("judge", False, f"{rubric!r}: no judge model")
    return judge.grade(rubric, line, reply)


# --- a case from a conversation --------------------------------------------------------------


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
