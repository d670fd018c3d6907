"""Remember: a node type from a plugin package. It renders a Mustache template and keeps the
result in an agent variable, so later turns can use it as ``{{vars.NAME}}`` (the player's name,
a promise, the quest they took).

Everything the runtime needs is the model class below and ``NODE_TYPE``, built from what
``runtime.nodes`` exports (the one module of the runtime a plugin imports); the editor's look is
in ``parley_remember.view`` (imported only by the editor).
"""

from __future__ import annotations

import re
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
    PromptMessage,
    TemplateError,
    TurnError,
    field_help,
    render_template,
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
        if self.only_if_matches and not re.search(self.only_if_matches, line, re.IGNORECASE):
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
                re.compile(self.only_if_matches)
            except re.error as exc:
                checks.error(f"not a regular expression: {exc}", "only_if_matches")


NODE_TYPE = NodeType(Remember, editor="parley_remember.view:VIEW")
