"""Many NPCs on one model: the embedded backend's KV budget parks idle node caches and restores
them bit for bit (real sample model)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.base import ChatMessage, GenerationRequest
from runtime.backends.llama import LlamaBackend, context_mib
from runtime.models.gguf import read_gguf
from runtime.problems import BackendError

pytestmark = pytest.mark.model

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"
LINES = ["Hello there, who are you?", "Where is the market?", "I will break down this gate!"]
MAX_TOKENS = 8  # short replies: the reading is what is tested


def example(name: str, model: Path) -> Any:
    asset = load_asset(EXAMPLES / name)
    asset.default_model = str(model)
    for node in asset.nodes:
        if hasattr(node, "max_tokens"):
            node.max_tokens = MAX_TOKENS
    return asset


def mib(model: Path, backend: LlamaBackend, n_ctx: int) -> float:
    return context_mib(read_gguf(model), backend.context_params(n_ctx))


def talk(backend: LlamaBackend, assets: dict[str, Any], turns: int, budget: float | None = None) -> dict[str, list]:
    """The NPCs take turns, one line each per round; per NPC and turn its reply, journals and per-node
    reading. With ``budget``, the live contexts are checked to stay within it after every turn."""
    agents = {sid: Agent(asset, backend, str(EXAMPLES), session_id=sid) for sid, asset in assets.items()}
    out: dict[str, list] = {sid: [] for sid in agents}
    for turn in range(turns):
        for k, (sid, agent) in enumerate(agents.items()):
            result = agent.run_turn(LINES[(turn + k) % len(LINES)])
            reading = {n.node: (n.tokens.prompt, n.tokens.reused, n.tokens.evaluated, n.tokens.cold)
                       for n in result.diagnostics.nodes if n.tokens.prompt}
            out[sid].append((result.reply, dict(agent.journals), reading))
            if budget is not None:
                stats = backend.kv_stats()
                assert stats.live_mib <= budget, stats
    return out


@pytest.fixture()
def backends():
    made: list[LlamaBackend] = []

    def make(**kwargs: Any) -> LlamaBackend:
        made.append(LlamaBackend(str(EXAMPLES), **kwargs))
        return made[-1]

    yield make
    for b in made:
        b.close()


def test_npcs_parked_and_restored_say_what_they_say_without_a_budget(sample_model, backends):
    reference = backends()
    budget = mib(sample_model, reference, 2048) * 1.5  # one chat context at a time
    limited = backends(kv_budget_mib=budget)
    assets = {f"npc-{i}": example("chat.json", sample_model) for i in range(3)}
    expected = talk(reference, assets, 2)
    got = talk(limited, assets, 2, budget)
    assert got == expected  # replies, journals and what each node read: bit for bit
    stats = limited.kv_stats()
    # every turn but the very first takes the one context from the NPC before; each NPC's second
    # turn finds its cache parked
    assert stats.parks == 5 and stats.handovers == 5, stats
    assert stats.restores == 3, stats
    assert stats.live_contexts == 1 and stats.parked == 2 and stats.parked_mib > 0, stats
    assert limited.model_loads == 1
    for sid, turns in got.items():
        prompt, reused, evaluated, cold = turns[1][2]["reply"]
        # what the warm cache of the reference kept (the comparison above), not a read from scratch
        assert not cold and reused > 0 and evaluated < prompt, (sid, turns[1][2])
    assert reference.kv_stats().parks == 0 and reference.kv_stats().live_contexts == 3


def test_a_parked_npc_reads_far_less_than_one_read_cold(sample_model, backends):
    budget_backend = backends(kv_budget_mib=mib(sample_model, LlamaBackend(), 2048) * 1.5)
    chat = example("chat.json", sample_model)
    a = Agent(chat, budget_backend, str(EXAMPLES), session_id="npc-a")
    b = Agent(chat, budget_backend, str(EXAMPLES), session_id="npc-b")
    for line in LINES[:2]:
        a.run_turn(line)
        b.run_turn(line)  # parks npc-a
    restored = a.run_turn(LINES[2]).diagnostics.nodes[0].tokens
    assert budget_backend.kv_stats().restores == 3  # a, b, then a again
    a.rewind(2)
    budget_backend.release("npc-a/reply")  # the same turn again, from nothing
    cold = a.run_turn(LINES[2]).diagnostics.nodes[0].tokens
    assert cold.cold and not restored.cold
    # a cold read rebuilds the conversation's whole reading; the restored cache only the new turn's
    assert cold.evaluated >= cold.prompt - 1 and restored.evaluated * 2 < cold.evaluated, (restored, cold)


def test_router_and_chat_npcs_share_a_budget_across_context_sizes(sample_model, backends):
    reference = backends()
    # one 2048-token chat context, or the router's two 1024-token ones (classify, then a reply node)
    budget = mib(sample_model, reference, 2048) * 1.2
    assert budget >= 2 * mib(sample_model, reference, 1024)
    limited = backends(kv_budget_mib=budget)
    assets = {"npc-0": example("chat.json", sample_model), "npc-1": example("intent_router.json", sample_model)}
    expected = talk(reference, assets, 2)
    got = talk(limited, assets, 2, budget)
    assert got == expected
    stats = limited.kv_stats()
    assert stats.parks >= 3 and stats.restores >= 2, stats
    # a 1024-token context is never handed to the 2048-token chat node, nor back
    assert stats.handovers < stats.parks, stats


def test_a_budget_smaller_than_one_context_is_refused_naming_both(sample_model, backends):
    backend = backends(kv_budget_mib=10)
    need = mib(sample_model, backend, 2048)
    with pytest.raises(BackendError) as caught:
        backend.session("npc-1/reply", str(sample_model), 2048)
    message = str(caught.value)
    assert "10 MiB" in message and f"{need:.0f} MiB" in message and "npc-1/reply" in message
    assert backend.kv_stats().live_contexts == 0
    small = backend.session("npc-1/tiny", str(sample_model), 128)  # one that fits is fine
    assert small.mib <= 10
    for bad in (0, -5, float("nan")):
        with pytest.raises(BackendError, match="KV budget must be a positive number"):
            LlamaBackend(kv_budget_mib=bad)


def test_release_drops_the_parked_cache(sample_model, backends):
    backend = backends(kv_budget_mib=mib(sample_model, LlamaBackend(), 2048) * 1.5)
    chat = example("chat.json", sample_model)
    a = Agent(chat, backend, str(EXAMPLES), session_id="npc-a")
    b = Agent(chat, backend, str(EXAMPLES), session_id="npc-b")
    a.run_turn(LINES[0])
    b.run_turn(LINES[0])
    parked = backend.kv_stats()
    assert parked.parked == 1 and parked.parked_mib > 0, parked
    backend.release("npc-a/reply")
    assert backend.kv_stats().parked == 0 and backend.kv_stats().parked_mib == 0
    again = a.run_turn(LINES[1]).diagnostics.nodes[0].tokens
    assert again.cold and backend.kv_stats().restores == 0  # read afresh: nothing was left to restore
    backend.release_all()
    assert backend.kv_stats().parked == 0 and backend.kv_stats().live_contexts == 0


def test_a_context_in_use_on_another_thread_is_waited_for_not_taken(sample_model, backends, tmp_path):
    # Two model files (the same weights copied): each has its own lock, so two threads can run at once.
    other = tmp_path / "copy.gguf"
    shutil.copyfile(sample_model, other)
    backend = backends(kv_budget_mib=mib(sample_model, LlamaBackend(), 512) * 1.5)
    request = GenerationRequest([ChatMessage("system", "Answer briefly."), ChatMessage("user", "Hello!")],
                                max_tokens=4, temperature=0)
    busy = backend.session("npc-a/reply", str(sample_model), 512)
    busy.generate(request)
    waiting_one = backend.session("npc-b/reply", str(other), 512)
    waited = threading.Event()
    real_wait = backend.kv_room.wait

    def wait(timeout: float | None = None) -> bool:
        waited.set()
        return real_wait(timeout)

    backend.kv_room.wait = wait  # type: ignore[method-assign]
    results: list[Any] = []
    with busy.model.lock:  # npc-a's model is in use on this thread
        worker = threading.Thread(target=lambda: results.append(waiting_one.generate(request)))
        worker.start()
        assert waited.wait(60), "npc-b never waited for room"
        assert not busy.is_cold and waiting_one.is_cold and backend.kv_stats().parks == 0
    worker.join(60)
    assert not worker.is_alive() and results and results[0].text
    stats = backend.kv_stats()
    assert busy.is_cold and not waiting_one.is_cold and stats.parks == 1 and stats.handovers == 0, stats


def test_stop_while_waiting_for_room_cancels_the_call(sample_model, backends, tmp_path):
    other = tmp_path / "copy.gguf"
    shutil.copyfile(sample_model, other)
    backend = backends(kv_budget_mib=mib(sample_model, LlamaBackend(), 512) * 1.5)
    request = GenerationRequest([ChatMessage("user", "Hello!")], max_tokens=2, temperature=0)
    busy = backend.session("npc-a/reply", str(sample_model), 512)
    busy.generate(request)
    cancel = threading.Event()
    real_wait = backend.kv_room.wait

    def wait(timeout: float | None = None) -> bool:
        cancel.set()  # Stop pressed while it waits
        return real_wait(timeout)

    backend.kv_room.wait = wait  # type: ignore[method-assign]
    results: list[Any] = []
    with busy.model.lock:
        worker = threading.Thread(
            target=lambda: results.append(backend.session("npc-b/reply", str(other), 512).generate(request,
                                                                                                    cancel=cancel)))
        worker.start()
        worker.join(60)
    assert not worker.is_alive() and results[0].cancelled and results[0].finish_reason == "cancelled"
    assert not busy.is_cold and backend.kv_stats().live_contexts == 1
