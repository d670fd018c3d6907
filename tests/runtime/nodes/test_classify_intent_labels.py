"""Intents named like the classifier's "none of these" label."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.validation import validate_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.nodes.base import SLOT_PATTERN
from runtime.nodes.classify_intent import NONE_LABELS
from tests.runtime.conversations import asset, node_diag


def _router(names):
    return asset(
        ("ClassifyIntent", "classify", {"intents": [{"name": n, "exit": "reply"} for n in names],
                                        "fallback_exit": "reply"}),
        ("Generate", "reply", {"system_prompt": "answer", "context_size": 512, "max_tokens": 16}),
    )


@pytest.mark.parametrize("line, exit_taken", [
    ("none of the above, really", "intent:none"),
    ("the weather is nice", "fallback_exit"),
])
def test_intents_taking_every_none_label_still_run(line, exit_taken):
    """Defect 7: validate passed, and the turn raised StopIteration."""
    graph = _router(list(NONE_LABELS))
    assert not [p for p in validate_asset(graph) if p.severity == "error"]
    result = Agent(graph, ScriptedBackend()).run_turn(line)
    assert result.path == ["classify", "reply"]
    d = node_diag(result.diagnostics, "classify")
    assert d.exit == exit_taken
    assert "- none-of-the-above: none of the above fits" in d.input.prompt[0].content


def test_the_none_label_never_collides_with_an_intent_name():
    import re

    from runtime.nodes.classify_intent import none_label

    assert none_label([]) == "none"
    assert none_label(["none"]) == "none_of_these"
    last = none_label(list(NONE_LABELS))
    assert last not in NONE_LABELS and not re.fullmatch(SLOT_PATTERN.strip("^$"), last)
