"""parley serve on the real sample model: NPCs served side by side on one load of the weights say
exactly what each says alone, and Stop in the middle of generation leaves the session as it was."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.serve.client import ParleyClient, TurnFailed
from runtime.serve.server import running_server
from tests.samples import example_on_sample_model

pytestmark = pytest.mark.model
WAIT = 300.0  # seconds: a busy 2-core machine; a working run takes a fraction
LINES = ["Good evening. Is there a room for the night?", "What is the soup today?"]


@pytest.fixture(scope="module")
def assets(sample_model, tmp_path_factory) -> Path:
    """The chat and intent router examples on the sample model, with short replies (quick on 2 cores)."""
    folder = tmp_path_factory.mktemp("served")
    for name in ("chat", "intent_router"):
        example_on_sample_model(name, sample_model, folder, 16, keep=("ClassifyIntent",))
    return folder


@pytest.fixture(scope="module")
def backend(assets):
    from runtime.backends.llama import LlamaBackend

    b = LlamaBackend(asset_dir=assets)
    yield b
    b.close()


def alone(assets: Path, name: str, session_id: str) -> list[str]:
    """The replies ``LINES`` get from the asset run by itself, on a backend of its own."""
    from runtime.backends.llama import LlamaBackend

    backend = LlamaBackend(asset_dir=assets)
    try:
        agent = Agent(load_asset(assets / f"{name}.json"), backend, str(assets), session_id=session_id)
        return [agent.run_turn(line).reply for line in LINES]
    finally:
        backend.close()


def test_npcs_served_side_by_side_say_what_each_says_alone_on_one_load_of_the_weights(assets, backend):
    names = {"inn-1": "chat", "inn-2": "chat", "router-1": "intent_router"}
    replies: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    with running_server(backend, [assets]) as url:
        def play(session_id: str) -> None:
            try:
                with ParleyClient(url, timeout=WAIT) as client:
                    client.create_session(f"{names[session_id]}.json", id=session_id)
                    replies[session_id] = [client.turn(session_id, line).reply for line in LINES]
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=play, args=(sid,)) for sid in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    assert backend.model_loads == 1
    assert all(r for rs in replies.values() for r in rs)
    for session_id, name in names.items():
        assert replies[session_id] == alone(assets, name, session_id), session_id


def test_cancelling_in_the_middle_of_generation_leaves_the_served_session_as_it_was(assets, backend):
    with running_server(backend, [assets]) as url, ParleyClient(url, timeout=WAIT) as client:
        npc = client.create_session("chat.json")
        client.turn(npc.id, LINES[0])
        before = client.export_history(npc.id)
        tokens = []

        def on_event(event):
            if event.kind == "token":
                tokens.append(event.data["text"])
                if len(tokens) == 2:
                    client.cancel(npc.id)

        with pytest.raises(TurnFailed) as failed:
            client.turn(npc.id, LINES[1], on_event=on_event)
        assert failed.value.code == "cancelled"
        assert len(tokens) >= 2
        assert client.export_history(npc.id) == before
        again = client.turn(npc.id, LINES[1])  # and it goes on as if the cancelled turn never was
        assert again.turn == 1 and again.reply


def test_a_model_the_folder_lacks_fails_the_turn_as_model_missing_naming_it(assets, backend):
    """The embedded engine cannot find the asset's model: the game hears ``model_missing`` with the name
    it gave (as the editor offers the download), not a ``backend_error`` it cannot tell apart, and the
    session is as it was."""
    raw = json.loads((assets / "chat.json").read_text(encoding="utf-8"))
    raw["default_model"] = "Innkeeper-7B.Q4_K_M.gguf"
    (assets / "no_model.json").write_text(json.dumps(raw), encoding="utf-8")
    with running_server(backend, [assets]) as url, ParleyClient(url, timeout=WAIT) as client:
        client.create_session("no_model.json", id="ghost")
        with pytest.raises(TurnFailed) as failed:
            client.turn("ghost", LINES[0])
        assert (failed.value.code, failed.value.model) == ("model_missing", "Innkeeper-7B.Q4_K_M.gguf")
        assert "Innkeeper-7B.Q4_K_M.gguf" in failed.value.message and "not found" in failed.value.message
        assert client.export_history("ghost")["turns"] == []


def test_a_restarted_server_goes_on_with_the_stored_conversation_on_the_model(assets, tmp_path):
    """A session kept in the store comes back on a new server (a new backend: cold caches) with its
    turns, and the next turn's prompt holds them as the model is shown them."""
    from runtime.backends.llama import LlamaBackend
    from runtime.serve.store import SQLiteStore

    path = tmp_path / "sessions.sqlite3"
    first_backend = LlamaBackend(asset_dir=assets)
    try:
        with running_server(first_backend, [assets], store=SQLiteStore(path)) as url, \
                ParleyClient(url, timeout=WAIT) as client:
            client.create_session("chat.json", id="innkeeper")
            said = client.turn("innkeeper", LINES[0]).reply
    finally:
        first_backend.close()
    second_backend = LlamaBackend(asset_dir=assets)
    try:
        with running_server(second_backend, [assets], store=SQLiteStore(path)) as url, \
                ParleyClient(url, timeout=WAIT) as client:
            assert client.session("innkeeper").turns == 1
            end = client.turn("innkeeper", LINES[1])
    finally:
        second_backend.close()
    assert said.strip() and end.reply.strip()
    (node,) = [n for n in end.diagnostics.nodes if n.node == "reply"]
    shown = [(m.role, m.content) for m in node.input.prompt]
    assert ("user", LINES[0]) in shown and any(role == "assistant" and said.strip() in text for role, text in shown)
    assert shown[-1][0] == "user" and shown[-1][1].endswith(LINES[1])  # framed by the asset's template


def test_metrics_show_the_engines_contexts_and_first_tokens_on_the_model(assets, backend):
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    with running_server(backend, [assets]) as url, ParleyClient(url, timeout=WAIT) as client:
        client.create_session("chat.json", id="metered")
        client.turn("metered", LINES[0])
        text = httpx.get(f"{url}/metrics").text
    seen = {(s.name, tuple(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
    assert seen[("parley_kv_contexts", (("state", "live"),))] >= 1
    assert seen[("parley_kv_mib", (("state", "live"),))] > 0
    assert seen[("parley_time_to_first_token_seconds_count", ())] == 1
    assert 0 < seen[("parley_time_to_first_token_seconds_sum", ())] <= seen[("parley_turn_seconds_sum", ())]
