"""An asset's ``reply_tags``: slots the game gets with each reply (a mood, a gesture), filled by a
Classify Attributes node. The agent emits a ``tag`` event as soon as a node writes one (before the
reply's words), the turn's record lists them, ``parley serve`` streams both, validation names a tag
no node writes, and on the sample model the bard example's tags are among the allowed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.agent import Agent
from runtime.asset.file import asset_to_dict, load_asset
from runtime.asset.model import Asset
from runtime.asset.validation import validate_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.events import ReplyTagged, Token
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from runtime.serve.server import running_server
from runtime.session.record import TurnRecord
from tests.samples import example_on_sample_model

BARD = examples_dir() / "bard.json"


def _bard(**changes) -> Asset:
    return load_asset(BARD).model_copy(update=changes)


def _feelings(mood: str, gesture: str):
    def answer(key, request):
        if request.json_schema is not None:
            return json.dumps({"mood": mood, "gesture": gesture})
        return "A song for you, friend."
    return answer


def test_each_tag_is_an_event_before_the_replys_words_and_the_turn_lists_them() -> None:
    events = []
    result = Agent(_bard(), ScriptedBackend(_feelings("wistful", "strum"))).run_turn("Sing!", on_event=events.append)
    tags = [(e.node, e.name, e.value) for e in events if isinstance(e, ReplyTagged)]
    assert tags == [("feel", "mood", "wistful"), ("feel", "gesture", "strum")]
    first_tag = next(i for i, e in enumerate(events) if isinstance(e, ReplyTagged))
    first_word = next(i for i, e in enumerate(events) if isinstance(e, Token) and e.reply)
    assert first_tag < first_word  # the game starts the gesture as the words begin
    assert result.tags == {"mood": "wistful", "gesture": "strum"}
    record = TurnRecord.of("Sing!", result)
    assert TurnRecord.from_json(record.to_json()).tags == result.tags
    assert record.result().tags == result.tags


def test_an_asset_without_reply_tags_sends_none_and_saves_without_the_field() -> None:
    asset = _bard(reply_tags=[])
    events = []
    result = Agent(asset, ScriptedBackend(_feelings("annoyed", "shrug"))).run_turn("Boo!", on_event=events.append)
    assert result.tags == {} and not any(isinstance(e, ReplyTagged) for e in events)
    assert "reply_tags" not in asset_to_dict(asset)
    assert asset_to_dict(_bard())["reply_tags"] == ["mood", "gesture"]


def test_a_tag_no_node_writes_is_a_warning_on_its_field_and_a_bad_name_an_error(tmp_path: Path) -> None:
    problems = validate_asset(_bard(reply_tags=["mood", "posture"]), str(BARD))
    found = [p for p in problems if p.field == "reply_tags.1"]
    assert len(found) == 1 and found[0].severity == "warning" and "'posture'" in found[0].message, problems
    assert not [p for p in validate_asset(_bard(), str(BARD)) if p.field.startswith("reply_tags")]
    raw = json.loads(BARD.read_text(encoding="utf-8"))
    raw["reply_tags"] = ["mood", "two words"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(Exception, match=r"reply_tags\.1.*not a slot name"):
        load_asset(bad)


def test_parley_serve_streams_tag_events_and_turn_finished_lists_the_tags() -> None:
    backend = ScriptedBackend(_feelings("cheerful", "bow"))
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
            session = client.create_session("bard.json")
            end = client.turn(session.id, "Play us a song!")
    finally:
        backend.close()
    kinds = [e.kind for e in end.events]
    assert [e.data for e in end.events if e.kind == "tag"] == [
        {"node": "feel", "name": "mood", "value": "cheerful"}, {"node": "feel", "name": "gesture", "value": "bow"}]
    assert kinds.index("tag") < kinds.index("token")
    assert end.tags == {"mood": "cheerful", "gesture": "bow"}


@pytest.mark.model
def test_the_bards_tags_on_the_sample_model_are_among_the_allowed_values(sample_model: Path, tmp_path: Path) -> None:
    from runtime.backends.llama import LlamaBackend

    path = example_on_sample_model("bard", sample_model, tmp_path, 16)
    asset = load_asset(path)
    allowed = {a.name: set(a.values) for a in asset.nodes[0].attributes}
    backend = LlamaBackend(asset_dir=tmp_path)
    try:
        events = []
        result = Agent(asset, backend, str(tmp_path)).run_turn("Your singing is terrible!", on_event=events.append)
    finally:
        backend.close()
    assert set(result.tags) == {"mood", "gesture"}
    assert all(result.tags[name] in allowed[name] for name in allowed), result.tags
    assert [(e.name, e.value) for e in events if isinstance(e, ReplyTagged)] == list(result.tags.items())
