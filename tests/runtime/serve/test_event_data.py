"""A turn's events on the wire and back: ``event_from_data`` is ``event_data``'s inverse, so the editor
following a served session shows the very events the runtime sent."""

from __future__ import annotations

import pytest

from runtime import events
from runtime.serve.protocol import EVENT_KINDS, NODE_EVENTS, event_data, event_from_data

EVERY_NODE_EVENT = [
    events.NodeStarted("reply", "Generate"),
    events.Token("reply", "Good", True),
    events.Speak("reply", "Good evening.", True),
    events.Token("lookup", '{"name": "check_stock"', False),
    events.ToolCalled("lookup", "check_stock", {"item": "arrows", "count": 2}, "240 arrows"),
    events.Summarized("memory", 7, 4, 312, "The traveller asked for a room."),
    events.TurnWarning("reply", "the prompt was trimmed"),
    events.Guarded("gate", "narration", "policy:narration", "patterns", "'appear' (list 'narration')", "line"),
    events.GameEventReached("gate", "call_the_watch", "policy:narration"),
    events.ReplyTagged("feel", "mood", "wistful"),
    events.NodeFinished("route", "ClassifyIntent", "room", "intent:room", "reply"),
]


def test_every_kind_a_node_sends_is_read_back_as_the_event_it_was():
    assert {e.kind for e in EVERY_NODE_EVENT} == set(NODE_EVENTS) <= set(EVENT_KINDS)
    kinds_in_runtime = {cls for cls in vars(events).values()
                        if isinstance(cls, type) and issubclass(cls, events.NodeEvent) and "kind" in vars(cls)}
    assert set(NODE_EVENTS.values()) == kinds_in_runtime
    for event in EVERY_NODE_EVENT:
        assert event_from_data(event.kind, event_data(event)) == event


def test_the_servers_own_kinds_are_no_runtime_event_and_a_misfit_is_named():
    assert all(event_from_data(kind, {}) is None for kind in set(EVENT_KINDS) - set(NODE_EVENTS))
    assert event_from_data("node_started", {"node": "reply"}) == events.NodeStarted("reply", "")  # an older server
    with pytest.raises(ValueError, match="summarized event's covered_through is 'seven', not int"):
        event_from_data("summarized", {"node": "memory", "covered_through": "seven"})


def test_a_token_from_an_older_server_is_no_reply_and_the_flag_survives_the_wire():
    assert event_from_data("token", {"node": "reply", "text": "Hi"}) == events.Token("reply", "Hi", False)
    assert event_data(events.Token("reply", "Hi", True))["reply"] is True
