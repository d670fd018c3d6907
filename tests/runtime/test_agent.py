"""Graph execution: exits, classifiers, slots, tools, events, step limit, failed turns, parameters."""

from __future__ import annotations

import threading

import pytest

import runtime.agent as agent_module
from runtime.agent import Agent, TurnCancelled, TurnError
from runtime.asset.file import load_asset
from runtime.asset.model import Asset, new_node
from runtime.backends.base import GenerationRequest
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.dialogue.history import Reply, ToolExchange
from runtime.events import (
    NodeFinished,
    NodeStarted,
    Speak,
    Summarized,
    Token,
    ToolCalled,
    TurnFinished,
    TurnWarning,
)
from runtime.problems import BackendError
from runtime.prompting.templates import TemplateError
from runtime.resources import examples_dir
from tests.runtime.conversations import asset, backend, node_diag, prompt_of


def router():
    return asset(
        ("ClassifyIntent", "classify", {"intents": [
            {"name": "greet", "description": "says hello", "exit": "hello"},
            {"name": "threaten", "exit": "warn"},
        ], "fallback_exit": "chat"}),
        ("Generate", "hello", {"system_prompt": "greet back", "context_size": 512, "max_tokens": 32}),
        ("Generate", "warn", {"system_prompt": "warn them", "context_size": 512, "max_tokens": 32}),
        ("Generate", "chat", {"system_prompt": "small talk", "context_size": 512, "max_tokens": 32}),
    )


@pytest.mark.parametrize("line, path, slot", [
    ("greet you kindly", ["classify", "hello"], "greet"),
    ("I threaten you", ["classify", "warn"], "threaten"),
    ("nice weather", ["classify", "chat"], ""),
])
def test_intent_exits_and_fallback(line, path, slot):
    agent = Agent(router(), ScriptedBackend())
    result = agent.run_turn(line)
    assert result.path == path
    assert result.slots["intent"] == slot
    d = node_diag(result.diagnostics, "classify")
    assert d.exit == (f"intent:{slot}" if slot else "fallback_exit")
    assert d.next_node == path[1]
    assert result.reply == node_diag(result.diagnostics, path[1]).output
    # The classifier is asked to choose among the intents plus an explicit "none of these".
    assert "- greet: says hello" in d.input.prompt[0].content and "- none:" in d.input.prompt[0].content


def test_classify_attributes_writes_slots_read_by_templates():
    graph = asset(
        ("ClassifyAttributes", "read", {"attributes": [
            {"name": "mood", "values": ["calm", "angry"]},
            {"name": "topic", "values": ["food", "rooms"], "slot": "subject"},
        ], "default_exit": "reply"}),
        ("Generate", "reply", {"context_size": 512, "max_tokens": 32,
                               "template": "Mood {{slots.mood}}, topic {{slots.subject}}.", "placement": "after"}),
    )
    agent = Agent(graph, ScriptedBackend())
    result = agent.run_turn("I am angry about the rooms")
    assert result.slots["mood"] == "angry" and result.slots["subject"] == "rooms"
    prompt = prompt_of(result.diagnostics, "reply")
    assert prompt[-1] == ("user", "I am angry about the rooms\n\nMood angry, topic rooms.", "")
    # The next turn starts with no slots: they live for one turn.
    assert "subject" in agent.run_turn("calm food").slots


def test_template_placement_and_values():
    graph = asset(("Generate", "npc", {
        "context_size": 512, "max_tokens": 32, "system_prompt": "sys",
        "template": "{{instructions}} | {{vars.name}} | {{input}} | <{{slots.missing}}> & done",
    }), variables={"name": "Mira"})
    agent = Agent(graph, ScriptedBackend())
    result = agent.run_turn("Hi <there> & you", instructions="Be brief")
    assert prompt_of(result.diagnostics, "npc")[-1][1] == (
        "Be brief | Mira | Hi <there> & you | <> & done\n\nHi <there> & you"
    )


def test_input_reads_a_slot_and_a_missing_slot_is_a_clear_error():
    graph = asset(
        ("Generate", "draft", {"context_size": 512, "max_tokens": 32, "history_role": "none", "default_exit": "polish"}),
        ("Generate", "polish", {"context_size": 512, "max_tokens": 32, "input": "draft"}),
    )
    agent = Agent(graph, backend({"draft": 4, "polish": 3}))
    result = agent.run_turn("hello")
    draft = node_diag(result.diagnostics, "draft").output
    assert prompt_of(result.diagnostics, "polish")[-1] == ("user", draft, "")
    assert result.reply == node_diag(result.diagnostics, "polish").output  # the hidden draft is not the reply

    graph = asset(("Generate", "polish", {"context_size": 512, "max_tokens": 32, "input": "nothing"}))
    with pytest.raises(TurnError, match=r"polish\.input: reads slot 'nothing'"):
        Agent(graph, ScriptedBackend()).run_turn("hello")


def tools_graph(mock: str | None = "240 arrows", disposition: str = "replay"):
    return asset(
        ("ToolCall", "lookup", {"context_size": 1024, "max_tokens": 64, "system_prompt": "ledger",
                                "disposition": disposition, "default_exit": "answer", "tools": [
            {"name": "check_stock", "description": "count an item",
             "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
             "mock_result": mock},
            {"name": "price_of", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}}},
        ]}),
        ("Generate", "answer", {"context_size": 1024, "max_tokens": 64, "system_prompt": "quartermaster"}),
    )


def test_tool_call_with_mock_result():
    events = []
    backend = ScriptedBackend()
    agent = Agent(tools_graph(), backend)
    result = agent.run_turn("check_stock of arrows", on_event=events.append)
    request = next(r for k, r in backend.calls if k == "lookup")
    # Constrained to one call of a declared tool with its arguments' schema.
    branches = request.json_schema["oneOf"]
    assert [b["properties"]["name"]["const"] for b in branches] == ["check_stock", "price_of"]
    assert branches[0]["properties"]["arguments"]["required"] == ["item"]
    # The tool definitions are in the ToolCall node's system message.
    system = prompt_of(result.diagnostics, "lookup")[0][1]
    assert system.startswith("ledger\n\nYou can call exactly one of these tools") and "- check_stock: count an item" in system
    call = next(e for e in events if isinstance(e, ToolCalled))
    assert (call.tool, call.arguments, call.result) == ("check_stock", {"item": "arrows"}, "240 arrows")
    assert result.slots["lookup"] == "240 arrows"
    assert agent.history.turns[0].entries[0] == ToolExchange("lookup", "check_stock", {"item": "arrows"}, "240 arrows")
    answer = prompt_of(result.diagnostics, "answer")
    assert answer[-2:] == [("assistant", '{"name": "check_stock", "arguments": {"item": "arrows"}}', "check_stock"),
                           ("tool", "240 arrows", "check_stock")]


def test_tool_without_mock_result_asks_the_caller_or_fails_clearly():
    agent = Agent(tools_graph(), ScriptedBackend())
    asked = []
    result = agent.run_turn("price_of apples", tool_result=lambda node, tool, args: asked.append((node, tool, args)) or "3 silver")
    assert asked == [("lookup", "price_of", {"item": "apples"})]
    assert result.slots["lookup"] == "3 silver"
    with pytest.raises(TurnError, match="lookup.tools: the model called 'price_of', which has no mock_result"):
        agent.run_turn("price_of pears")
    assert len(agent.history.turns) == 1


def test_invalid_tool_call_output_is_a_warning_not_a_crash():
    def reply(key, request):
        return '{"name": "nonexistent", "arguments": {}}' if key == "lookup" else default_reply(key, request)

    agent = Agent(tools_graph(), ScriptedBackend(reply))
    result = agent.run_turn("hello")
    d = node_diag(result.diagnostics, "lookup")
    assert "did not write a valid tool call" in d.warnings[0]
    assert agent.history.turns[0].entries == [Reply("answer", result.reply)]


def test_events_stream_in_order_with_sentences_for_generate_and_speak():
    graph = asset(
        ("GenerateAndSpeak", "speak", {"context_size": 512, "max_tokens": 64, "default_exit": "sum"}),
        ("Summarize", "sum", {"trigger_turns": 1, "keep_recent_turns": 0, "notify_client": True}),
    )

    def reply(key, request):
        return "Welcome, traveller. Sit by the fire! Do you want cider?" if key == "speak" else "They met."

    events = []
    result = Agent(graph, ScriptedBackend(reply)).run_turn("hi", on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "node_started" and kinds[-1] == "turn_finished"
    speak_events = [e.text for e in events if isinstance(e, Speak)]
    assert speak_events == ["Welcome, traveller.", "Sit by the fire!", "Do you want cider?"]
    tokens = "".join(e.text for e in events if isinstance(e, Token) and e.node == "speak")
    assert tokens == result.reply
    order = [(type(e).__name__, getattr(e, "node", "")) for e in events if not isinstance(e, (Token, Speak))]
    assert order == [("NodeStarted", "speak"), ("NodeFinished", "speak"), ("NodeStarted", "sum"),
                     ("Summarized", "sum"), ("NodeFinished", "sum"), ("TurnFinished", "")]
    finished = events[-1]
    assert isinstance(finished, TurnFinished) and finished.path == ["speak", "sum"] and finished.reply == result.reply
    assert all(isinstance(e, (NodeStarted, NodeFinished, Token, Speak, Summarized, TurnFinished)) for e in events)


def test_step_limit_stops_a_runaway_loop():
    graph = asset(
        ("ClassifyIntent", "a", {"intents": [{"name": "loop", "exit": "b"}], "fallback_exit": "b"}),
        ("Generate", "b", {"context_size": 512, "max_tokens": 16, "default_exit": "a"}),
        max_steps_per_turn=7,
    )
    agent = Agent(graph, ScriptedBackend())
    with pytest.raises(TurnError, match=r"ran 7 nodes without reaching END .*a -> b -> a.*max_steps_per_turn"):
        agent.run_turn("go")
    assert agent.history.turns == [] and agent.windows == {}


class Boom(ScriptedBackend):
    def __init__(self, fail_on: str, **kw):
        super().__init__(**kw)
        self.fail_on = fail_on

    def reply_for(self, key: str, request: GenerationRequest) -> str:
        if key == self.fail_on:
            raise BackendError("out of memory (simulated)")
        return super().reply_for(key, request)


def test_a_failed_turn_leaves_the_history_as_it_was():
    graph = asset(
        ("Generate", "npc", {"context_size": 300, "max_tokens": 40, "default_exit": "sum"}),
        ("Summarize", "sum", {"context_size": 600, "max_summary_tokens": 40, "trigger_turns": 2, "keep_recent_turns": 0}),
    )
    backend = Boom(fail_on="", reply=lambda k, r: "word " * 30)
    agent = Agent(graph, backend)
    for i in range(5):  # folds at turns 1 and 3; turn 5 will fold again
        agent.run_turn(f"line {i} " + "x " * 20)
    before = agent.export_dialog()
    assert before.windows["npc"] > 0 and before.history.summaries
    # The Summarize node fails after npc moved its window and wrote its reply.
    backend.fail_on = "sum"
    with pytest.raises(BackendError, match="simulated"):
        agent.run_turn("this turn fails " + "y " * 60)
    assert agent.export_dialog() == before


def test_a_template_error_names_node_and_field_and_changes_nothing():
    graph = asset(("Generate", "npc", {"context_size": 512, "max_tokens": 32, "template": "{{#knowledge}}{{text}}"}))
    agent = Agent(graph, ScriptedBackend())
    with pytest.raises(TemplateError) as info:
        agent.run_turn("hi")
    problem = info.value.problems[0]
    assert (problem.node_id, problem.field) == ("npc", "template") and "Unexpected EOF" in problem.message
    assert agent.history.turns == []


def test_cancel_stops_the_turn_and_changes_nothing():
    cancel = threading.Event()
    agent = Agent(asset(("Generate", "npc", {"context_size": 512, "max_tokens": 64})),
                  ScriptedBackend(lambda k, r: "one two three four five six"))
    agent.run_turn("first")

    def on_event(event):
        if isinstance(event, Token) and event.text.strip() == "three":
            cancel.set()

    tokens = []
    with pytest.raises(TurnCancelled):
        agent.run_turn("second", on_event=lambda e: (tokens.append(e), on_event(e)), cancel=cancel)
    assert len(agent.history.turns) == 1
    assert sum(isinstance(e, Token) for e in tokens) == 3  # stopped mid-generation
    cancel.set()
    with pytest.raises(TurnCancelled):  # already cancelled: no node runs
        agent.run_turn("third", cancel=cancel)


def test_changing_system_prompt_and_variables_between_turns():
    graph = asset(("Generate", "npc", {"context_size": 1024, "max_tokens": 32, "system_prompt": "You are Mira.",
                                       "template": "Time: {{vars.time}}"}), variables={"time": "dusk"})
    agent = Agent(graph, backend({"npc": 5}))
    a = node_diag(agent.run_turn("hello").diagnostics, "npc")
    b = node_diag(agent.run_turn("again").diagnostics, "npc")
    assert b.tokens.reused > 0
    agent.set_system_prompt("npc", "You are Mira, and you are tired.")
    agent.set_variable("time", "midnight")
    c = node_diag(agent.run_turn("still here?").diagnostics, "npc")
    assert c.input.prompt[0].content == "You are Mira, and you are tired."
    assert c.input.prompt[-1].content == "Time: midnight\n\nstill here?"
    # A new system prompt changes the start of the prompt: everything after the first
    # difference is read again (only the role header and "You are" still match).
    assert c.tokens.reused == 4 + 2 and c.tokens.evaluated == c.tokens.prompt - 6
    assert a.input.prompt[0].content == "You are Mira."
    with pytest.raises(KeyError):
        agent.set_system_prompt("nope", "x")


def test_a_turn_while_another_runs_is_refused():
    started, release = threading.Event(), threading.Event()

    def slow(key, request):
        started.set()
        release.wait(5)
        return "done"

    agent = Agent(asset(("Generate", "npc", {"context_size": 512, "max_tokens": 16})), ScriptedBackend(slow))
    worker = threading.Thread(target=agent.run_turn, args=("first",))
    worker.start()
    try:
        assert started.wait(5)
        with pytest.raises(TurnError, match="already running"):
            agent.run_turn("second")
    finally:
        release.set()
        worker.join(5)
    assert not worker.is_alive() and len(agent.history.turns) == 1


def test_warnings_are_events_and_in_the_diagnostics(caplog):
    graph = asset(("Generate", "npc", {"context_size": 200, "max_tokens": 20, "system_prompt": "s " * 170}))
    events = []
    result = Agent(graph, backend({"npc": 2}, context_size=200)).run_turn("hi", on_event=events.append)
    warnings = [e for e in events if isinstance(e, TurnWarning)]
    assert warnings and warnings[0].node == "npc" and "sees no history" in warnings[0].message
    assert result.diagnostics.warnings == [f"npc: {warnings[0].message}"]
    assert "sees no history" in caplog.text


def test_no_model_and_missing_start_node_are_clear_errors():
    graph = asset(("Generate", "npc", {"context_size": 512, "max_tokens": 16}))
    graph = graph.model_copy(update={"default_model": ""})
    with pytest.raises(TurnError, match="npc.model_name: no model"):
        Agent(graph, ScriptedBackend()).run_turn("hi")
    graph = graph.model_copy(update={"start_node": "", "default_model": "m"})
    with pytest.raises(TurnError, match="start_node: the asset has no start node"):
        Agent(graph, ScriptedBackend()).run_turn("hi")


@pytest.mark.parametrize("name", ["chat", "intent_router", "tool_calling", "retrieval", "long_conversation"])
def test_every_example_runs(name):
    graph = load_asset(examples_dir() / f"{name}.json")
    agent = Agent(graph, ScriptedBackend(), asset_dir=str(examples_dir()))
    for line in ["Hello there", "How many arrows are in the stores?", "When did the old mill burn?"] * 4:
        result = agent.run_turn(line)
        assert result.path and result.path[0] == graph.start_node
        assert result.diagnostics is not None
    assert len(agent.history.turns) == 12


def test_diagnostics_off_gives_no_diagnostics():
    graph = asset(("Generate", "npc", {"context_size": 512, "max_tokens": 16}), enable_diagnostics=False)
    assert Agent(graph, ScriptedBackend()).run_turn("hi").diagnostics is None


def test_max_tokens_not_below_the_models_context_is_a_clear_error():
    graph = asset(("Generate", "npc", {"context_size": 0, "max_tokens": 600}))
    agent = Agent(graph, ScriptedBackend(context_size=512))
    with pytest.raises(TurnError, match=r"npc\.max_tokens: max_tokens \(600\) must be .* less than the context size \(512\)"):
        agent.run_turn("hi")


def test_token_counts_forget_the_least_recently_used(monkeypatch):
    monkeypatch.setattr(agent_module, "TOKEN_COUNT_CACHE", 3)
    backend = ScriptedBackend()
    counted: list[str] = []
    original = backend.count_tokens

    def count_tokens(model, text):
        counted.append(text)
        return original(model, text)

    monkeypatch.setattr(backend, "count_tokens", count_tokens)
    agent = Agent(Asset(nodes=[new_node("Generate", "g")], start_node="g"), backend)
    count = agent.token_counter("m")
    for text in ("a", "b", "c", "a", "d"):  # "a" used again: "b" is the oldest when "d" comes
        count(text)
    counted.clear()
    for text in ("a", "c", "d"):
        count(text)
    assert counted == [], "the recent counts were kept (clearing all made every one recounted)"
    count("b")
    assert counted == ["b"]


def test_a_history_from_outside_naming_undeclared_variables_or_missing_nodes_is_refused() -> None:
    """Issue 39: a history import accepted variables the asset does not declare, and replies by nodes
    it lacks; each is named by its field, and nothing changes. The agent's own conversation carried
    into its changed graph (``Session.use_asset``) keeps them."""
    from runtime.dialogue.dialog_file import HistoryError
    from runtime.dialogue.history import Reply

    source = asset(("Generate", "npc", {"system_prompt": "hi", "max_tokens": 16}), variables={"mood": "calm"})
    agent = Agent(source, ScriptedBackend())
    agent.run_turn("hello")
    saved = agent.export_dialog()
    saved.variables["gold"] = 5
    saved.tree.nodes[saved.tree.path()[0]].turn.entries.append(Reply("ghost", "boo", True))
    other = Agent(source, ScriptedBackend())
    with pytest.raises(HistoryError) as refused:
        other.import_dialog(saved, "save.json")
    fields = [p.field for p in refused.value.problems]
    assert "variables.gold" in fields and "turns[id 0].entries.1.node" in fields, fields
    assert "'gold' is not declared by the asset (its variables: mood)" in str(refused.value)
    assert other.history.turns == [] and "gold" not in other.variables
    other.import_dialog(saved, foreign=False)
    assert other.variables["gold"] == 5


def test_a_cancel_that_comes_once_every_node_has_run_still_cancels_the_turn() -> None:
    """Issue 39: cancel answered cancelled: true, yet the turn finished and was kept (10 of 150 tries):
    the cancel came after the last node's call. A cancel set before the turn is kept cancels it; a
    caller's commit gate is asked last, and a turn it refuses is not kept either."""
    from runtime.events import NodeFinished
    from runtime.nodes.running import TurnCancelled

    agent = Agent(asset(("Generate", "reply", {"system_prompt": "hi", "max_tokens": 16})), ScriptedBackend())
    agent.run_turn("hello")
    cancel = threading.Event()
    with pytest.raises(TurnCancelled):
        agent.run_turn("again", cancel=cancel, on_event=lambda e: isinstance(e, NodeFinished) and cancel.set())
    assert len(agent.history.turns) == 1 and len(agent.tree.nodes) == 1
    with pytest.raises(TurnCancelled):
        agent.run_turn("again", commit=lambda: False)
    assert len(agent.history.turns) == 1
    asked = []
    agent.run_turn("again", commit=lambda: asked.append(True) or True)
    assert asked == [True] and len(agent.history.turns) == 2


def test_a_served_turn_once_kept_is_no_longer_cancelled() -> None:
    """The other side of it in parley serve: once the agent has kept the turn, a cancel answers that
    it came too late (cancelled: false), and before that it wins."""
    from runtime.serve.npcs import NPCs, RunningTurn

    kept = RunningTurn()
    assert kept.keep() and not NPCs.stop(kept) and not kept.cancel.is_set()
    stopped = RunningTurn()
    assert NPCs.stop(stopped) and not stopped.keep()
