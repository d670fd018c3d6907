"""Classify Intent (LLM): picks one of the listed intents for a line and branches on it.

Each intent is an exit (port ``intent:NAME``, stored in ``intents.N.exit``); the model's answer is
constrained to the intent names plus a "none of these" label, which takes ``fallback_exit``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from runtime.nodes.base import END, OPTIONAL_SLOT_PATTERN, SLOT_PATTERN, Strict, field_help, unique_names
from runtime.nodes.checks import NodeChecks
from runtime.nodes.classifier import Classifier
from runtime.nodes.running import NodeRun
from runtime.resources import default_prompt

CLASSIFY_INTENT_MAX_TOKENS = 32
INTENT_PORT_PREFIX = "intent:"
NONE_LABELS = ("none", "none_of_these", "no_intent_matches")
# When intents take every label above: a hyphen, which no intent name (SLOT_PATTERN) can hold.
LAST_NONE_LABEL = "none-of-the-above"


def intent_port(name: str) -> str:
    """The exit port of the intent called ``name``."""
    return f"{INTENT_PORT_PREFIX}{name}"


def port_intent(port: str) -> str | None:
    """The intent name an exit port stands for, or None for a port that is no intent's."""
    return port[len(INTENT_PORT_PREFIX):] if port.startswith(INTENT_PORT_PREFIX) else None


def none_label(names: list[str]) -> str:
    """The "none of these" label the classifier may answer with: one no intent is named."""
    return next((label for label in NONE_LABELS if label not in names), LAST_NONE_LABEL)


class Intent(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="Label the classifier answers with.")
    description: str = Field("", description="What lines with this intent look like; shown to the model.")
    exit: str = Field(END, description="Node that runs when this intent is chosen. Empty ends the turn.")

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"name": f"intent_{number}", "description": "", "exit": ""}


class ClassifyIntent(Classifier):
    type: Literal["ClassifyIntent"] = "ClassifyIntent"
    system_prompt: str = Field(default_factory=lambda: default_prompt("classify_intent_system"), **field_help("Instructions for the classifier.", "Prompt", multiline=True))
    input: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, **field_help("Slot to classify. Empty classifies the player's line.", "Prompt"))
    intents: list[Intent] = Field(default_factory=list, **field_help("The labels the classifier may choose, each with its exit.", "Intents"))
    slot: str = Field("intent", pattern=SLOT_PATTERN, **field_help("Slot the chosen intent's name is written to.", "Intents"))
    fallback_exit: str = Field(END, **field_help("Node that runs when classification fails. Empty ends the turn.", "Exits"))

    def slots_written(self) -> list[str]:
        return [self.id, self.slot]

    def exits(self) -> dict[str, str]:
        out = {intent_port(i.name): i.exit for i in self.intents}
        out["fallback_exit"] = self.fallback_exit
        return out

    def exit_field(self, port: str) -> str:
        name = port_intent(port)
        if name is not None:
            for index, intent in enumerate(self.intents):
                if intent.name == name:
                    return f"intents.{index}.exit"
            raise KeyError(port)
        return super().exit_field(port)

    def exit_label(self, port: str) -> str:
        name = port_intent(port)
        return name if name is not None else super().exit_label(port)

    def exit_line_kind(self, port: str) -> str:
        for intent in self.intents:
            if port == intent_port(intent.name):
                return (f"a line in which the player {intent.description.strip().rstrip('.')}" if intent.description
                        else f"a line about {intent.name.replace('_', ' ')}")
        if port == "fallback_exit":
            kinds = "; ".join((i.description or i.name.replace("_", " ")).strip().rstrip(".") for i in self.intents)
            return f"a line that is none of these: {kinds}" if kinds else "any line"
        return ""

    _unique_intents = unique_names("intents", "intent")

    # --- the question to the model -----------------------------------------------------------

    def instructions(self) -> str:
        lines = [f"- {i.name}: {i.description}" if i.description else f"- {i.name}" for i in self.intents]
        lines.append(f"- {none_label(self._names())}: none of the above fits")
        return f"{self.system_prompt.strip()}\n\nIntents:\n" + "\n".join(lines)

    def answer_tokens(self, context_size: int) -> int:
        return CLASSIFY_INTENT_MAX_TOKENS

    def answer_constraint(self) -> dict[str, Any]:
        names = self._names()
        return {"choices": names + [none_label(names)]}

    def _names(self) -> list[str]:
        return [i.name for i in self.intents]

    def run(self, run: NodeRun) -> str:
        result = self.ask(run, "took the fallback exit")
        chosen = result.text.strip() if result is not None else None
        if chosen in self._names():
            run.turn.slots[self.slot] = chosen
            return intent_port(chosen)
        run.turn.slots[self.slot] = ""
        return "fallback_exit"

    def check(self, checks: NodeChecks) -> None:
        if not self.intents:
            checks.warning("no intents: every line takes the fallback exit", "intents")
        for index, intent in enumerate(self.intents):
            if intent.exit == END:
                checks.warning(
                    f"intent {intent.name!r} has no branch: when the classifier picks it, the turn ends here "
                    "and the player gets no reply from it. Connect its exit to the node that should answer.",
                    f"intents.{index}.exit",
                )
