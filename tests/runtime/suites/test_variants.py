"""Comparing variants: the statistics against hand-checked numbers and against scipy/statsmodels
directly, a planted drop found, a no-op variant showing nothing, and the first divergence."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.suites.variants import (
    CaseComparison,
    TurnDivergence,
    VariantReport,
    compare_variants,
    mcnemar_exact,
    paired_difference,
)
from tests.runtime.suites.router import ASSET, GOOD, write

# Ten paired conversations: d = B - A is 0 0 0 0 -1 -1 -1 0 0 1.
A = [True] * 8 + [False] * 2
B = [True, True, True, True, False, False, False, True, False, True]


def test_paired_difference_by_hand():
    difference, low, high = paired_difference(A, B)
    assert difference == pytest.approx(-0.2)
    # By hand: sum (d - mean)^2 = 4 - 10 * 0.04 = 3.6; the cluster-robust (CRV1) variance of the
    # coefficient is 3.6 / 10^2 times Stata's correction G/(G-1) * (N-1)/(N-K) = 10/9 * 19/18.
    se = math.sqrt(3.6 / 100 * 10 / 9 * 19 / 18)
    assert se == pytest.approx(0.205480, abs=1e-6)
    t = 2.262157  # t(0.975, 9 degrees of freedom), from a table
    assert low == pytest.approx(-0.2 - t * se, abs=1e-5)
    assert high == pytest.approx(-0.2 + t * se, abs=1e-5)
    # The same as the paired t interval, widened by sqrt((2N - 1) / (2N - 2)) from stacking both arms.
    d = np.array(B, float) - np.array(A, float)
    paired = stats.ttest_rel(np.array(B, float), np.array(A, float)).confidence_interval(0.95)
    widen = math.sqrt(19 / 18)
    assert low == pytest.approx(d.mean() - (d.mean() - paired.low) * widen, abs=1e-9)
    assert high == pytest.approx(d.mean() + (paired.high - d.mean()) * widen, abs=1e-9)


def test_paired_difference_is_statsmodels_clustered_by_conversation():
    rng = np.random.default_rng(7)
    a = list(rng.random(60) < 0.7)
    b = [x if rng.random() < 0.8 else not x for x in a]
    difference, low, high = paired_difference(a, b)
    y = np.array([*a, *b], float)
    fit = sm.OLS(y, sm.add_constant(np.r_[np.zeros(60), np.ones(60)])).fit(
        cov_type="cluster", cov_kwds={"groups": np.r_[np.arange(60), np.arange(60)]}, use_t=True)
    assert difference == pytest.approx(fit.params[1])
    assert (low, high) == pytest.approx(tuple(fit.conf_int(0.05)[1]))


def test_paired_difference_edges():
    assert paired_difference([True] * 5, [True] * 5) == (0.0, 0.0, 0.0)
    d, low, high = paired_difference([True], [False])
    assert d == -1.0 and math.isnan(low) and math.isnan(high)
    with pytest.raises(ValueError, match="paired outcomes"):
        paired_difference([True], [True, False])


def test_mcnemar_exact_by_hand_and_against_scipy():
    (a_only, b_only), p = mcnemar_exact(A, B)
    assert (a_only, b_only) == (3, 1)
    # By hand: two-sided exact binomial on 1 of 4 discordant pairs: 2 * (1 + 4) / 16 = 0.625.
    assert p == pytest.approx(0.625)
    assert p == pytest.approx(stats.binomtest(b_only, a_only + b_only, 0.5).pvalue)
    assert mcnemar_exact([True] * 4, [True] * 4) == ((0, 0), 1.0)
    # 20 of 200 conversations lost, none won: p = 2 * 0.5^20
    (a_only, b_only), p = mcnemar_exact([True] * 200, [i % 10 != 0 for i in range(200)])
    assert (a_only, b_only) == (20, 0) and p == pytest.approx(2 * 0.5**20)


def test_report_to_json():
    div = TurnDivergence("s::c", 0, 2, "reply", 3, "a b c d", "a b c e", "system: x", "system: x")
    report = VariantReport("a.json", "b.json", [CaseComparison("s::c", 10, 8, 6, 1, div)], 10, 1, 0.8, 0.6,
                           -0.2, -0.66, 0.26, (3, 1), 0.625, outcomes=[("s::c", 0, True, False)])
    data = report.to_json()
    assert data["discordant"] == {"a_only": 3, "b_only": 1}
    assert data["cases"][0]["first_divergence"]["token_index"] == 3
    assert data["cases"][0]["pass_rate_b"] == 0.6
    assert data["outcomes"] == [{"case": "s::c", "run": 0, "passed_a": True, "passed_b": False}]
    assert not data["significant"]
    nan = VariantReport("a", "b", [], 1, 0, 1.0, 0.0, -1.0, math.nan, math.nan, (1, 0), 1.0).to_json()
    assert nan["ci_low"] is None


# --- two arms on the scripted backend ----------------------------------------------------------------

CONVERSATIONS = 200
LINES = ["greet me please", "shop for a sword", "hello there, greet", "I want to shop for bread"]


def _many_cases(tmp_path: Path) -> Path:
    """A suite of 200 conversations, each expecting the classifier's route."""
    cases = []
    for i in range(CONVERSATIONS):
        line = f"{LINES[i % 4]} number {i}"
        intent = "greet" if "greet" in line else "shop"
        cases.append({"name": f"c{i:03}", "turns": [{"say": line, "expect": {"exits": {"classify": f"intent:{intent}"}}}]})
    return write(tmp_path, json.dumps({"asset": "router.json", "cases": cases}))


def _variant(tmp_path: Path) -> Path:
    """B: the same router, with a description on the shop intent (its classifier's prompt changes)."""
    b = json.loads(json.dumps(ASSET))
    b["nodes"][0]["intents"][1]["description"] = "buying things"
    path = tmp_path / "b.json"
    path.write_text(json.dumps(b), encoding="utf-8")
    return path


def _misrouting(chosen: set[int]):
    """Replies as the scripted backend's, but B's classifier (its prompt describes the shop intent)
    takes the other intent in the conversations ``chosen``."""
    def reply(key: str, request) -> str:
        text = default_reply(key, request)
        number = re.search(r"number (\d+)", request.messages[-1].content)
        if key == "classify" and "buying things" in request.messages[0].content and number and int(number[1]) in chosen:
            return "shop" if text == "greet" else "greet"
        return text
    return lambda: ScriptedBackend(reply)


def test_a_planted_ten_point_drop_is_found(tmp_path):
    chosen = set(random.Random(25).sample(range(CONVERSATIONS), CONVERSATIONS // 10))
    report = compare_variants(_many_cases(tmp_path), _variant(tmp_path), _misrouting(chosen), jobs=2)
    assert report.conversations == CONVERSATIONS
    assert report.pass_rate_a == 1.0 and report.pass_rate_b == pytest.approx(0.9)
    assert report.difference == pytest.approx(-0.1)
    assert report.discordant == (20, 0)
    assert report.mcnemar_p < 0.05 and report.significant
    assert report.mcnemar_p == pytest.approx(2 * 0.5**20)
    assert report.ci_low < -0.1 < report.ci_high < 0  # the interval holds -0.1 and excludes 0
    # Every conversation's classifier prompt differs (B describes the intent): every turn differs.
    assert report.differing_turns == CONVERSATIONS
    misrouted = [c for c in report.cases if c.passed_b < c.passed_a]
    assert sorted(int(c.case.rsplit("c", 1)[1]) for c in misrouted) == sorted(chosen)
    first = report.cases[0].first_divergence
    assert first is not None and (first.turn, first.node, first.part) == (1, "classify", "prompt")
    # The scripted backend's tokens are words: the first differs where B's prompt says ": buying things".
    words_a, words_b = first.prompt_a.split(), first.prompt_b.split()
    assert words_a[first.token_index] != words_b[first.token_index]
    assert words_a[:first.token_index] == words_b[:first.token_index]
    assert "buying things" in first.prompt_b and "buying things" not in first.prompt_a


def test_the_drop_is_not_found_when_it_is_not_there(tmp_path):
    """The same run with no conversation chosen: B's prompt differs, its outcomes do not."""
    report = compare_variants(_many_cases(tmp_path), _variant(tmp_path), _misrouting(set()))
    assert report.difference == 0 and report.discordant == (0, 0) and report.mcnemar_p == 1.0
    assert not report.significant


def test_a_no_op_variant_reports_no_difference(tmp_path):
    suite = write(tmp_path, GOOD)
    copy = tmp_path / "copy.json"
    shutil.copy(tmp_path / "router.json", copy)
    seen = []
    report = compare_variants(suite, copy, ScriptedBackend, repeat=3, on_case=lambda arm, r: seen.append(arm))
    assert sorted(seen) == ["A"] * 6 + ["B"] * 6
    assert report.conversations == 6 and report.differing_turns == 0
    assert (report.difference, report.ci_low, report.ci_high) == (0.0, 0.0, 0.0)
    assert report.discordant == (0, 0) and report.mcnemar_p == 1.0
    assert all(c.first_divergence is None and c.passed_a == c.passed_b == 3 for c in report.cases)
    assert report.asset_b.endswith("copy.json")
    assert [len(report.reports[arm].results) for arm in "AB"] == [6, 6]
    assert all(t.result is None for r in report.reports["B"].results for t in r.turns)  # kept small
    assert "reports" not in report.to_json()


def test_a_changed_reply_names_its_node_and_token(tmp_path):
    suite = write(tmp_path, GOOD)
    b = json.loads(json.dumps(ASSET))
    b["nodes"][1]["system_prompt"] = "Greet warmly."
    (tmp_path / "b.json").write_text(json.dumps(b), encoding="utf-8")
    report = compare_variants(suite, tmp_path / "b.json", ScriptedBackend)
    greets = next(c for c in report.cases if c.case.endswith("greets"))
    first = greets.first_divergence
    assert first is not None and (first.turn, first.node, first.part) == (1, "hello", "prompt")
    assert first.prompt_a.split()[first.token_index] == "Greet."
    assert first.prompt_b.split()[first.token_index] == "Greet"
    assert report.differing_turns == 2  # both cases end in the hello node


def test_a_variant_that_cannot_be_read_names_its_file(tmp_path):
    from runtime.problems import InputError

    suite = write(tmp_path, GOOD)
    with pytest.raises(InputError, match="no such asset file"):
        compare_variants(suite, tmp_path / "missing.json", ScriptedBackend)
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        compare_variants(suite, tmp_path / "bad.json", ScriptedBackend)
    assert "bad.json" in str(caught.value.problems[0])


# --- parley test SUITE --variant B.json -----------------------------------------------------------------


def _cli_files(tmp_path: Path) -> tuple[str, str]:
    b = json.loads(json.dumps(ASSET))
    b["nodes"][1]["system_prompt"] = "Greet warmly."
    (tmp_path / "b.json").write_text(json.dumps(b), encoding="utf-8")
    return str(write(tmp_path, GOOD)), str(tmp_path / "b.json")


def test_the_cli_prints_the_table_the_statistics_and_the_first_divergence(tmp_path, capsys):
    from runtime.cli import main

    suite, variant = _cli_files(tmp_path)
    out_json, page = tmp_path / "out.json", tmp_path / "out.html"
    code = main(["test", suite, "--variant", variant, "--backend", "scripted", "--repeat", "2",
                 "--json", str(out_json), "--report", str(page)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "A PASS router.suite.yaml::greets (run 2)" in printed and "B PASS router.suite.yaml::shops (run 1)" in printed
    assert re.search(r"router.suite.yaml::greets\s+2/2\s+2/2\s+2", printed)
    assert "difference B - A: +0.0 points (95 % CI +0.0 to +0.0, clustered by conversation)" in printed
    assert "McNemar exact: 0 passed on A only, 0 on B only: p = 1 (no significant difference)" in printed
    assert "differing turns: 4" in printed
    assert "first divergence of router.suite.yaml::greets: turn 1, node hello: prompt token 1" in printed
    assert "    system: Greet warmly." in printed and "    system: Greet." in printed
    data = json.loads(out_json.read_text(encoding="utf-8"))
    assert data["in_progress"] is False
    assert data["variant"]["differing_turns"] == 4 and data["variant"]["conversations"] == 4
    assert data["variant"]["cases"][0]["first_divergence"]["node"] == "hello"
    html = page.read_text(encoding="utf-8")
    assert 'id="variants"' in html and "4 paired conversations, 4 differing turns" in html


def test_the_cli_exits_1_when_the_variant_passes_significantly_fewer(tmp_path, capsys, monkeypatch):
    from runtime.backends import profiles
    from runtime.cli import main

    chosen = set(random.Random(25).sample(range(CONVERSATIONS), CONVERSATIONS // 10))
    suite, variant = _many_cases(tmp_path), _variant(tmp_path)
    made = _misrouting(chosen)
    real = profiles.backend_factory
    monkeypatch.setattr(profiles, "backend_factory",
                        lambda spec, *a, **k: made if spec == "scripted" else real(spec, *a, **k))
    code = main(["test", str(suite), "--variant", str(variant), "--backend", "scripted", "--jobs", "2"])
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert "McNemar exact: 20 passed on A only, 0 on B only: p = 1.91e-06 (B passes fewer than A)" in printed
    assert "difference B - A: -10.0 points" in printed
    assert "... and 180 more cases diverge (--json has them all)" in printed


@pytest.mark.parametrize(("extra", "says"), [
    (["--shard", "1/2"], "--shard does not go with --variant"),
    (["--junit", "out.xml"], "--junit does not go with --variant"),
    (["--min-coverage", "50"], "--min-coverage does not go with --variant"),
    (["--guided"], "--guided does not go with --variant"),
    (["--conversations", "2"], "--conversations: none of these suites has personas"),
])
def test_the_cli_refuses_flags_a_comparison_cannot_use(tmp_path, capsys, extra, says):
    from runtime.cli import main

    suite, variant = _cli_files(tmp_path)
    assert main(["test", suite, "--variant", variant, "--backend", "scripted", *extra]) == 2
    assert says in capsys.readouterr().err


def test_the_cli_refuses_a_missing_variant_and_two_suites(tmp_path, capsys):
    from runtime.cli import main

    suite, variant = _cli_files(tmp_path)
    assert main(["test", suite, "--variant", str(tmp_path / "nope.json"), "--backend", "scripted"]) == 2
    assert "nope.json: error: --variant: no such asset file" in capsys.readouterr().err
    assert main(["test", suite, suite, "--variant", variant, "--backend", "scripted"]) == 2
    assert "--variant compares one suite's asset with the variant; 2 suites were given" in capsys.readouterr().err


# --- on the sample model -----------------------------------------------------------------------------


ONE_TURN = """\
asset: {asset}
cases:
  - name: a room
    variables: {{player_name: Aldric}}
    turns:
      - say: "Good evening! Is there a room free tonight?"
        expect:
          path: [reply]
          reply: {{max_words: 90}}
"""


@pytest.mark.model
def test_on_the_sample_model_a_copy_differs_in_nothing_and_a_new_system_prompt_diverges(sample_model, tmp_path):
    """One turn of the chat example (few turns keep the model's time short), against a copy of its
    file; then, with shorter replies, against a variant whose system prompt says gruff, not warm."""
    from runtime.backends.llama import LlamaBackend
    from runtime.resources import examples_dir

    shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json")
    shutil.copy(examples_dir() / "chat.json", tmp_path / "copy.json")
    (tmp_path / "chat.suite.yaml").write_text(ONE_TURN.format(asset="chat.json"), encoding="utf-8")
    same = compare_variants(tmp_path / "chat.suite.yaml", tmp_path / "copy.json", LlamaBackend)
    assert same.conversations == 1 and same.differing_turns == 0, same.cases
    assert same.difference == 0 and same.discordant == (0, 0) and same.mcnemar_p == 1.0

    short = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
    short["nodes"][0]["max_tokens"] = 12
    (tmp_path / "short.json").write_text(json.dumps(short), encoding="utf-8")
    (tmp_path / "short.suite.yaml").write_text(ONE_TURN.format(asset="short.json"), encoding="utf-8")
    short["nodes"][0]["system_prompt"] = short["nodes"][0]["system_prompt"].replace("warm", "gruff")
    (tmp_path / "gruff.json").write_text(json.dumps(short), encoding="utf-8")
    report = compare_variants(tmp_path / "short.suite.yaml", tmp_path / "gruff.json", LlamaBackend)
    assert report.differing_turns == 1
    first = report.cases[0].first_divergence
    assert first is not None and (first.turn, first.node, first.part) == (1, "reply", "prompt")
    assert "warm" in first.prompt_a and "gruff" in first.prompt_b
    # The token is the model's: the prompts' tokens agree before it and part at it.
    backend = LlamaBackend()
    try:
        tokens_a = backend.tokenize(sample_model.name, first.prompt_a)
        tokens_b = backend.tokenize(sample_model.name, first.prompt_b)
    finally:
        backend.close()
    assert 0 < first.token_index < len(tokens_a)
    assert tokens_a[:first.token_index] == tokens_b[:first.token_index]
    assert tokens_a[first.token_index] != tokens_b[first.token_index]


def test_a_variant_may_be_an_asset_in_memory_and_the_suite_loaded_already(tmp_path):
    """As the editor compares: the asset being edited (not saved) against the suite's, loaded once."""
    from runtime.asset.file import load_asset
    from runtime.suites.file import load_suite

    loaded = load_suite(write(tmp_path, GOOD))
    same = compare_variants(loaded, load_asset(tmp_path / "router.json"), ScriptedBackend)
    assert same.differing_turns == 0 and same.asset_b == same.asset_a
    edited = load_asset(tmp_path / "router.json")
    edited.nodes[1].system_prompt = "Greet warmly."
    changed = compare_variants(loaded, edited, ScriptedBackend)
    assert changed.differing_turns == 2
    assert {c.first_divergence.node for c in changed.cases if c.first_divergence} == {"hello"}


PERSONAS = GOOD + """\
personas:
  - name: shopper
    description: "A traveller who wants to greet the keeper and shop."
    goals: [buy a sword]
    max_turns: 2
    conversations: 3
"""


def test_personas_play_both_arms_paired_by_conversation(tmp_path):
    """The suite's personas play A and B too, conversation #k on A paired with #k on B: a copy
    differs in nothing; a variant whose classifier takes the other intent diverges at the classifier."""
    suite = write(tmp_path, PERSONAS)
    shutil.copy(tmp_path / "router.json", tmp_path / "copy.json")
    same = compare_variants(suite, tmp_path / "copy.json", ScriptedBackend)
    shopper = next(c for c in same.cases if c.case.endswith("::persona shopper"))
    assert (shopper.runs, shopper.passed_a, shopper.passed_b, shopper.differing_turns) == (3, 3, 3, 0)
    assert same.conversations == 2 + 3 and same.differing_turns == 0

    def other_intent(key: str, request) -> str:
        text = default_reply(key, request)
        if key == "classify" and "buying things" in request.messages[0].content:
            return "shop" if text == "greet" else "greet"
        return text

    report = compare_variants(suite, _variant(tmp_path), lambda: ScriptedBackend(other_intent), conversations=2)
    shopper = next(c for c in report.cases if c.case.endswith("::persona shopper"))
    assert shopper.runs == 2 and shopper.differing_turns >= 2  # every conversation's first turn at least
    first = shopper.first_divergence
    assert first is not None and (first.run, first.turn, first.node) == (0, 1, "classify")
    assert [o[:2] for o in report.outcomes if "persona" in o[0]] == [("router.suite.yaml::persona shopper", 0),
                                                                     ("router.suite.yaml::persona shopper", 1)]
    assert len(compare_variants(suite, tmp_path / "copy.json", ScriptedBackend, personas=False).cases) == 2


def test_the_cli_plays_the_personas_on_both_arms(tmp_path, capsys):
    from runtime.cli import main

    suite = write(tmp_path, PERSONAS)
    shutil.copy(tmp_path / "router.json", tmp_path / "copy.json")
    code = main(["test", str(suite), "--variant", str(tmp_path / "copy.json"), "--backend", "scripted",
                 "--conversations", "2", "--player-backend", "scripted"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert re.search(r"router.suite.yaml::persona shopper\s+2/2\s+2/2\s+0", printed)
    assert "differing turns: 0" in printed
