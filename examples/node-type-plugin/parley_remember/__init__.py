"""Remember: a node type from a plugin package. It renders a Mustache template and keeps the
result in an agent variable, so later turns can use it as ``{{vars.NAME}}`` (the player's name,
a promise, the quest they took).

Everything the runtime needs is the model class below and ``NODE_TYPE``, built from what
``runtime.nodes`` exports (the one module of the runtime a plugin imports); the editor's look is
in ``parley_remember.view`` (imported only by the editor).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from runtime.nodes import (
    END,
    SLOT_PATTERN,
    NodeBase,
    NodeChecks,
    NodeInput,
    NodeRun,
    NodeType,
    PatternError,
    PromptMessage,
    TemplateError,
    TurnError,
    compile_pattern,
    field_help,
    render_template,
    search_pattern,
    template_values,
)


class Remember(NodeBase):
    """Keeps a line in an agent variable for later turns."""

    type: Literal["Remember"] = "Remember"
    variable: str = Field("remembered", pattern=SLOT_PATTERN,
                          **field_help("The agent variable that keeps the value; templates read it as {{vars.NAME}}.",
                                       "Memory"))
    value: str = Field("{{input}}", **field_help(
        "Mustache template of what to keep: {{input}}, {{slots.NAME}}, {{vars.NAME}}.", "Memory", mustache=True))
    only_if_matches: str = Field("", **field_help(
        "A regular expression the player's line must match (case-insensitive) for the value to be kept. "
        "Empty keeps it every turn.", "Memory"))
    default_exit: str = Field(END, **field_help("Node that runs next. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    def run(self, run: NodeRun) -> str:
        line = run.turn.player
        values = template_values(line, run.turn.instructions, run.turn.slots, run.variables)
        run.diag.input = NodeInput(prompt=[PromptMessage(role="user", content=line)])
        try:  # a designer's pattern can backtrack without end: search it within the runtime's time limit
            matches = not self.only_if_matches or search_pattern(self.only_if_matches, line)
        except PatternError as exc:
            raise TurnError(str(exc), self.id, "only_if_matches") from None
        if not matches:
            run.diag.output = ""
            run.diag.warnings.append(f"the line does not match {self.only_if_matches!r}; {self.variable} kept as it was")
            return "default_exit"
        try:
            text = render_template(self.value, values, self.id, "value", run.source).strip()
        except TemplateError as exc:
            raise TurnError(str(exc), self.id, "value") from None
        run.set_variable(self.variable, text)
        run.turn.slots[self.id] = text
        run.diag.output = text
        return "default_exit"

    def check(self, checks: NodeChecks) -> None:
        if self.variable not in checks.asset.variables:
            checks.warning(f"{self.variable!r} is not one of the agent's variables; add it so templates "
                           "can read it before the first time this node runs", "variable")
        if self.only_if_matches:
            try:
                compile_pattern(self.only_if_matches)
            except PatternError as exc:
                checks.error(str(exc), "only_if_matches")


NODE_TYPE = NodeType(Remember, editor="parley_remember.view:VIEW")
