"""What the editor's real-model tests share: the sample model, example assets pointed at it,
and a way to talk through the window's test conversation and wait for the turn."""

from __future__ import annotations

from typing import Any

from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.models.folder import sample_model_for_checks
from runtime.resources import examples_dir

TURN_TIMEOUT_MS = 180_000


def sample_model() -> str:
    return str(sample_model_for_checks())


def example(name: str, model: str, agent: dict[str, Any] | None = None, **node_changes: dict[str, Any]) -> Asset:
    """An example asset on ``model``, with some node fields changed (``reply={"max_tokens": 16}``)."""
    asset = load_asset(examples_dir() / f"{name}.json")
    nodes = [n.model_copy(update=node_changes.get(n.id, {})) for n in asset.nodes]
    return asset.model_copy(update={"default_model": model, "nodes": nodes, **(agent or {})})


def open_asset(window, asset: Asset) -> None:
    window.set_asset(asset)


def talk(qtbot, conversation, line: str, timeout: int = TURN_TIMEOUT_MS):
    """Say ``line`` and wait (on the UI thread's signals) for the turn; returns its InspectedTurn.
    Fails the test with the runtime's message if the turn failed."""
    failures: list[str] = []

    def failed(failure) -> None:
        failures.append(failure.message)

    conversation.turn_failed.connect(failed)
    try:
        before = len(conversation.saved.history.turns)
        with qtbot.waitSignals([conversation.busy_changed], timeout=timeout):
            assert conversation.say(line), "a turn was already running"
        qtbot.waitUntil(lambda: not conversation.busy, timeout=timeout)
    finally:
        conversation.turn_failed.disconnect(failed)
    assert not failures, failures[0]
    qtbot.waitUntil(lambda: len(conversation.saved.history.turns) == before + 1, timeout=timeout)
    return conversation.record(before)
