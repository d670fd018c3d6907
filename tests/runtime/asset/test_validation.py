"""Graph-level errors and the spec's pitfalls as warnings."""

import json
import subprocess
import sys

from runtime.asset.model import (
    Asset,
    ClassifyIntent,
    Generate,
    GenerateAndSpeak,
    Intent,
    Retrieve,
    Summarize,
    ToolCall,
)
from runtime.asset.validation import check_file, validate_asset
from runtime.resources import examples_dir


def problems(asset, **kw):
    return {(p.severity, p.node_id, p.field, p.message.split(":")[0]) for p in validate_asset(asset, "a.json", **kw)}


def kinds(asset, **kw):
    return {(p.severity, p.node_id, p.field) for p in validate_asset(asset, "a.json", **kw)}


def test_examples_validate_without_problems():
    for path in examples_dir().glob("*.json"):
        assert check_file(path) == [], path


def test_missing_start_node_and_dangling_exit():
    a = Asset(default_model="m", start_node="nope", nodes=[Generate(id="g", default_exit="ghost")])
    k = kinds(a)
    assert ("error", "", "start_node") in k
    assert ("error", "g", "default_exit") in k
    a2 = Asset(default_model="m", nodes=[Generate(id="g")])
    assert ("error", "", "start_node") in kinds(a2)


def test_intent_exit_errors_name_the_intent():
    a = Asset(default_model="m", start_node="c", nodes=[
        ClassifyIntent(id="c", intents=[Intent(name="a", exit=""), Intent(name="b", exit="ghost")])])
    assert ("error", "c", "intents.1.exit") in kinds(a)


def test_cycle_with_no_way_to_end_is_an_error():
    a = Asset(default_model="m", start_node="a", nodes=[
        Generate(id="a", default_exit="b"), Generate(id="b", default_exit="a")])
    errs = [p for p in validate_asset(a) if p.severity == "error"]
    assert {p.node_id for p in errs} == {"a", "b"}
    # A loop with a way out (a classifier's fallback to END) is fine.
    ok = Asset(default_model="m", start_node="c", nodes=[
        ClassifyIntent(id="c", intents=[Intent(name="again", exit="g")], fallback_exit=""),
        Generate(id="g", default_exit="c")])
    assert [p for p in validate_asset(ok) if p.severity == "error"] == []


def test_duplicate_ids():
    a = Asset(default_model="m", start_node="g", nodes=[Generate(id="g"), Generate(id="g")])
    assert ("error", "g", "id") in kinds(a)


def test_unreachable_node_warns():
    a = Asset(default_model="m", start_node="g", nodes=[Generate(id="g"), Generate(id="lost")])
    assert ("warning", "lost", "") in kinds(a)


def test_trigger_tokens_at_or_above_consumer_budget_warns():
    a = Asset(default_model="m", start_node="g", nodes=[
        Generate(id="g", context_size=1024, max_tokens=224, default_exit="s"),
        Summarize(id="s", trigger_tokens=800)])
    assert ("warning", "s", "trigger_tokens") in kinds(a)
    a.nodes[1].trigger_tokens = 500
    assert ("warning", "s", "trigger_tokens") not in kinds(a)


def test_trigger_check_uses_model_context_when_node_context_is_zero():
    a = Asset(default_model="m", start_node="g", nodes=[
        Generate(id="g", max_tokens=256, default_exit="s"), Summarize(id="s", trigger_tokens=1024)])
    assert ("warning", "s", "trigger_tokens") not in kinds(a)  # unknown model size: no guess
    assert ("warning", "s", "trigger_tokens") in kinds(a, model_context=lambda m: 1024)


def test_system_prompt_filling_budget_warns():
    a = Asset(default_model="m", start_node="g", nodes=[
        Generate(id="g", context_size=256, max_tokens=128, system_prompt="word " * 200)])
    assert ("warning", "g", "system_prompt") in kinds(a)
    exact = kinds(a, count_tokens=lambda text: 10)
    assert ("warning", "g", "system_prompt") not in exact


def test_summarize_before_reply_warns():
    a = Asset(default_model="m", start_node="s", nodes=[
        Summarize(id="s", default_exit="g"), GenerateAndSpeak(id="g")])
    assert ("warning", "s", "default_exit") in kinds(a)


def test_tool_call_without_tools_and_missing_knowledge_file(tmp_path):
    a = Asset(default_model="m", start_node="t", nodes=[
        ToolCall(id="t", default_exit="r"), Retrieve(id="r", source_file="nope.jsonl")])
    k = kinds(a, asset_dir=tmp_path)
    assert ("error", "t", "tools") in k and ("error", "r", "source_file") in k


def test_no_model_warns():
    a = Asset(start_node="g", nodes=[Generate(id="g")])
    assert ("warning", "g", "model_name") in kinds(a)


def write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "runtime", "validate", *map(str, args)], capture_output=True, text=True, check=False)


def test_cli_passes_examples():
    out = run_cli(*sorted(examples_dir().glob("*.json")))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count(": ok") == len(list(examples_dir().glob("*.json")))


def test_cli_names_node_and_field_and_exits_1_on_errors(tmp_path):
    bad = write(tmp_path, "bad.json", {"version": 1, "start_node": "g", "default_model": "m",
                                       "nodes": [{"id": "g", "type": "Generate", "context_size": 100, "max_tokens": 100}]})
    out = run_cli(bad)
    assert out.returncode == 1
    assert f"{bad}:g.max_tokens: error:" in out.stdout


def test_cli_exits_0_on_warnings_only(tmp_path):
    warn = write(tmp_path, "warn.json", {"version": 1, "start_node": "g", "default_model": "m",
                                         "nodes": [{"id": "g", "type": "Generate"}, {"id": "x", "type": "Generate"}]})
    out = run_cli(warn)
    assert out.returncode == 0
    assert f"{warn}:x: warning: unreachable" in out.stdout


def test_cli_malformed_json(tmp_path):
    out = run_cli(write(tmp_path, "m.json", '{"nodes": [}'))
    assert out.returncode == 1 and "m.json:1:12: error: malformed JSON" in out.stdout


def test_max_tokens_against_the_models_own_context():
    a = Asset(default_model="m", start_node="g", nodes=[Generate(id="g", max_tokens=1024)])
    assert ("error", "g", "max_tokens") in kinds(a, model_context=lambda m: 1024)
    assert ("error", "g", "max_tokens") not in kinds(a, model_context=lambda m: 2048)


def test_summarized_mode_without_a_summarizer_warns():
    a = Asset(default_model="m", start_node="g", nodes=[Generate(id="g", history_mode="summarized")])
    assert ("warning", "g", "history_mode") in kinds(a)
    a.nodes[0].default_exit = "s"
    a.nodes.append(Summarize(id="s"))
    assert ("warning", "g", "history_mode") not in kinds(a)


def test_model_files_are_looked_up(tmp_path, sample_model):
    from runtime.asset.validation import ModelFiles

    a = Asset(default_model="nowhere.gguf", start_node="g", nodes=[
        Generate(id="g", max_tokens=256), Generate(id="h", model_name=str(sample_model), max_tokens=9000)])
    k = kinds(a, models=ModelFiles(tmp_path))
    assert ("warning", "", "default_model") in k  # not found, said once for the agent's model
    assert ("error", "h", "max_tokens") in k  # the sample model's own context is 8192
    bad = tmp_path / "fake.gguf"
    bad.write_bytes(b"not a gguf at all")
    a.default_model = "fake.gguf"
    problems = validate_asset(a, "a.json", models=ModelFiles(tmp_path))
    assert any(p.field == "default_model" and "fake.gguf" in p.message for p in problems)


def test_summarizer_whose_own_prompt_leaves_no_room_warns():
    a = Asset(default_model="m", start_node="g", nodes=[
        Generate(id="g", context_size=2048, default_exit="s"),
        Summarize(id="s", context_size=256, max_summary_tokens=64, trigger_tokens=100)])
    assert ("warning", "s", "context_size") in kinds(a)  # the built-in prompt alone is ~160 tokens
    a.nodes[1].context_size = 1024
    assert ("warning", "s", "context_size") not in kinds(a)


def warnings_on(asset, node_id, field):
    return [p.message for p in validate_asset(asset, "a.json")
            if (p.severity, p.node_id, p.field) == ("warning", node_id, field)]


def test_reply_without_a_system_prompt_warns():
    for reply in (Generate(id="r"), GenerateAndSpeak(id="r"), Generate(id="r", system_prompt=" \n ")):
        (message,) = warnings_on(Asset(default_model="m", start_node="r", nodes=[reply]), "r", "system_prompt")
        assert message.startswith("no system prompt") and "Describe the character" in message
    written = Asset(default_model="m", start_node="r", nodes=[GenerateAndSpeak(id="r", system_prompt="You are Mira.")])
    assert warnings_on(written, "r", "system_prompt") == []
    # Not a reply: a tool call's instructions may well be empty.
    tool = ToolCall(id="t", tools=[{"name": "look"}])
    assert warnings_on(Asset(default_model="m", start_node="t", nodes=[tool]), "t", "system_prompt") == []


def router(*replies, fallback=""):
    """A classifier whose intent 'i<n>' goes to the n-th of ``replies``; every node has a system prompt."""
    intents = [Intent(name=f"i{n}", exit=r.id) for n, r in enumerate(replies)]
    for r in replies:
        r.system_prompt = r.system_prompt or "You are Mira."
    return Asset(default_model="m", start_node="c", nodes=[
        ClassifyIntent(id="c", intents=intents, fallback_exit=fallback or replies[0].id), *replies])


def test_a_text_only_reply_in_an_agent_that_speaks_warns():
    mixed = router(GenerateAndSpeak(id="speak"), Generate(id="text"))
    (message,) = warnings_on(mixed, "text", "history_role")
    assert "never hears it" in message and "'speak' speaks other turns" in message
    assert "Use a Generate and Speak node" in message
    assert warnings_on(mixed, "speak", "history_role") == []
    # Still the last reply when only non-reply nodes (a Summarize) run after it.
    mixed.nodes[2].default_exit = "fold"
    mixed.nodes.append(Summarize(id="fold"))
    assert len(warnings_on(mixed, "text", "history_role")) == 1


def test_text_only_replies_that_are_meant_so_do_not_warn():
    # An agent that speaks nowhere is a text agent: every reply is text on purpose.
    assert warnings_on(router(Generate(id="a"), Generate(id="text")), "text", "history_role") == []
    # A hidden step is not shown to the player at all.
    hidden = router(GenerateAndSpeak(id="speak"), Generate(id="text", history_role="none"))
    assert warnings_on(hidden, "text", "history_role") == []
    # Not the last reply: a speaking reply runs after it.
    before = router(GenerateAndSpeak(id="speak"), Generate(id="text", default_exit="speak"))
    assert warnings_on(before, "text", "history_role") == []
    # Every path here has spoken already: the turn is voiced, the text adds to it.
    after = Asset(default_model="m", start_node="speak", nodes=[
        GenerateAndSpeak(id="speak", system_prompt="You are Mira.", default_exit="text"),
        Generate(id="text", system_prompt="Add a hint.")])
    assert warnings_on(after, "text", "history_role") == []
    # A speaking node no turn reaches speaks nothing (it is reported as unreachable instead).
    lost = router(Generate(id="a"), Generate(id="text"))
    lost.nodes.append(GenerateAndSpeak(id="lost", system_prompt="You are Mira."))
    assert warnings_on(lost, "text", "history_role") == []


def test_an_intent_with_no_branch_warns_on_its_exit():
    a = router(Generate(id="a"))
    a.nodes[0].intents.append(Intent(name="bye", exit=""))
    (message,) = warnings_on(a, "c", "intents.1.exit")
    assert "'bye' has no branch" in message and "Connect its exit" in message
    assert warnings_on(a, "c", "intents.0.exit") == []
