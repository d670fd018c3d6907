"""Graph-level errors and the spec's pitfalls as warnings."""

import json
import subprocess
import sys

from runtime.asset import (
    Asset,
    ClassifyIntent,
    Generate,
    GenerateAndSpeak,
    Intent,
    Retrieve,
    Summarize,
    ToolCall,
)
from runtime.resources import examples_dir
from runtime.validation import check_file, validate_asset


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
    from runtime.validation import ModelFiles

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
