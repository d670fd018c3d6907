"""The HTML report's content (``parley test --report``): every case with its Wilson interval, the
coverage graph coloured by visits with the nodes at their positions, variant deltas, each failure's
turn, check and prompt, and a page that references nothing outside itself."""

from __future__ import annotations

import copy
import html
import json
import math
import re
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.cli import main
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.html_report import MISSED, NEVER, FailurePrompts, node_color, report_html, wilson_interval
from runtime.suites.run import run_suites
from runtime.suites.variants import CaseComparison, TurnDivergence, VariantReport
from tests.runtime.suites.router import ASSET, GOOD, write

# The router laid out as on the canvas, and a node no exit leads to (it never runs).
PLACED = copy.deepcopy(ASSET)
for _node, _place in zip(PLACED["nodes"], ([0, 0], [640, 0], [320, 200])):
    _node["position"] = _place
PLACED["nodes"].append({"id": "orphan", "type": "GenerateAndSpeak", "title": "Never reached",
                        "position": [640, 260]})

# greets fails its reply check at turn 1; shops fails a conversation check after turn 1.
FAILING = (GOOD.replace("max_words: 30", "max_words: 1")
           .replace('      - at_turn: 1\n        reply: {contains: ["heard"]}',
                    '      - at_turn: 1\n        reply: {contains: ["a dragon"]}'))


def placed_router(tmp_path: Path, suite: str = FAILING) -> Path:
    return write(tmp_path, suite, PLACED)


def flaky_backend() -> ScriptedBackend:
    def reply(key, request):
        if request.json_schema is None and not request.choices and request.seed % 2:
            return "zebra heard greet please"  # an odd seed breaks not_contains
        return default_reply(key, request)

    return ScriptedBackend(reply)


def sample_variant() -> VariantReport:
    divergence = TurnDivergence(case="router.suite.yaml::greets", run=1, turn=1, node="hello", token_index=3,
                                text_a="hello heard greet", text_b="hello heard shop", prompt_a="system: Greet A",
                                prompt_b="system: Greet B <b>", part="prompt")
    return VariantReport(
        asset_a="router.json", asset_b="router_b.json",
        cases=[CaseComparison("router.suite.yaml::greets", 20, 18, 11, 9, divergence),
               CaseComparison("router.suite.yaml::shops", 20, 20, 20, 0, None)],
        conversations=40, differing_turns=9, pass_rate_a=0.95, pass_rate_b=0.775, difference=-0.175,
        ci_low=-0.31, ci_high=-0.04, discordant=(7, 0), mcnemar_p=0.015625)


def _page(tmp_path: Path, suite: str = FAILING, repeat: int = 4, **kwargs) -> tuple[str, object]:
    loaded = [load_suite(placed_router(tmp_path, suite))]
    prompts = FailurePrompts(loaded)
    report = run_suites(loaded, flaky_backend, repeat=repeat, on_turn=prompts.on_turn, keep_turn_results=False)
    return report_html(report, prompts=prompts, **kwargs), report


def _text(page: str) -> str:
    """The page's words, tags dropped and entities read."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _wilson(k: int, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    p = k / n
    centre, half = (p + z * z / (2 * n)), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def test_wilson_interval_is_the_score_interval() -> None:
    for k, n in ((0, 1), (1, 1), (2, 4), (57, 200)):
        low, high = wilson_interval(k, n)
        assert (low, high) == pytest.approx(_wilson(k, n), abs=1e-9)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_the_page_lists_every_case_with_its_pass_rate_and_interval(tmp_path) -> None:
    page, report = _page(tmp_path, GOOD)
    rates = report.pass_rates()
    assert rates == {"router.suite.yaml::greets": (2, 4), "router.suite.yaml::shops": (4, 4)}
    text = _text(page)
    for case, (ok, n) in rates.items():
        low, high = _wilson(ok, n)
        row = re.search(rf"{re.escape(case)}\s+{ok}/{n}\s+([\d.]+) %\s+([\d.]+) % \u2013 ([\d.]+) %", text)
        assert row, case
        assert float(row[1]) == pytest.approx(100 * ok / n, abs=0.05)
        assert (float(row[2]), float(row[3])) == pytest.approx((100 * low, 100 * high), abs=0.05)
    assert "flaky" in text and "all passed" in text
    # the chart: one dot with its interval a case, the case names on its axis
    chart = page[page.index('aria-label="rates"'):]
    chart = chart[:chart.index("</svg>")]
    assert len(re.findall(r'id="parley-rate-\d+"', chart)) == 2
    assert "router.suite.yaml::greets" in chart and "router.suite.yaml::shops" in chart


def test_each_failure_shows_its_turn_check_and_prompt(tmp_path) -> None:
    page, _ = _page(tmp_path, repeat=1)
    failures = page[page.index('id="failures"'):]
    text = _text(failures)
    assert "router.suite.yaml::greets" in text and "Turn 1" in text
    assert "\u201cgreet me please\u201d" in text  # the player's line
    assert "at most 1 words (has" in text  # the check that failed
    assert "The prompt of node hello as the model saw it" in text
    greets = text[text.index("router.suite.yaml::greets"):text.index("router.suite.yaml::shops")]
    assert "Greet." in greets and "Mood: grumpy" in greets  # the prompt: the system prompt and the template
    # a conversation-level check: the turn it read, and that turn's prompt
    shops = text[text.index("router.suite.yaml::shops"):]
    assert "After turn 1" in shops and "contains 'a dragon'" in shops
    assert "The prompt of node hello as the model saw it" in shops
    assert re.search(r"Failures\s+2\b", text)
    # a passing check is not listed as a failure
    assert "contains 'heard'" not in text
    # run 2's odd seed fails two checks of one turn (zebra, max_words): the prompt is shown once for it,
    # so once for each failing turn (greets' in 2 runs) and conversation check (shops' in 2 runs)
    page, _ = _page(tmp_path, repeat=2)
    assert "does not contain 'zebra'" in _text(page) and "at most 1 words" in _text(page)
    assert page.count("The prompt of node hello as the model saw it") == 4


def test_a_report_of_many_failures_stays_a_page_a_browser_opens(tmp_path, monkeypatch) -> None:
    """Issue 39: the report had no size cap (3,000 failing cases run 3 times: a 225 MB page). The failing
    runs shown in full, and the characters of each prompt, are capped, and the page says what it left out."""
    from runtime.suites import html_report

    monkeypatch.setattr(html_report, "MAX_FAILURES_SHOWN", 3)
    monkeypatch.setattr(html_report, "MAX_PROMPT_CHARS", 12)
    page, _ = _page(tmp_path, repeat=4)
    text = _text(page)
    assert page.count('class="failure"') == 3
    assert re.search(r"\d+ more failing runs are not shown in full \(the first 3 are above", text), text[-600:]
    assert "more characters not shown" in text


def test_failures_without_kept_prompts_say_so(tmp_path) -> None:
    loaded = [load_suite(placed_router(tmp_path))]
    report = run_suites(loaded, flaky_backend, keep_turn_results=False)
    text = _text(report_html(report))
    assert "the prompt was not kept" in text and "at most 1 words" in text


def _group(page: str, gid: str) -> str:
    start = page.index(f'id="{gid}"')
    return page[start:page.index("</g>", start)]


def _fill(group: str) -> str:
    return re.search(r"fill: (#[0-9a-f]{6})", group)[1]


def test_the_graph_is_coloured_by_visits_with_the_nodes_at_their_positions(tmp_path) -> None:
    page, report = _page(tmp_path, GOOD, repeat=2)
    coverage = next(iter(report.coverage.values()))
    assert coverage.visits == {"classify": 4, "hello": 4, "tools": 2}
    fills = {n: _fill(_group(page, f"parley-graph0-node-{n}")) for n in ("classify", "hello", "tools", "orphan")}
    assert fills == {n: node_color(coverage, n) for n in fills}
    assert fills["classify"] == fills["hello"] != fills["tools"]
    assert fills["orphan"] == NEVER
    # the most visited is the darkest
    def lightness(color: str) -> int:
        return sum(int(color[i:i + 2], 16) for i in (1, 3, 5))
    assert lightness(fills["hello"]) < lightness(fills["tools"]) < lightness(NEVER)
    # each box starts at its node's position: classify left of tools left of hello; orphan below hello
    corner = {n: tuple(map(float, re.search(r"M ([\d.]+) ([\d.]+)", _group(page, f"parley-graph0-node-{n}")).groups()))
              for n in fills}
    assert corner["classify"][0] < corner["tools"][0] < corner["hello"][0]
    assert corner["hello"][1] < corner["tools"][1] < corner["orphan"][1]
    # an exit never taken is dashed and red; one taken is labelled with its count
    never = _group(page, "parley-graph0-exit-classify.fallback_exit")
    assert MISSED.lower() in never.lower() and "stroke-dasharray" in never
    assert "stroke-dasharray" not in _group(page, "parley-graph0-exit-classify.intent:greet")
    graph = page[page.index('aria-label="graph0"'):]
    graph = graph[:graph.index("</svg>")]
    assert "greet: 2" in graph and "fallback: never" in graph and "never ran" in graph
    assert "times the node ran" in graph  # the colour bar


def test_nodes_at_one_place_are_laid_out_by_distance_from_the_start(tmp_path) -> None:
    loaded = [load_suite(write(tmp_path, GOOD))]  # the router has no positions: every node at (0, 0)
    page = report_html(run_suites(loaded, ScriptedBackend))
    corner = {n: tuple(map(float, re.search(r"M ([\d.]+) ([\d.]+)", _group(page, f"parley-graph0-node-{n}")).groups()))
              for n in ("classify", "hello", "tools")}
    assert len(set(corner.values())) == 3
    assert corner["classify"][0] < corner["tools"][0] < corner["hello"][0]


def test_variant_deltas_are_shown_with_the_first_divergence_and_both_prompts(tmp_path) -> None:
    page, _ = _page(tmp_path, GOOD, variant=sample_variant())
    section = page[page.index('id="variants"'):page.index('id="failures"')]
    text = _text(section)
    assert "router.json" in text and "router_b.json" in text
    assert "95.0 %" in text and "77.5 %" in text and "-17.5 points" in text and "-31.0 points to -4.0 points" in text
    assert "7 / 0" in text and "0.01562" in text and "B differs from A" in text
    assert re.search(r"router\.suite\.yaml::greets\s+20\s+18\s+11\s+9\s+turn 1, node hello", text)
    assert re.search(r"router\.suite\.yaml::shops\s+20\s+20\s+20\s+0\s+none", text)
    assert 'href="#divergence-0"' in section and 'id="divergence-0"' in section
    assert 'id="divergence-0-prompt-a"' in section and 'id="divergence-0-prompt-b"' in section
    assert "system: Greet A" in text and "system: Greet B <b>" in text  # escaped, shown as written
    assert "<b>\n" not in section and "Greet B &lt;b&gt;" in section
    assert "run 2" in text and "token 3" in text and "the prompt parts" in text
    assert 'aria-label="variant"' in section  # the chart of the deltas
    assert 'href="#variants"' in page
    assert 'id="variants"' not in _page(tmp_path, GOOD)[0]


def test_the_page_references_nothing_outside_itself(tmp_path) -> None:
    page, _ = _page(tmp_path, variant=sample_variant())
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"<(script|link|iframe|object|embed)\b", page, re.IGNORECASE)
    assert not re.search(r"https?:|ftp:|file:|//[a-z]", page, re.IGNORECASE)  # no URL at all, not even a namespace's
    for ref in re.findall(r'(?:href|src)="([^"]*)"', page):
        assert ref.startswith(("#", "data:")), ref
    for ref in re.findall(r"url\(([^)]*)\)", page):
        assert ref.startswith("#"), ref
    # the ids matplotlib gave each chart are unique across the page, and every reference finds its id
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', page):
        assert ref in ids, ref


def test_what_a_case_or_reply_holds_is_shown_escaped(tmp_path) -> None:
    hostile = GOOD.replace("name: greets", 'name: "<script>alert(1)</script> \\x1b[31m"')
    loaded = [load_suite(placed_router(tmp_path, hostile.replace("max_words: 30", "max_words: 1")))]
    prompts = FailurePrompts(loaded)
    page = report_html(run_suites(loaded, ScriptedBackend, on_turn=prompts.on_turn, keep_turn_results=False),
                       prompts=prompts)
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\x1b[31m" in page


def test_parley_test_writes_the_report(tmp_path, capsys) -> None:
    suite = placed_router(tmp_path)
    out = tmp_path / "report.html"
    assert main(["test", str(suite), "--backend", "scripted", "--repeat", "2", "--report", str(out)]) == 1
    page = out.read_text(encoding="utf-8")
    assert "router.suite.yaml::greets" in page and "0/2" in _text(page) and "at most 1 words" in _text(page)
    assert "The prompt of node hello as the model saw it" in page  # the CLI keeps each failure's prompt
    assert page.count("The prompt of node hello as the model saw it") == 4  # greets' turn and shops' check, twice
    assert 'aria-label="graph0"' in page
    # same file twice, a folder that does not exist: refused before the run, nothing written
    again = tmp_path / "again.html"
    assert main(["test", str(suite), "--backend", "scripted", "--report", str(again), "--json", str(again)]) == 2
    assert "--json and --report name the same file" in capsys.readouterr().err
    assert not again.exists()
    assert main(["test", str(suite), "--backend", "scripted", "--report", str(tmp_path / "no" / "r.html")]) == 2
    assert "cannot write the HTML report" in capsys.readouterr().err


def test_a_run_that_cannot_finish_leaves_the_in_progress_page(tmp_path, monkeypatch) -> None:
    import runtime.suites.run as run_module

    suite = placed_router(tmp_path, GOOD)
    out = tmp_path / "report.html"
    out.write_text("the previous run's report", encoding="utf-8")

    def killed(*args, **kwargs):
        assert "has not finished" in out.read_text(encoding="utf-8")  # written before the run starts
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "run_suites", killed)
    assert main(["test", str(suite), "--backend", "scripted", "--report", str(out)]) == 130  # Ctrl+C
    assert "has not finished" in out.read_text(encoding="utf-8")


@pytest.mark.model
def test_the_chat_example_on_the_sample_model_writes_its_report(sample_model, tmp_path) -> None:
    out = tmp_path / "chat.html"
    code = main(["test", str(examples_dir() / "chat.suite.yaml"), "--report", str(out), "--json",
                 str(tmp_path / "chat.json")])
    data = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
    assert code == (0 if data["passed"] else 1)
    page = out.read_text(encoding="utf-8")
    text = _text(page)
    assert "chat.suite.yaml::answers in a few sentences" in text
    assert ("all passed" if data["passed"] else "never passed") in text
    assert 'id="parley-graph0-node-reply"' in page and "2 visits" in page  # two turns, each through reply
    assert _fill(_group(page, "parley-graph0-node-reply")) != NEVER
    assert not re.search(r"https?:", page)


def test_parley_test_with_a_variant_writes_the_deltas(tmp_path) -> None:
    suite = placed_router(tmp_path, GOOD)
    variant = tmp_path / "copy.json"
    variant.write_text((tmp_path / "router.json").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["test", str(suite), "--backend", "scripted", "--repeat", "2", "--variant", str(variant),
                 "--report", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    section = _text(page[page.index('id="variants"'):page.index('id="failures"')])
    assert "copy.json" in section and "4 paired conversations, 0 differing turns" in section
    assert "no significant difference" in section
    assert 'aria-label="graph0"' in page and 'aria-label="variant"' in page  # A's coverage and the deltas
