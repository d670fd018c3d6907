"""The one translator from pydantic's errors to problems: every error, in order, in the file given,
at the place the format names, in the words it gives each kind of error."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from runtime.files.located import (
    MISSING_FIELD,
    UNKNOWN_KEY,
    Place,
    error_message,
    located_problems,
    validator_says,
)


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int = 0

    @field_validator("name")
    @classmethod
    def _plain(cls, value: str) -> str:
        if " " in value:
            raise ValueError(f"{value!r} has a space")
        return value


class Listing(BaseModel):
    entries: list[Entry]


def refused(raw: dict) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Listing.model_validate(raw)
    return caught.value


RAW = {"entries": [{"name": "a b"}, {"size": "big", "colour": 1}]}


def dotted(err) -> Place:
    return Place(field=".".join(str(p) for p in err["loc"]))


def test_every_error_in_order_in_the_file_at_its_place() -> None:
    problems = located_problems(refused(RAW), "list.json", dotted)
    assert [(p.severity, p.file, p.field) for p in problems] == [
        ("error", "list.json", "entries.0.name"), ("error", "list.json", "entries.1.name"),
        ("error", "list.json", "entries.1.size"), ("error", "list.json", "entries.1.colour")]
    assert problems[0].message == "'a b' has a space", "a validator's words, without pydantic's 'Value error, '"


def test_a_place_in_words_comes_before_the_message_and_a_node_and_line_are_kept() -> None:
    def in_words(err) -> Place:
        return Place(node_id=f"entry{err['loc'][1]}", line=7, words=f"entry {err['loc'][1]}")

    first = located_problems(refused(RAW), "list.yaml", in_words)[0]
    assert first.message == "entry 0: 'a b' has a space"
    assert (first.node_id, first.line, str(first)) == ("entry0", 7, "list.yaml:7:0: error: entry 0: 'a b' has a space")


def test_the_wording_of_a_kind_replaces_pydantics_and_the_rest_fall_back() -> None:
    wording = {"extra_forbidden": UNKNOWN_KEY, "missing": MISSING_FIELD,
               "int_parsing": lambda err: f"{err['input']!r} is not a whole number"}
    said = [p.message for p in located_problems(refused(RAW), "", dotted,
                                                lambda err: error_message(err, wording))]
    assert said == ["'a b' has a space", MISSING_FIELD, "'big' is not a whole number", UNKNOWN_KEY]
    loud = [p.message for p in located_problems(refused(RAW), "", dotted,
                                                lambda err: error_message(err, {}, lambda e: e["msg"].upper()))]
    assert loud[0] == "VALUE ERROR, 'A B' HAS A SPACE"


def test_validator_says_keeps_pydantics_own_message_for_other_errors() -> None:
    err = refused({"entries": [{"name": "x", "size": "big"}]}).errors()[0]
    assert validator_says(err) == err["msg"]
