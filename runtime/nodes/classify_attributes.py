"""Classify Attributes (LLM): fills attribute slots, each with one of its allowed values.

The model writes one JSON object constrained to the attributes' allowed values; each value goes
to its attribute's slot.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator

from runtime.nodes.base import END, OPTIONAL_SLOT_PATTERN, SLOT_PATTERN, Strict, field_help, unique_names
from runtime.nodes.checks import NodeChecks
from runtime.nodes.classifier import Classifier
from runtime.nodes.running import NodeRun
from runtime.resources import default_prompt


class Attribute(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="Attribute name shown to the model.")
    description: str = Field("", description="What the attribute means; shown to the model.")
    values: list[str] = Field(min_length=1, description="Allowed values; the output is always one of them.")
    slot: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, description="Slot the value is written to. Empty uses the attribute's name.")

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"name": f"attribute_{number}", "description": "", "values": ["yes", "no"], "slot": ""}

    @property
    def target_slot(self) -> str:
        return self.slot or self.name

    @field_validator("values")
    @classmethod
    def _unique_values(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("allowed values must be unique")
        if any(not s.strip() for s in v):
            raise ValueError("allowed values must not be empty")
        return v


class ClassifyAttributes(Classifier):
    type: Literal["ClassifyAttributes"] = "ClassifyAttributes"
    system_prompt: str = Field(default_factory=lambda: default_prompt("classify_attributes_system"), **field_help("Instructions for the classifier.", "Prompt", multiline=True))
    input: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, **field_help("Slot to read. Empty reads the player's line.", "Prompt"))
    attributes: list[Attribute] = Field(default_factory=list, **field_help("Attributes to fill, each with its allowed values and slot.", "Attributes"))
    default_exit: str = Field(END, **field_help("Node that runs next. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    def slots_written(self) -> list[str]:
        return [self.id, *(a.target_slot for a in self.attributes)]

    _unique_attributes = unique_names("attributes", "attribute")

    # --- the question to the model -----------------------------------------------------------

    def instructions(self) -> str:
        lines = [
            f"- {a.name}{f' ({a.description})' if a.description else ''}: one of {', '.join(a.values)}"
            for a in self.attributes
        ]
        return f"{self.system_prompt.strip()}\n\nAttributes:\n" + "\n".join(lines)

    def answer_tokens(self, context_size: int) -> int:
        return max(1, min(context_size // 2, 32 + 24 * len(self.attributes)))

    def answer_constraint(self) -> dict[str, Any]:
        return {"json_schema": {
            "type": "object",
            "properties": {a.name: {"enum": list(a.values)} for a in self.attributes},
            "required": [a.name for a in self.attributes],
            "additionalProperties": False,
        }}

    def run(self, run: NodeRun) -> str:
        if not self.attributes:
            return "default_exit"
        result = self.ask(run, "wrote no slot")
        if result is None:
            return "default_exit"
        try:
            values = json.loads(result.text)
        except json.JSONDecodeError:
            values = None
        if not isinstance(values, dict):
            run.diag.warnings.append("the model's answer was not a JSON object; no slot was written")
            return "default_exit"
        for attribute in self.attributes:
            value = values.get(attribute.name)
            if value in attribute.values:
                run.turn.slots[attribute.target_slot] = value
            else:
                run.diag.warnings.append(
                    f"no allowed value for {attribute.name!r}; slot {attribute.target_slot!r} not written")
        return "default_exit"

    def check(self, checks: NodeChecks) -> None:
        if not self.attributes:
            checks.warning("no attributes to classify", "attributes")
