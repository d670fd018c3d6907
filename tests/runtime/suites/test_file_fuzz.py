"""Suite files under fuzzing: any text gives a suite or a SuiteError whose problems print (never a
traceback), and whatever loads comes back the same after it is written out again (save_case writes
suites, so a suite it rewrites must keep every case it had)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.suites.file import SuiteError, load_suite, save_case

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"
SUITES = sorted(EXAMPLES.glob("*.suite.yaml"))
FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, width=32),
                    st.text(max_size=30))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=20)
expectations = st.fixed_dictionaries({}, optional={
    "path": st.lists(st.sampled_from(["classify", "directions", "smalltalk", "warn", "reply"]), max_size=3),
    "intent": st.sampled_from(["", "ask_directions", "greet"]),
    "reply": st.fixed_dictionaries({}, optional={
        "contains": st.lists(st.text(min_size=1, max_size=10), max_size=2),
        "max_words": st.integers(1, 200),
        "regex": st.sampled_from(["market", r"\bgate\b", "(a|b)+"]),
    }),
    "slots": st.dictionaries(st.sampled_from(["intent", "mood"]), values, max_size=2),
})
cases = st.fixed_dictionaries({
    "name": st.text(min_size=1, max_size=20).filter(lambda s: s.strip() == s and s),
    "turns": st.lists(st.fixed_dictionaries({"say": st.text(max_size=40)}, optional={"expect": expectations}),
                      min_size=1, max_size=3),
})


def _load(path: Path):
    try:
        return load_suite(path)
    except SuiteError as exc:
        assert exc.problems and all(str(p) for p in exc.problems)
        assert all(p.file for p in exc.problems), exc.problems
        return None


def _dumped(loaded) -> dict:
    return loaded.suite.model_dump(mode="json")


@FUZZ
@given(text=st.text(max_size=400))
def test_any_text_is_a_suite_or_a_located_error(text, tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite")
    shutil.copy(EXAMPLES / "intent_router.json", folder)
    path = folder / "any.suite.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    _load(path)


@FUZZ
@given(example=st.sampled_from(SUITES), cut=st.integers(0, 4000), junk=st.text(max_size=20))
def test_edited_example_suites_load_or_are_a_located_error(example, cut, junk, tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite")
    for asset in EXAMPLES.glob("*.json"):
        shutil.copy(asset, folder)
    shutil.copytree(EXAMPLES / "behaviours", folder / "behaviours", dirs_exist_ok=True)
    for data in EXAMPLES.glob("*.jsonl"):
        shutil.copy(data, folder)
    text = example.read_text(encoding="utf-8")
    path = folder / example.name
    path.write_text(text[:cut] + junk + text[cut:], encoding="utf-8")
    _load(path)


@FUZZ
@given(suite_cases=st.lists(cases, min_size=1, max_size=4, unique_by=lambda c: c["name"]), extra=cases)
def test_a_suite_that_loads_keeps_every_case_when_a_case_is_saved_into_it(suite_cases, extra, tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite")
    shutil.copy(EXAMPLES / "intent_router.json", folder)
    path = folder / "router.suite.yaml"
    path.write_text(yaml.safe_dump({"asset": "intent_router.json", "cases": suite_cases}, allow_unicode=True),
                    encoding="utf-8")
    written = yaml.safe_load(path.read_text(encoding="utf-8"))
    before = _load(path)
    if before is None:
        return
    name = save_case(path, folder / "intent_router.json", extra)
    after = _load(path)
    if after is None:  # the added case itself may be refused; the file then still holds the old cases whole
        # (as the file read before: PyYAML's own dump of a NEL does not read back as one)
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert raw["cases"][:len(suite_cases)] == written["cases"]
        return
    assert _dumped(after)["cases"][:-1] == _dumped(before)["cases"]
    assert after.suite.cases[-1].name == name
    again = _load(path)
    assert again is not None and _dumped(again) == _dumped(after)


def test_the_example_suites_load_back_the_same_when_written_out_again(tmp_path):
    for example in SUITES:
        for asset in EXAMPLES.glob("*.json"):
            shutil.copy(asset, tmp_path)
        shutil.copytree(EXAMPLES / "behaviours", tmp_path / "behaviours", dirs_exist_ok=True)
        first = load_suite(example)
        path = tmp_path / example.name
        raw = yaml.safe_load(example.read_text(encoding="utf-8"))
        path.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True), encoding="utf-8")
        assert _dumped(load_suite(path)) == _dumped(first), example.name


def test_a_line_ruamel_takes_for_a_float_stays_the_text_it_was_when_a_case_is_saved(tmp_path):
    """Found by this file's fuzzing: a case saying 0E0 (text to PyYAML, which reads suites: YAML 1.1 wants
    a dot) was written back as 0.0 when another case was saved, and the suite no longer loaded."""
    shutil.copy(EXAMPLES / "intent_router.json", tmp_path)
    path = tmp_path / "router.suite.yaml"
    path.write_text("asset: intent_router.json\ncases:\n  - name: a\n    turns:\n      - say: 0E0\n"
                    "      - say: hi\n        expect: {reply: {max_words: 1.5e+1}}\n", encoding="utf-8")
    save_case(path, tmp_path / "intent_router.json", {"name": "b", "turns": [{"say": "hello"}]})
    loaded = load_suite(path)
    assert [t.say for t in loaded.suite.cases[0].turns] == ["0E0", "hi"]
    assert "say: 0E0" in path.read_text(encoding="utf-8") and loaded.suite.cases[-1].name == "b"
