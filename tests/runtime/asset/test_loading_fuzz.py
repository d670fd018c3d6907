"""Property: any input gives a valid asset or an AssetError - never another exception."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.asset.file import dumps_asset, parse_asset
from runtime.asset.validation import validate_asset
from runtime.problems import AssetError
from runtime.resources import examples_dir

EXAMPLES = [json.loads(p.read_text()) for p in sorted(examples_dir().glob("*.json"))]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


@st.composite
def mutated_assets(draw):
    asset = json.loads(json.dumps(draw(st.sampled_from(EXAMPLES))))
    for _ in range(draw(st.integers(1, 4))):
        all_paths = [p for p in paths(asset) if p]
        if not all_paths:
            break
        path = draw(st.sampled_from(all_paths))
        parent = asset
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return asset


def check(text):
    try:
        asset = parse_asset(text, "fuzz.json")
    except AssetError as exc:
        assert exc.problems and all(p.message for p in exc.problems)
        return
    validate_asset(asset, "fuzz.json")  # must not raise either
    assert parse_asset(dumps_asset(asset)) == asset


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_assets())
def test_mutated_assets(asset):
    check(json.dumps(asset))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    check(text)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([json.dumps(e, indent=1) for e in EXAMPLES]), st.integers(0, 4000), st.text(max_size=3))
def test_truncated_and_spliced_json(text, cut, junk):
    check(text[: cut % (len(text) + 1)] + junk)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_arbitrary_json_values(value):
    check(json.dumps(value))
