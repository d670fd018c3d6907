"""A Generate and Speak node's own reply tag (an emotion, an animation): picked before the reply by a
short call held to the designer's list, in the node's own context, so it comes with the first
sentence. It is a ``tag`` event, every ``Speak`` carries it, the turn's record lists it, ``parley
serve`` streams it on ``speak`` and ``turn_finished``, a bad list is an error naming its entry, and on
the sample model the tag is one of the allowed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.agent import Agent
from runtime.asset.file import asset_to_dict, load_asset
from runtime.asset.model import GenerateAndSpeak
from runtime.asset.validation import validate_asset
from runtime.backends.base import ChatMessage
from runtime.backends.scripted import ScriptedBackend
from runtime.events import ReplyTagged, Speak, Token
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from runtime.serve.protocol import event_data, event_from_data
from runtime.serve.server import running_server
from runtime.session.record import TurnRecord
from tests.runtime.conversations import asset, node_diag

MOODS = ["calm", "angry", "sad"]
QUESTION = "Before you answer, choose the emotion of your reply. Answer with exactly one of: calm, angry, sad."
REPLY = "Get out of my shop! Now."


def _talk(**fields):
    return ("GenerateAndSpeak", "talk", {"system_prompt": "You are Brom, a grumpy smith.", **fields})


def _answers(tag: str):
    def answer(key, request):
        return tag if request.choices else REPLY
    return answer


def _turn(graph, backend, line="Your swords are rubbish."):
    events = []
    return Agent(graph, backend).run_turn(line, on_event=events.append), events


def test_the_tag_is_asked_first_on_the_replys_prompt_and_every_sentence_carries_it() -> None:
    backend = ScriptedBackend(_answers("angry"))
    result, events = _turn(asset(_talk(tags=MOODS, tag_name="emotion")), backend)

    (tag_key, tag_call), (reply_key, reply_call) = backend.calls
    assert tag_key == reply_key == "talk"
    assert tag_call.choices == MOODS and tag_call.temperature == 0.0 and tag_call.seed == 1
    assert tag_call.messages == [ChatMessage("system", "You are Brom, a grumpy smith."),
                                 ChatMessage("user", f"Your swords are rubbish.\n\n{QUESTION}")]
    # The reply's call is the one a node without tags makes, and reads only the end of the player's
    # message anew: all of the tag call's prompt before the question is in the node's cache.
    untagged = ScriptedBackend(_answers("angry"))
    _turn(asset(_talk()), untagged)
    assert [c for _, c in untagged.calls] == [reply_call]
    tokens = node_diag(result.diagnostics, "talk").tokens
    assert tokens.evaluated == 4 and tokens.reused == tokens.prompt - 4  # <|end|> <|nl|> <|pad|> <|pad|>

    tagged = [(e.node, e.name, e.value) for e in events if isinstance(e, ReplyTagged)]
    assert tagged == [("talk", "emotion", "angry")]
    first_token = next(i for i, e in enumerate(events) if isinstance(e, Token))
    assert events.index(next(e for e in events if isinstance(e, ReplyTagged))) < first_token
    spoken = [(e.text, e.tags) for e in events if isinstance(e, Speak)]
    assert spoken == [("Get out of my shop!", {"emotion": "angry"}), ("Now.", {"emotion": "angry"})]
    assert result.tags == {"emotion": "angry"} and result.reply == REPLY
    record = TurnRecord.of("Your swords are rubbish.", result)
    assert TurnRecord.from_json(record.to_json()).tags == {"emotion": "angry"}


def test_the_default_scripted_backend_answers_the_first_tag_and_tag_name_defaults_to_tag() -> None:
    result, events = _turn(asset(_talk(tags=MOODS)), ScriptedBackend())
    assert result.tags == {"tag": "calm"}
    assert {tuple(e.tags.items()) for e in events if isinstance(e, Speak)} == {(("tag", "calm"),)}


def test_a_node_without_tags_asks_nothing_and_speaks_without_tags() -> None:
    backend = ScriptedBackend(_answers("angry"))
    result, events = _turn(asset(_talk()), backend)
    assert len(backend.calls) == 1 and backend.calls[0][1].choices is None
    assert result.tags == {} and not any(isinstance(e, ReplyTagged) for e in events)
    assert all(e.tags == {} for e in events if isinstance(e, Speak))


def test_after_an_earlier_reply_this_turn_the_question_is_a_message_of_its_own() -> None:
    backend = ScriptedBackend(lambda key, request: "angry" if request.choices else f"{key} says hello.")
    graph = asset(("Generate", "aside", {"system_prompt": "Mutter.", "default_exit": "talk"}),
                  _talk(tags=MOODS, tag_name="emotion"))
    result, _ = _turn(graph, backend)
    tag_call = next(c for _, c in backend.calls if c.choices)
    assert tag_call.messages[-3:] == [ChatMessage("user", "Your swords are rubbish."),
                                      ChatMessage("assistant", "aside says hello."), ChatMessage("user", QUESTION)]
    assert result.tags == {"emotion": "angry"}


def test_speak_events_carry_the_classifiers_tags_too() -> None:
    bard = load_asset(examples_dir() / "bard.json")
    bard.nodes[1] = bard.nodes[1].model_copy(update={"tags": ["smile", "frown"], "tag_name": "face"})

    def answer(key, request):
        if request.json_schema is not None:
            return json.dumps({"mood": "wistful", "gesture": "strum"})
        return "frown" if request.choices else "A sad song. For you."

    result, events = _turn(bard, ScriptedBackend(answer))
    assert [(e.name, e.value) for e in events if isinstance(e, ReplyTagged)] == [
        ("mood", "wistful"), ("gesture", "strum"), ("face", "frown")]
    assert [e.tags for e in events if isinstance(e, Speak)] == [{"mood": "wistful", "gesture": "strum", "face": "frown"}] * 2
    assert result.tags == {"mood": "wistful", "gesture": "strum", "face": "frown"}


def test_a_tag_that_does_not_fit_the_context_is_not_sent_and_the_turn_goes_on() -> None:
    # The prompt is 24 tokens of 40; the question (19) and the answer (2) need more than the 16 left.
    graph = asset(_talk(tags=MOODS, tag_name="emotion", context_size=40, max_tokens=8))
    backend = ScriptedBackend(_answers("angry"))
    result, events = _turn(graph, backend, "Hi.")
    assert len(backend.calls) == 1 and result.reply
    assert result.tags == {} and not any(isinstance(e, ReplyTagged) for e in events)
    warnings = node_diag(result.diagnostics, "talk").warnings
    assert any(w.startswith("no emotion tag: the question that picks it") for w in warnings), warnings


@pytest.mark.parametrize("tags, index, message", [
    (["calm", ""], 1, "tag 2 is empty"),
    (["calm", "  "], 1, "tag 2 is empty"),
    (["calm", "angry", "calm"], 2, "'calm' is listed twice"),
])
def test_a_bad_tag_list_is_an_error_naming_the_entry(tmp_path: Path, tags, index, message) -> None:
    with pytest.raises(ValidationError, match=message):
        GenerateAndSpeak(id="talk", tags=tags)
    raw = asset_to_dict(asset(_talk()))
    raw["nodes"][0]["tags"] = tags
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(Exception, match=rf"tags\.{index}.*{message}"):
        load_asset(path)


def test_a_bad_tag_name_is_an_error_and_clashes_are_warnings() -> None:
    with pytest.raises(ValidationError, match="tag_name"):
        GenerateAndSpeak(id="talk", tags=MOODS, tag_name="two words")
    clash = asset(_talk(tags=MOODS, tag_name="mood"), reply_tags=["mood"])
    assert [p for p in validate_asset(clash) if p.field == "tag_name" and p.severity == "warning"]
    hidden = asset(_talk(tags=MOODS, history_role="none"))
    assert [p for p in validate_asset(hidden) if p.field == "tags" and p.severity == "warning"]
    spaced = asset(_talk(tags=["calm", "very angry "]))
    assert [p.severity for p in validate_asset(spaced) if p.field == "tags.1" and "space" in p.message] == ["warning"]
    assert not [p for p in validate_asset(asset(_talk(tags=MOODS))) if p.field.startswith(("tags", "tag_name"))]


def test_tags_are_saved_only_when_set() -> None:
    assert not {"tags", "tag_name"} & set(asset_to_dict(asset(_talk()))["nodes"][0])
    saved = asset_to_dict(asset(_talk(tags=MOODS, tag_name="emotion")))["nodes"][0]
    assert saved["tags"] == MOODS and saved["tag_name"] == "emotion"


def test_a_speak_events_tags_survive_the_wire() -> None:
    event = Speak("talk", "Get out!", True, {"emotion": "angry"})
    assert event_data(event)["tags"] == {"emotion": "angry"}
    assert event_from_data("speak", event_data(event)) == event
    assert event_from_data("speak", {"node": "talk", "text": "Hi."}).tags == {}  # an older server


def test_parley_serve_sends_the_tag_on_speak_and_turn_finished(tmp_path: Path) -> None:
    (tmp_path / "smith.json").write_text(
        json.dumps(asset_to_dict(asset(_talk(tags=MOODS, tag_name="emotion")))), encoding="utf-8")
    backend = ScriptedBackend(_answers("sad"))
    try:
        with running_server(backend, [tmp_path]) as url, ParleyClient(url) as client:
            session = client.create_session("smith.json")
            end = client.turn(session.id, "Your swords are rubbish.")
            kept = client.turn_detail(session.id, end.turn_id)
    finally:
        backend.close()
    speaks = [e for e in end.events if e.kind == "speak"]
    assert [e.data for e in speaks] == [
        {"node": "talk", "text": "Get out of my shop!", "reply": True, "tags": {"emotion": "sad"}},
        {"node": "talk", "text": "Now.", "reply": True, "tags": {"emotion": "sad"}}]
    assert [e.tags for e in speaks] == [{"emotion": "sad"}] * 2
    assert [e.data for e in end.events if e.kind == "tag"] == [{"node": "talk", "name": "emotion", "value": "sad"}]
    finished = next(e for e in end.events if e.kind == "turn_finished")
    assert finished.data["tags"] == {"emotion": "sad"} and end.tags == {"emotion": "sad"}
    assert kept.tags == {"emotion": "sad"}


@pytest.mark.model
def test_on_the_sample_model_the_tag_is_one_of_the_allowed_values(sample_model: Path) -> None:
    from runtime.backends.llama import LlamaBackend

    graph = asset(_talk(tags=MOODS, tag_name="emotion", context_size=512, max_tokens=16, temperature=0.0),
                  ).model_copy(update={"default_model": str(sample_model)})
    backend = LlamaBackend()
    try:
        result, events = _turn(graph, backend)
    finally:
        backend.close()
    assert result.tags.get("emotion") in MOODS, result.tags
    assert [(e.name, e.value) for e in events if isinstance(e, ReplyTagged)] == [("emotion", result.tags["emotion"])]
    assert all(e.tags == result.tags for e in events if isinstance(e, Speak))
    assert node_diag(result.diagnostics, "talk").tokens.reused > 0  # the reply read the tag call's prompt from the cache
