"""Tool Call: the model calls one declared tool, constrained to the tool's JSON schema.

It builds its prompt like Generate (``GeneratingNode``), with the tool definitions in the system
message. The call and its result are one history entry, replayed whole or left out by
``disposition``; the result also goes to the slot named by the node's id.

Its ``outcomes`` branch on the game's answer: the first whose pattern the tool's result matches
takes its own exit (port ``outcome:NAME``); no match, or no call, takes ``default_exit``. What
follows an outcome is grounded in the game's state, never in what the player claimed.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from runtime.backends.base import GenerationResult
from runtime.dialogue.history import ToolExchange
from runtime.events import ToolCalled
from runtime.names import free_form_problem
from runtime.nodes.base import END, SLOT_PATTERN, FieldError, Strict, field_help, unique_names
from runtime.nodes.checks import NodeChecks
from runtime.nodes.generate import GeneratingNode
from runtime.nodes.running import NodeRun, TurnError
from runtime.patterns import PatternError, compile_pattern
from runtime.patterns import search as search_pattern

Disposition = Literal["replay", "omit"]


class Tool(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="Name the model calls the tool by.")
    description: str = Field("", description="What the tool does; shown to the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the call's arguments (an object schema).",
    )
    mock_result: str | None = Field(
        None, description="Result used in test conversations. Null asks the caller (the editor asks the designer)."
    )

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"name": f"tool_{number}", "description": "",
                "parameters": {"type": "object", "properties": {}}, "mock_result": None}

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type", "object") != "object":
            raise ValueError("a tool's parameters must be a JSON Schema with type 'object'")
        props = v.get("properties", {})
        if not isinstance(props, dict):
            raise ValueError("'properties' must be an object mapping names to schemas")  # noqa: TRY004 - pydantic reports ValueErrors only
        # A property's schema is an object ({} takes any value); `"x": 5` describes nothing the
        # model could write, and backends that read the schema choked on it.
        odd = next((name for name, schema in props.items() if not isinstance(schema, dict)), None)
        if odd is not None:
            raise FieldError(
                f"properties.{odd}",
                f"a property's schema must be a JSON Schema object such as {{\"type\": \"string\"}}, "
                f"not {json.dumps(props[odd], ensure_ascii=False, default=str)[:40]}")
        required = v.get("required", [])
        if not (isinstance(required, list) and all(isinstance(n, str) for n in required)):
            raise ValueError("'required' must be a list of property names")
        return v


OUTCOME_PORT_PREFIX = "outcome:"


def outcome_port(name: str) -> str:
    return f"{OUTCOME_PORT_PREFIX}{name}"


class ToolOutcome(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="The outcome's name: its exit's label.")
    tool: str = Field("", description="The tool whose result is read. Empty: any tool's.")
    pattern: str = Field(description="Regular expression searched (case-blind) in the tool's result, as the game answered it.")
    exit: str = Field(END, description="Node that runs when the result matches. Empty ends the turn.")

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"name": f"outcome_{number}", "tool": "", "pattern": "true", "exit": ""}

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            raise ValueError(str(exc)) from None
        return pattern


def tools_text(tools: list[Tool]) -> str:
    lines = [
        ("You can call exactly one of these tools. Answer with one JSON object "
        '{"name": TOOL, "arguments": {...}} and nothing else.')
    ]
    for tool in tools:
        params = json.dumps(tool.parameters, ensure_ascii=False, sort_keys=True)
        description = f": {tool.description}" if tool.description else ""
        lines.append(f"- {tool.name}{description} Arguments (JSON Schema): {params}")
    return "\n".join(lines)


class ToolCall(GeneratingNode):
    type: Literal["ToolCall"] = "ToolCall"
    tools: list[Tool] = Field(default_factory=list, **field_help("Tools the model may call; one call per turn, constrained to a declared tool and its schema.", "Tools"))
    disposition: Disposition = Field("replay", **field_help("replay: later turns see the call and its result as a pair. omit: they see neither.", "History"))
    outcomes: list[ToolOutcome] = Field(default_factory=list, **field_help(
        "Branches on the game's answer: the first outcome whose pattern the tool's result matches takes its exit; "
        "otherwise (or with no call) the next exit. What follows is grounded in the game's state.", "Exits"))

    ASKS_THE_GAME: ClassVar[bool] = True
    WRITTEN_WHEN_SET: ClassVar[tuple[str, ...]] = ("outcomes",)

    _unique_tools = unique_names("tools", "tool")
    _unique_outcomes = unique_names("outcomes", "outcome")

    def exits(self) -> dict[str, str]:
        out = {outcome_port(o.name): o.exit for o in self.outcomes}
        out["default_exit"] = self.default_exit
        return out

    def exit_field(self, port: str) -> str:
        if port.startswith(OUTCOME_PORT_PREFIX):
            for index, outcome in enumerate(self.outcomes):
                if outcome_port(outcome.name) == port:
                    return f"outcomes.{index}.exit"
            raise KeyError(port)
        return super().exit_field(port)

    def exit_label(self, port: str) -> str:
        return port[len(OUTCOME_PORT_PREFIX):] if port.startswith(OUTCOME_PORT_PREFIX) else super().exit_label(port)

    def run(self, run: NodeRun) -> str:
        super().run(run)
        exchange = next((e for e in reversed(run.turn.entries) if isinstance(e, ToolExchange) and e.node == self.id), None)
        if exchange is None or not self.outcomes:
            return "default_exit"
        for index, outcome in enumerate(self.outcomes):
            if outcome.tool and outcome.tool != exchange.tool:
                continue
            try:
                found = search_pattern(outcome.pattern, exchange.result)
            except PatternError as exc:
                raise TurnError(str(exc), self.id, f"outcomes.{index}.pattern") from None
            if found:
                return outcome_port(outcome.name)
        return "default_exit"

    def system_additions(self) -> list[str]:
        return [tools_text(self.tools)] if self.tools else []

    def output_schema(self) -> dict[str, Any]:
        """The JSON the node must write: one call of one declared tool, with valid arguments."""
        branches = [
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in self.tools
        ]
        return branches[0] if len(branches) == 1 else {"oneOf": branches}

    def use_output(self, run: NodeRun, result: GenerationResult) -> None:
        text = result.text
        tools = {t.name: t for t in self.tools}
        try:
            call = json.loads(text)
        except json.JSONDecodeError:
            call = None
        if not (isinstance(call, dict) and call.get("name") in tools and isinstance(call.get("arguments", {}), dict)):
            run.diag.warnings.append(
                f"the model did not write a valid tool call; no tool was called (output: {text[:80]!r})")
            return
        tool = tools[call["name"]]
        arguments = dict(call.get("arguments", {}))
        kept = free_form_problem(arguments)
        if kept:  # a history could not hold the call
            run.diag.warnings.append(f"the model's tool call cannot be kept ({kept}); no tool was called")
            return
        if tool.mock_result is not None and (run.turn.mock_tools or run.turn.tool_result is None):
            outcome = tool.mock_result
        elif run.turn.tool_result is not None:
            outcome = str(run.turn.tool_result(self.id, tool.name, arguments))
        else:
            raise TurnError(
                f"the model called {tool.name!r}, which has no mock_result, and no tool result was supplied; "
                "give the tool a mock_result or answer the call",
                self.id, "tools",
            )
        run.turn.entries.append(ToolExchange(self.id, tool.name, arguments, outcome, self.disposition == "replay"))
        run.turn.slots[self.id] = outcome
        run.emit(ToolCalled(self.id, tool.name, arguments, outcome))

    def check(self, checks: NodeChecks) -> None:
        if not self.tools:
            checks.error("a Tool Call node needs at least one tool", "tools")
        names = {t.name for t in self.tools}
        for index, outcome in enumerate(self.outcomes):
            if outcome.tool and outcome.tool not in names:
                checks.error(f"outcome {outcome.name!r} reads tool {outcome.tool!r}, which this node does not declare",
                             f"outcomes.{index}.tool")
