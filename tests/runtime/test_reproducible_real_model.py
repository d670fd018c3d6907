"""Issue 21's guarantees on the real sample model, with the default embedded engine (full cache reuse):
a turn made again at the same point of its conversation gives the same reply, and every node the same
prompt and output, bit for bit, however the caches were filled since, in a cold process, in another
suite order or job count, and at another thread count.

Replies are sampled (temperature above 0, fixed seeds), so a single differing logit would show.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.llama import LlamaBackend
from runtime.dialogue.dialog_file import dumps_history, history_from_dict
from runtime.dialogue.history import Reply
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.run import run_suites

pytestmark = pytest.mark.model

LINES = [
    "Hello there! Who are you?",
    "I need directions to the old mill.",
    "Do you sell any swords?",
    "Tell me about the dragon in the hills.",
    "How much for a night at the inn?",
    "Thanks, goodbye for now.",
]


@pytest.fixture(scope="module")
def model(sample_model) -> str:
    return str(sample_model)


def example(name: str, model: str, **node_changes):
    asset = load_asset(examples_dir() / f"{name}.json").model_copy(update={"default_model": model})
    nodes = [n.model_copy(update=node_changes.get(n.id, {})) for n in asset.nodes]
    return asset.model_copy(update={"nodes": nodes})


def router(model: str):
    """The intent router with sampled replies: a classifier, then one of several speaking nodes."""
    asset = example("intent_router", model)
    nodes = [n.model_copy(update={"temperature": 0.9, "max_tokens": 24}) if n.PLAYER_FACING
             else n for n in asset.nodes]
    return asset.model_copy(update={"nodes": nodes})


def signature(result) -> list:
    """Everything a turn said: the reply, and each node's prompt and output."""
    return [result.reply, [(n.node, [(m.role, m.content) for m in n.input.prompt] if n.input else None, n.output)
                           for n in result.diagnostics.nodes]]


def new_agent(asset, **backend_options) -> Agent:
    return Agent(asset, LlamaBackend(asset_dir=examples_dir(), **backend_options), str(examples_dir()))


@pytest.fixture(scope="module")
def recorded(model):
    """Six turns of the router, once, in a fresh process's backend: what every case compares with."""
    agent = new_agent(router(model))
    results = [agent.run_turn(line) for line in LINES]
    yield agent, results
    agent.backend.close()


def test_regenerate_with_the_same_seed_is_identical(recorded):
    agent, results = recorded
    for index in (5, 2):
        again = agent.regenerate(index)
        assert signature(again) == signature(results[index]), f"turn {index + 1} regenerated"
        reads = [n.tokens for n in again.diagnostics.nodes if n.tokens and n.tokens.prompt]
        assert all(not t.cold and t.reused > 0 for t in reads)
    agent.select_turn(results[-1].turn_id)


def test_rewind_to_before_turn_n_then_go_on_is_identical_and_costs_no_more_than_the_original(recorded):
    agent, results = recorded
    agent.rewind(2)
    for index in range(2, len(LINES)):
        again = agent.run_turn(LINES[index])
        assert signature(again) == signature(results[index]), f"turn {index + 1} after the rewind"
        for mine, theirs in zip(again.diagnostics.nodes, results[index].diagnostics.nodes):
            if mine.tokens and mine.tokens.prompt:
                assert mine.tokens.evaluated <= theirs.tokens.evaluated
    agent.select_turn(results[-1].turn_id)


def test_edit_a_reply_then_replay_is_identical_in_this_process_and_a_cold_one(recorded, model):
    agent, results = recorded
    agent.rewind(6)
    node = next(e.node for e in agent.history.turns[1].entries if isinstance(e, Reply) and e.replay)
    agent.edit_reply(1, [Reply(node, "The mill is past the bridge, follow the river north.")])
    here = [signature(agent.run_turn(line)) for line in LINES[2:5]]
    agent.rewind(2)
    assert [signature(agent.run_turn(line)) for line in LINES[2:5]] == here, "the same replay twice"
    agent.rewind(2)
    saved = history_from_dict(json.loads(dumps_history(agent.export_dialog())))
    cold = new_agent(router(model))
    try:
        cold.import_dialog(saved)
        assert [signature(cold.run_turn(line)) for line in LINES[2:5]] == here, "a cold process after the edit"
    finally:
        cold.backend.close()
    agent.select_turn(results[-1].turn_id)


def test_a_cold_process_that_loads_the_history_goes_on_from_turn_n_identically(recorded, model, tmp_path):
    """``parley chat --history-in --from-turn`` in a new process replays turns 3 to 6 and must say
    "unchanged" for each: the replay of an unchanged graph."""
    agent, results = recorded
    agent.select_turn(results[-1].turn_id)
    history = tmp_path / "router.history.json"
    history.write_text(dumps_history(agent.export_dialog()), encoding="utf-8")
    asset = tmp_path / "router.json"
    asset.write_text(router(model).model_dump_json(), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "runtime", "chat", str(asset), "--history-in", str(history),
                           "--from-turn", "3"], check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("[turn ")]
    assert verdicts == [f"[turn {n}: reply unchanged]" for n in range(3, 7)], done.stdout


def test_the_same_conversation_at_one_thread_and_at_two_is_identical(model):
    one = new_agent(router(model), n_threads=1, n_threads_batch=1)
    two = new_agent(router(model), n_threads=2, n_threads_batch=2)
    try:
        for line in LINES[:3]:
            assert signature(one.run_turn(line)) == signature(two.run_turn(line))
    finally:
        one.backend.close()
        two.backend.close()


def test_a_rewind_across_a_trim_and_a_summary_is_identical(model):
    """The long conversation's small budget trims and summarizes: a node's cache is cut far back,
    and going back to before that restores a snapshot (or reads the journal again)."""
    asset = example("long_conversation", model)
    agent = new_agent(asset)
    try:
        lines = [f"Tell me about thing number {i}, and be brief." for i in range(12)]
        results = [agent.run_turn(line) for line in lines]
        windows = [r.turn for r in results if any(w.startswith("window") or "trim" in w
                                                  for n in r.diagnostics.nodes for w in n.warnings)]
        summarized = [i for i in range(1, len(lines)) if len(agent.tree.state_after(results[i].turn_id).summaries)
                      > len(agent.tree.state_after(results[i - 1].turn_id).summaries)]
        assert summarized or windows, "the conversation was long enough to rewrite a cache"
        assert agent.backend.snapshots.taken > 0, "a cut that discarded earlier turns was snapshotted"
        agent.rewind(3)
        for index in range(3, len(lines)):
            assert signature(agent.run_turn(lines[index])) == signature(results[index]), f"turn {index + 1}"
        assert agent.backend.snapshots.restored > 0
    finally:
        agent.backend.close()


def test_a_suite_gives_the_same_turns_with_one_job_two_jobs_and_shuffled_cases(model):
    """Cases share each job's backend (warm caches), so which case ran before another must not matter."""
    loaded = [load_suite(examples_dir() / f"{name}.suite.yaml") for name in ("chat", "intent_router", "tool_calling")]

    def turns(report) -> dict:
        assert all(not r.error for r in report.results), [r.error for r in report.results]
        return {(r.suite, r.case, t.number): (t.reply, t.path) for r in report.results for t in r.turns}

    one = turns(run_suites(loaded, LlamaBackend, jobs=1))
    two = turns(run_suites(loaded, LlamaBackend, jobs=2))
    shuffled = []
    for i, suite in enumerate(reversed(loaded)):
        cases = list(suite.suite.cases)
        random.Random(21 + i).shuffle(cases)
        shuffled.append(dataclasses.replace(suite, suite=suite.suite.model_copy(update={"cases": cases[::-1]})))
    mixed = turns(run_suites(shuffled, LlamaBackend, jobs=1))
    assert len(one) >= 6
    assert one == two == mixed
