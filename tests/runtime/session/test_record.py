"""One record of a finished turn, one JSON form: what parley serve sends, kept runs hold and the
editor reads back are the same fields, and a record that does not fit names the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.session.record import TurnRecord
from runtime.session.session import Session


@pytest.fixture()
def record() -> TurnRecord:
    session = Session(load_asset(examples_dir() / "chat.json"), ScriptedBackend(), examples_dir())
    session.turn("Good evening.")
    return TurnRecord.of("Is there a room?", session.turn("Is there a room?"))


def test_a_record_holds_the_turn_and_its_json_reads_back_equal(record):
    assert (record.index, record.line, record.path) == (1, "Is there a room?", ["reply"])
    assert record.diagnostics is not None and record.diagnostics.reply == record.reply
    assert record.prompts["reply"].parts[0].kind == "system" and record.prompts["reply"].context_size > 0
    assert record.backend
    raw = record.to_json()
    assert TurnRecord.from_json(raw) == record
    assert raw["diagnostics"] == record.diagnostics.model_dump(mode="json")  # the diagnostics' own JSON form
    assert TurnRecord.from_json({**raw, "added_by_a_newer_server": 1}) == record


def test_without_details_keeps_what_it_said_and_where_it_went(record):
    light = record.without_details()
    assert (light.line, light.reply, light.path, light.turn_id) == (record.line, record.reply, record.path, record.turn_id)
    assert light.diagnostics is None and light.prompts == {}
    result = record.result()
    assert (result.turn, result.reply, result.path, result.turn_id) == (1, record.reply, record.path, record.turn_id)


def test_a_record_that_does_not_fit_names_the_field(record):
    raw = record.to_json()
    raw["prompts"]["reply"]["context_size"] = "large"
    with pytest.raises(ValidationError, match=r"prompts\.reply\.context_size"):
        TurnRecord.from_json(raw)
