"""Property-based fuzzing of asset loading and validation (issue 14).

Arbitrary JSON-like structures and mutated example assets (fields given values of any type,
keys deleted and added, huge numbers, NaN and infinity, lone surrogates) go through every way an
asset is read: ``asset_from_dict``, ``parse_asset`` on the JSON text, ``load_asset`` and the
editor's ``load_asset_for_editing`` on a file. Each gives an asset or a clear ``AssetError``
(every problem with a message that can be printed), never another exception; every asset that
loads validates without raising and saves to a file that loads again.

Bounded (at most 50 examples each, no deadline) so it runs in the ordinary test command.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime.asset.file import asset_from_dict, dumps_asset, load_asset, load_asset_for_editing, parse_asset
from runtime.asset.model import NODE_TYPES, Asset
from runtime.asset.validation import validate_asset
from runtime.problems import AssetError, Problem
from runtime.resources import examples_dir

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXAMPLES = [json.loads(p.read_text()) for p in sorted(examples_dir().glob("*.json"))]
FIELD_NAMES = sorted({name for model in (Asset, *(t.model for t in NODE_TYPES.values())) for name in model.model_fields})

# Text with what breaks naive code: lone surrogates, NUL, newlines, dots, braces, non-ASCII.
odd_text = st.text(
    alphabet=st.characters(blacklist_categories=()) | st.sampled_from(["\ud800", "\udfff", "\x00", "\n", ".", "{"]),
    max_size=12,
)
names = st.sampled_from(FIELD_NAMES) | st.sampled_from(sorted(NODE_TYPES)) | odd_text
scalars = (
    st.none() | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2**64, -1, 0, 1, 2048])
    | st.sampled_from([5000, -4400]).map(lambda digits: (10 ** abs(digits)) * (1 if digits > 0 else -1))
    | st.floats()  # NaN and infinity included
    | odd_text
)
json_like = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(names, children, max_size=4),
    max_leaves=16,
)
nodes = st.fixed_dictionaries(
    {"id": st.sampled_from(["reply", "route", "a", ""]) | odd_text, "type": st.sampled_from(sorted(NODE_TYPES))},
    optional={name: json_like for name in FIELD_NAMES if name not in ("id", "type")},
)
assets = st.fixed_dictionaries(
    {}, optional={"version": st.sampled_from([0, 1, 2, True, "1", None]), "start_node": odd_text,
                  "nodes": st.lists(nodes | json_like, max_size=4), "variables": json_like,
                  "metadata": json_like, "name": json_like, "max_steps_per_turn": scalars},
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


@st.composite
def mutated_examples(draw):
    asset = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(asset) if p]
        path = draw(st.sampled_from(paths))
        parent = asset
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_like)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(names)] = draw(json_like)
        else:
            parent.append(draw(json_like))
    return asset


def _printable(problems: list[Problem]) -> None:
    assert problems, "an error names at least one problem"
    for problem in problems:
        assert problem.message and problem.severity in ("error", "warning")
        str(problem).encode("utf-8")  # the CLI prints it: no lone surrogate, no unprintable repr


def _json_text(value) -> str:
    """JSON as a file may hold it: NaN and Infinity tokens, and integers of any length."""
    import sys

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(value, ensure_ascii=bool(value) and len(str(value)) % 2 == 0)
    finally:
        sys.set_int_max_str_digits(limit)


def _loaded(asset: Asset) -> None:
    """An asset that loaded validates and saves to a file that loads again."""
    for problem in validate_asset(asset, "fuzz.json"):
        str(problem).encode("utf-8")
    text = dumps_asset(asset)
    text.encode("utf-8")
    again = parse_asset(text, "saved.json")
    assert len(again.nodes) == len(asset.nodes)


def check_dict(raw) -> None:
    try:
        asset = asset_from_dict(raw, "fuzz.json")
    except AssetError as exc:
        _printable(exc.problems)
    else:
        _loaded(asset)


def check_text(text: str) -> None:
    try:
        asset = parse_asset(text, "fuzz.json")
    except AssetError as exc:
        _printable(exc.problems)
    else:
        _loaded(asset)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_asset(path)
        except AssetError as exc:
            _printable(exc.problems)
        try:
            opened = load_asset_for_editing(path)
        except AssetError as exc:
            _printable(exc.problems)
        else:
            for problem in opened.problems:
                str(problem).encode("utf-8")
            _loaded(opened.asset)


@FUZZ
@given(json_like | assets)
@example({"nodes": [{"id": "a", "type": "Generate", "position": [math.nan, math.inf]}], "start_node": "a"})
@example({"nodes": [{"id": "a", "type": ["Generate"]}]})
@example({"nodes": [{"id": "a\ud800", "type": "Generate"}], "metadata": {"\udfff": None}})
def test_any_structure_loads_or_is_a_clear_error(raw):
    check_dict(raw)


def test_a_lone_surrogate_quoted_in_an_error_message_is_a_clear_error():
    # a tool property's schema that is a string holding one: the message quotes the value, and
    # pydantic encodes messages as UTF-8 (it raised UnicodeEncodeError, found by the fuzzing below)
    tool = {"name": "check", "parameters": {"type": "object", "properties": {"item": "\ud800"}}}
    try:
        asset_from_dict({"nodes": [{"id": "a", "type": "ToolCall", "tools": [tool]}]}, "fuzz.json")
    except AssetError as exc:
        _printable(exc.problems)
        assert any("a.tools.0.parameters.properties.item" in str(p) for p in exc.problems)
    else:
        raise AssertionError("a property schema that is a string loaded")


def test_huge_numbers_in_fields_and_free_form_data_are_clear_errors():
    check_dict({"nodes": [{"id": "a", "type": "Generate", "seed": 10**5000}], "metadata": {"x": [-(10**5000)]}})


@FUZZ
@given(mutated_examples())
def test_mutated_examples_load_or_are_a_clear_error(raw):
    check_dict(raw)
    check_text(_json_text(raw))


@FUZZ
@given(st.sampled_from([json.dumps(e) for e in EXAMPLES]), st.sampled_from([
    ('"context_size": 1024', '"context_size": ' + "9" * 5000),
    ('"context_size": 1024', '"context_size": true'),
    ('"position": [', '"position": [NaN, Infinity, '),
    ('"system_prompt": "', '"system_prompt": "\\ud800'),
    ('"max_tokens": ', '"max_tokens": -'),
    ('"nodes": [', '"nodes": [1e400, '),
    ('"variables": {', '"variables": {"\\udc00": NaN, '),
]))
def test_edited_example_files_load_or_are_a_clear_error(text, edit):
    check_text(text.replace(*edit))


@FUZZ
@given(odd_text | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_any_text_loads_or_is_a_clear_error(text):
    check_text(text)
