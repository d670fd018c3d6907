"""Several conversations at once on llama.cpp's real server with the sample model: their calls
run in the server's slots side by side and each gets a reply to its own conversation, also the one
that found no free slot (``id_slot`` -1: the server picks). Not the very text it gets alone: on the
CPU, a token's logits depend on how the server batches the slots' tokens together (see
docs/reproducibility.md), so a greedy reply may turn at a near tie. So each NPC is one the model
names in its reply (its trade), and a reply naming its own and no other's cannot come from another
conversation's state. The server takes the ``user`` field on
both of its APIs. The recording server's tests (headers, overlap) are in test_session_affinity.py."""

from __future__ import annotations

import re
import threading

import pytest

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult
from runtime.backends.http import ServerConnection
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from tests.servers import llama_server

pytestmark = [pytest.mark.model, pytest.mark.llama_server]
SLOTS = 2
JOIN_SECONDS = 300.0  # how long the test waits for its calls to end
# three conversations on two slots: one finds none free. Each NPC's trade, and the word the sample
# model's reply names it by
NPCS = {"npc-1": ("Brom", "blacksmith", "blacksmith"), "npc-2": ("Elsa", "baker", "baker"),
        "npc-3": ("Tobias", "fisherman", "sea")}


@pytest.fixture(scope="module")
def server_url(sample_model, tmp_path_factory):
    with llama_server(sample_model, tmp_path_factory.mktemp("llama-server"), slots=SLOTS, context=1024) as server:
        yield server.url


def _request(session_id: str) -> GenerationRequest:
    name, trade, _ = NPCS[session_id]
    messages = [ChatMessage("system", f"You are {name}, the {trade}. Your name is {name}."),
                ChatMessage("user", "What is your name?")]
    return GenerationRequest(messages, 16, temperature=0.0, seed=7, session_id=session_id)


def _names_only_its_own(session_id: str, reply: str) -> bool:
    said = {sid for sid, (_, _, word) in NPCS.items() if re.search(rf"\b{word}\b", reply, re.IGNORECASE)}
    return said == {session_id}


def _call(backend: LlamaServerBackend, session_id: str) -> GenerationResult:
    return backend.session(f"{session_id}/reply", "", 0).generate(_request(session_id))


def _slot_tasks(url: str) -> dict[int, int]:
    """Each slot's last task id, from the server's /slots (on by default)."""
    return {s["id"]: s["id_task"] for s in ServerConnection(url).get_json("/slots")}


def test_conversations_at_once_run_in_the_servers_slots_and_each_gets_a_reply_to_its_own(server_url) -> None:
    alone_backend = LlamaServerBackend(server_url, "local", cache_prompt=False)
    alone = {sid: _call(alone_backend, sid) for sid in NPCS}
    alone_backend.close()  # gives its slots back
    assert all(_names_only_its_own(sid, r.text) for sid, r in alone.items()), {s: r.text for s, r in alone.items()}

    before = _slot_tasks(server_url)
    backend = LlamaServerBackend(server_url, "local", cache_prompt=False)
    results: dict[str, GenerationResult | BaseException] = {}

    def run(sid: str) -> None:
        try:
            results[sid] = _call(backend, sid)
        except Exception as exc:  # noqa: BLE001 - the thread hands it to the test, which reports it
            results[sid] = exc

    threads = [threading.Thread(target=run, args=(sid,)) for sid in NPCS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a call did not end"
    assert all(isinstance(r, GenerationResult) for r in results.values()), results
    replies = {sid: r.text for sid, r in results.items() if isinstance(r, GenerationResult)}
    assert all(_names_only_its_own(sid, text) for sid, text in replies.items()), replies
    # each read its own prompt, as long as it is alone
    assert {sid: r.prompt_tokens for sid, r in results.items() if isinstance(r, GenerationResult)} == {
        sid: r.prompt_tokens for sid, r in alone.items()}
    # the one that found no free slot was given one by the server, which said which
    shared = [r for r in results.values() if isinstance(r, GenerationResult) and
              any("no free slot" in w for w in r.warnings)]
    assert len(shared) == 1 and any("the server picked slot " in w for w in shared[0].warnings)
    after = _slot_tasks(server_url)
    assert len(after) == SLOTS and all(after[i] != before[i] for i in after)  # every slot ran a call
    backend.close()


def test_the_openai_api_of_llama_server_takes_a_session_s_user_field(server_url) -> None:
    backend = OpenAIBackend(server_url, "local")
    result = backend.session("npc-1/reply", "", 0).generate(_request("npc-1"))
    assert result.text and result.finish_reason in ("stop", "length")
    backend.close()
