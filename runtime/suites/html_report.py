"""The HTML report of a suite run (``parley test --report OUT.html``): one self-contained page to look at.

- each case's pass rate with its 95 % Wilson interval (statsmodels), as a chart and a table;
- coverage of each asset as its graph, the nodes at their canvas positions coloured by how often
  they ran and each exit labelled with the times it was taken (never taken: dashed, red);
- variant deltas when the run compared the asset with a variant (``runtime.suites.variants``):
  each case's pass rate on A and B, the paired difference with its interval, McNemar's p, and
  each case's first divergence with both prompts;
- for each failure, the turn, the check and the prompt of the node it is about.

The charts are drawn by matplotlib as SVG and written into the page; the page holds no script and
fetches nothing (its Content-Security-Policy forbids every load but inline styles and data: images),
so it opens the same from a CI artifact, a mail attachment or a machine with the network off.
"""

from __future__ import annotations

import html
import io
import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.asset.model import Asset
from runtime.suites.report import Coverage, Report, TurnOutcome, wilson_interval, xml_safe

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from runtime.suites.file import LoadedSuite
    from runtime.suites.redteam import RedTeamReport
    from runtime.suites.variants import VariantReport

# The page loads nothing: a reference to anything outside it would be blocked (and logged).
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# Cases drawn in one chart (the table lists every case): the lowest pass rates first.
MAX_CHART_CASES = 60
# Failing runs of one case shown in full (a flaky case repeated 200 times would fill the page).
MAX_FAILED_RUNS = 5
# Failing runs shown in full in the whole report, and characters of one prompt shown: 3,000 failing
# cases run 3 times made a 225 MB page (1.7 GB to write). The table above lists every case anyway.
MAX_FAILURES_SHOWN = 200
MAX_PROMPT_CHARS = 20_000
# Nodes are drawn this size, in canvas units, with their top-left corner at the asset's position.
NODE_WIDTH, NODE_HEIGHT = 220.0, 90.0
NEVER = "#d9d9d9"  # a node that never ran
MISSED = "#c0392b"  # an exit never taken, a case that never passed
COLOR_MAP = "YlGnBu"  # visits: light (few) to dark (many)


# --- the prompts of failing turns ------------------------------------------------------------------


@dataclass
class KeptPrompt:
    """A node's prompt as the model saw it: (role, content) a message."""

    node: str
    messages: list[tuple[str, str]]


class FailurePrompts:
    """Keeps, as a run goes (pass ``on_turn`` to ``run_suites``), the prompts of the turns that
    failed and of the turns a conversation-level check reads: the run drops each turn's runtime
    result once checked (``keep_turn_results=False``), and the report shows the prompt of each failure."""

    def __init__(self, loaded: list[LoadedSuite]) -> None:
        self._checked_turns = {s.case_id(c): {e.at_turn for e in c.expect} for s in loaded for c in s.suite.cases}
        self._kept: dict[int, tuple[TurnOutcome, list[KeptPrompt]]] = {}  # id(outcome) -> (outcome, prompts)
        self._lock = threading.Lock()

    def on_turn(self, case_id: str, outcome: TurnOutcome) -> None:
        result = outcome.result
        if result is None or result.diagnostics is None:
            return
        if outcome.passed and outcome.number not in self._checked_turns.get(case_id, ()):
            return
        prompts = [KeptPrompt(d.node, [(m.role + (f" ({m.name})" if m.name else ""), m.content)
                                       for m in d.input.prompt])
                   for d in result.diagnostics.nodes if d.input.prompt]
        with self._lock:  # the outcome is held too, so its id is never another's
            self._kept[id(outcome)] = (outcome, prompts)

    def of(self, outcome: TurnOutcome) -> list[KeptPrompt] | None:
        """The prompts of ``outcome``'s turn, in the order the nodes ran; None when none was kept."""
        kept = self._kept.get(id(outcome))
        return kept[1] if kept is not None and kept[0] is outcome else None


def _prompt_for(prompts: list[KeptPrompt] | None, node: str) -> KeptPrompt | None:
    """The prompt of ``node`` (the node a check is about), else of the last node that read one (the reply's)."""
    if not prompts:
        return None
    return next((p for p in prompts if p.node == node), None) or prompts[-1]


# --- charts -----------------------------------------------------------------------------------------

_XMLNS = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_IDS = re.compile(r'\bid="([^"]+)"')


def _svg(figure: Figure, prefix: str) -> str:
    """``figure`` as an SVG element to write into HTML: no XML prolog, metadata or namespace URIs (the
    HTML parser supplies SVG's), and matplotlib's element ids prefixed so two charts never share one
    (ids set as ``gid`` that start with ``parley-`` are kept: tests and links find them)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "parley"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    text = _XMLNS.sub("", text).replace("xlink:href=", "href=")
    ids = {i for i in _IDS.findall(text) if not i.startswith("parley-")}
    if ids:
        pattern = re.compile(r'(\bid="|href="#|url\(#)(' + "|".join(map(re.escape, sorted(ids, key=len, reverse=True)))
                             + r')(?=[")])')
        text = pattern.sub(lambda m: f"{m[1]}{prefix}-{m[2]}", text)
    return text.replace("<svg ", f'<svg class="chart" role="img" aria-label="{prefix}" ', 1)


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=96, layout="constrained")
    return figure


def _short(text: str, limit: int) -> str:
    """``text`` to draw in a chart: controls as their escapes (no font has them), cut to ``limit`` characters."""
    text = xml_safe(text)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def pass_rate_chart(rates: list[tuple[str, int, int]]) -> Figure:
    """Each case's pass rate (``(case, passed, runs)``) as a dot with its Wilson interval, lowest first."""
    shown = sorted(rates, key=lambda r: (r[1] / r[2] if r[2] else 0, r[0]))[:MAX_CHART_CASES]
    figure = _figure(8.0, 0.9 + 0.32 * len(shown))
    axes = figure.add_subplot()
    for row, (case, passed, runs) in enumerate(reversed(shown)):
        rate = passed / runs if runs else 0.0
        low, high = wilson_interval(passed, runs)
        color = "#1e8449" if passed == runs else MISSED if passed == 0 else "#d68910"
        dot, _, _ = axes.errorbar([100 * rate], [row], xerr=[[100 * max(0.0, rate - low)], [100 * max(0.0, high - rate)]], fmt="o",
                                  color=color, ecolor=color, capsize=3, markersize=6)
        dot.set_gid(f"parley-rate-{row}")
    axes.set_yticks(range(len(shown)), [_short(c, 48) for c, _, _ in reversed(shown)], fontsize=8)
    axes.set_xlim(-2, 102)
    axes.set_ylim(-0.7, len(shown) - 0.3)
    axes.set_xlabel("pass rate, % (bars: 95 % Wilson interval)")
    axes.grid(axis="x", color="#eeeeee")
    axes.set_axisbelow(True)
    return figure


def attack_chart(report: RedTeamReport) -> Figure:
    """Each attack family's success rate as a bar with its Wilson interval as a whisker, and the
    threshold as a dashed line: a bar past it failed the run."""
    shown = report.families
    figure = _figure(8.0, 0.9 + 0.36 * max(1, len(shown)))
    axes = figure.add_subplot()
    for row, family in enumerate(reversed(shown)):
        rate = family.success.rate if family.success.attempts else 0.0
        low, high = family.success.interval
        color = MISSED if rate > report.max_success else "#1e8449"
        bars = axes.barh([row], [100 * rate], color=color, height=0.6)
        bars[0].set_gid(f"parley-attack-{row}")
        axes.errorbar([100 * rate], [row], xerr=[[100 * max(0.0, rate - low)], [100 * max(0.0, high - rate)]],
                      fmt="none", ecolor="#1b2631", capsize=3)
    axes.axvline(100 * report.max_success, color="#7b8a8b", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(shown)), [_short(f.name, 32) for f in reversed(shown)], fontsize=8)
    axes.set_xlim(0, 100)
    axes.set_ylim(-0.7, len(shown) - 0.3)
    axes.set_xlabel("attack success, % (whiskers: 95 % Wilson interval; dashed: the threshold)")
    axes.grid(axis="x", color="#eeeeee")
    axes.set_axisbelow(True)
    return figure


def _color(visits: int, most: int) -> tuple[float, float, float, float] | str:
    if not visits:
        return NEVER
    from matplotlib import colormaps

    return colormaps[COLOR_MAP](0.25 + 0.75 * (visits / most if most else 1.0))


def node_color(coverage: Coverage, node: str) -> str:
    """The colour ``node`` is drawn in on the coverage graph, as #rrggbb (``NEVER`` for a node that never ran)."""
    from matplotlib.colors import to_hex

    most = max((coverage.visits.get(n.id, 0) for n in coverage.asset.nodes), default=0)
    return to_hex(_color(coverage.visits.get(node, 0), most))


def _places(asset: Asset) -> dict[str, tuple[float, float]]:
    """Each node's top-left corner: its canvas position; when two nodes share one (an asset written by
    hand, never laid out), columns by the exits' distance from the start node instead."""
    places = {n.id: (float(n.position[0]), float(n.position[1])) for n in asset.nodes}
    if len(set(places.values())) == len(places):
        return places
    exits = {n.id: [t for t in n.exits().values() if t in places] for n in asset.nodes}
    # The longest way from the start (capped: a loop would lengthen it for ever), so each exit points right.
    depth = {asset.start_node: 0} if asset.start_node in exits else {}
    for _ in range(len(places)):
        moved = False
        for node, targets in exits.items():
            for target in targets:
                if node in depth and target != asset.start_node and depth.get(target, -1) < depth[node] + 1 < len(places):
                    depth[target], moved = depth[node] + 1, True
        if not moved:
            break
    last = max(depth.values(), default=-1) + 1
    rows: Counter = Counter()
    for node in asset.nodes:
        column = depth.setdefault(node.id, last)
        places[node.id] = (column * (NODE_WIDTH + 110), rows[column] * (NODE_HEIGHT + 60))
        rows[column] += 1
    return places


def coverage_graph(coverage: Coverage, index: int = 0) -> Figure:
    """The asset's graph with each node at its canvas position, coloured by its visits, and each exit
    an arrow labelled with the times it was taken (dashed and red when never). A node's group in the
    SVG has the gid ``parley-graph{index}-node-{id}``, an exit's ``parley-graph{index}-exit-{id}.{port}``."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    nodes = coverage.asset.nodes
    places = _places(coverage.asset)
    xs = [x for x, _ in places.values()] or [0.0]
    ys = [y for _, y in places.values()] or [0.0]
    left, right = min(xs) - 40, max(xs) + NODE_WIDTH + 120
    top, bottom = min(ys) - 40, max(ys) + NODE_HEIGHT + 40
    span_x, span_y = right - left, bottom - top
    scale = min(11.0 / span_x, 9.0 / span_y, 1 / 90)  # inches per canvas unit
    figure = _figure(max(5.0, span_x * scale + 1.4), max(2.2, span_y * scale + 0.6))
    axes = figure.add_subplot()
    axes.set_xlim(left, right)
    axes.set_ylim(bottom, top)  # the canvas's y grows downwards
    axes.set_aspect("equal")
    axes.axis("off")
    most = max((coverage.visits.get(n.id, 0) for n in nodes), default=0)
    for node in nodes:
        x, y = places[node.id]
        visits, bypassed = coverage.visits.get(node.id, 0), coverage.bypassed.get(node.id, 0)
        fill = _color(visits, most)
        box = FancyBboxPatch((x, y), NODE_WIDTH, NODE_HEIGHT, boxstyle="round,pad=0,rounding_size=10",
                             facecolor=fill, edgecolor=MISSED if not visits else "#34495e",
                             linestyle="--" if not visits else "-", linewidth=1.4, hatch="//" if bypassed else None,
                             gid=f"parley-graph{index}-node-{node.id}")
        axes.add_patch(box)
        dark = visits and most and visits / most > 0.55
        ink = "white" if dark else "#1b2631"
        title = getattr(node, "title", "") or node.id
        said = f"{visits} visit{'s' if visits != 1 else ''}" + (f", {bypassed} bypassed" if bypassed else "")
        axes.text(x + 10, y + 24, _short(title, 26), fontsize=8.5, fontweight="bold", color=ink, va="center")
        axes.text(x + 10, y + 46, _short(f"{node.id} \u00b7 {node.type}", 30), fontsize=7, color=ink, va="center")
        axes.text(x + 10, y + 70, said if visits or bypassed else "never ran", fontsize=7.5, color=ink, va="center")
    for node in nodes:
        x, y = places[node.id]
        ports = list(node.exits().items())
        for k, (port, target) in enumerate(ports):
            start = (x + NODE_WIDTH, y + NODE_HEIGHT * (k + 1) / (len(ports) + 1))
            times = coverage.exits.get((node.id, port), 0)
            if target in places:
                tx, ty = places[target]
                end = (tx, ty + NODE_HEIGHT / 2)
                backwards = end[0] <= start[0]
                style = f"arc3,rad={0.45 if backwards else 0.08}"
            else:  # '' is END; a target that is gone too (validation names it)
                end = (start[0] + 70, start[1])
                style = "arc3,rad=0"
                axes.text(end[0] + 4, end[1], "END" if not target else f"{target}?", fontsize=7, va="center",
                          color="#566573")
            arrow = FancyArrowPatch(start, end, connectionstyle=style, arrowstyle="-|>", mutation_scale=11,
                                    color="#2c3e50" if times else MISSED, linestyle="-" if times else "--",
                                    linewidth=1.0 + min(3.0, math.log10(times + 1) * 1.5) if times else 1.0,
                                    shrinkA=0, shrinkB=2, gid=f"parley-graph{index}-exit-{node.id}.{port}")
            axes.add_patch(arrow)
            label = f"{_short(node.exit_label(port), 18)}: {times}" if times else f"{_short(node.exit_label(port), 18)}: never"
            lx = start[0] + (end[0] - start[0]) * 0.35 if target in places else start[0] + 6
            ly = start[1] + (end[1] - start[1]) * 0.35 - 6
            axes.text(lx, ly, label, fontsize=7, color="#2c3e50" if times else MISSED,
                      bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
    if most:
        from matplotlib import colormaps

        bar = figure.colorbar(ScalarMappable(Normalize(0, most), colormaps[COLOR_MAP]), ax=axes, shrink=0.6,
                              pad=0.01, aspect=25)
        bar.set_label("times the node ran", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    return figure


def variant_chart(variant: VariantReport) -> Figure:
    """Each case's pass rate on A and on B (Wilson intervals), joined by a line: the per-case deltas."""
    shown = sorted(variant.cases, key=lambda c: (-abs(c.passed_b - c.passed_a) / (c.runs or 1), c.case))
    shown = shown[:MAX_CHART_CASES]
    figure = _figure(8.0, 1.2 + 0.36 * len(shown))
    axes = figure.add_subplot()
    for row, case in enumerate(reversed(shown)):
        rate_a, rate_b = case.pass_rate_a, case.pass_rate_b
        axes.plot([100 * rate_a, 100 * rate_b], [row, row], color="#aab7b8", linewidth=2, zorder=1)
        for rate, passed, offset, color, arm in ((rate_a, case.passed_a, 0.12, "#5d6d7e", "A"),
                                                  (rate_b, case.passed_b, -0.12, "#8e44ad", "B")):
            low, high = wilson_interval(passed, case.runs)
            axes.errorbar([100 * rate], [row + offset], xerr=[[100 * max(0.0, rate - low)], [100 * max(0.0, high - rate)]],
                          fmt="o" if arm == "A" else "s", color=color, ecolor=color, capsize=2, markersize=5,
                          label=arm if row == 0 else None, zorder=2)
    axes.set_yticks(range(len(shown)), [_short(c.case, 48) for c in reversed(shown)], fontsize=8)
    axes.set_xlim(-2, 102)
    axes.set_ylim(-0.7, len(shown) - 0.3)
    axes.set_xlabel("pass rate, % (A: circles, B: squares; bars: 95 % Wilson interval)")
    axes.grid(axis="x", color="#eeeeee")
    axes.set_axisbelow(True)
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)  # beside, over no case
    return figure


# --- the page ---------------------------------------------------------------------------------------

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1b2631;background:#f7f9fa}
header{background:#1b2631;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:22px} header p{margin:2px 0;color:#d5dbdb}
nav{padding:8px 28px;background:#eaeef0;font-size:13px} nav a{margin-right:16px;color:#1f618d}
main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border:1px solid #dfe4e6;border-radius:8px;padding:14px 20px;margin:18px 0}
h2{font-size:18px;margin:4px 0 10px} h3{font-size:15px;margin:14px 0 6px}
table{border-collapse:collapse;margin:8px 0;font-size:13px} th,td{border-bottom:1px solid #e5e8e8;padding:4px 10px;text-align:left;vertical-align:top}
th{background:#f2f4f4} td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1e8449;font-weight:600} .fail{color:#c0392b;font-weight:600} .flaky{color:#b9770e;font-weight:600}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;background:#eaeef0;margin-left:6px}
svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}
.failure{border-left:4px solid #c0392b;padding:4px 12px;margin:12px 0;background:#fdf2f1}
.turn{margin:6px 0 10px} .said{color:#566573}
pre{white-space:pre-wrap;word-break:break-word;background:#f4f6f6;border:1px solid #e5e8e8;border-radius:4px;padding:8px;max-height:420px;overflow:auto;font-size:12px}
.msg{margin:0 0 6px} .role{font-weight:600;color:#1f618d}
details{margin:4px 0} summary{cursor:pointer;color:#1f618d}
.prompts{display:grid;grid-template-columns:1fr 1fr;gap:12px;align-items:start}
.muted{color:#7b8a8b}
"""


def _e(text: object) -> str:
    """``text`` escaped for HTML, each character a page cannot hold (controls, lone surrogates) as its escape."""
    return html.escape(xml_safe(str(text)))


def _percent(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"


def _points(x: float) -> str:
    """A difference of pass rates in percentage points, signed."""
    return "n/a" if math.isnan(x) else f"{100 * x:+.1f} points"


def _prompt_html(prompt: KeptPrompt | None, why_missing: str) -> str:
    if prompt is None:
        return f'<p class="muted">{_e(why_missing)}</p>'
    left = MAX_PROMPT_CHARS
    shown = []
    for role, content in prompt.messages:
        cut = content[:max(left, 0)]
        left -= len(content)
        more = f' <span class="muted">[{len(content) - len(cut):,} more characters not shown]</span>' \
            if len(cut) < len(content) else ""
        shown.append(f'<div class="msg"><span class="role">{_e(role)}:</span> {_e(cut)}{more}</div>')
    body = "".join(shown)
    return (f"<details><summary>The prompt of node {_e(prompt.node)} as the model saw it "
            f"({len(prompt.messages)} message{'s' if len(prompt.messages) != 1 else ''})</summary>"
            f"<pre>{body}</pre></details>")


def _rates_section(report: Report) -> str:
    rates = report.pass_rates()
    rows = []
    for case, (ok, n) in sorted(rates.items()):
        low, high = wilson_interval(ok, n)
        mark = ("pass", "all passed") if ok == n else ("fail", "never passed") if ok == 0 else ("flaky", "flaky")
        rows.append(f'<tr><td>{_e(case)}</td><td class="n">{ok}/{n}</td><td class="n">{_percent(ok / n)}</td>'
                    f'<td class="n">{_percent(low)} \u2013 {_percent(high)}</td>'
                    f'<td class="{mark[0]}">{mark[1]}</td></tr>')
    chart = _svg(pass_rate_chart([(c, ok, n) for c, (ok, n) in rates.items()]), "rates")
    more = (f'<p class="muted">The chart shows the {MAX_CHART_CASES} lowest pass rates of {len(rates)} cases; '
            "the table lists every case.</p>" if len(rates) > MAX_CHART_CASES else "")
    return (f'<section id="pass-rates"><h2>Pass rate per case</h2>{chart}{more}'
            "<table><tr><th>Case</th><th>Passed</th><th>Rate</th><th>95 % interval (Wilson)</th><th></th></tr>"
            f'{"".join(rows)}</table></section>')


def _coverage_section(report: Report) -> str:
    parts = ['<section id="coverage"><h2>Coverage</h2>']
    for index, (path, coverage) in enumerate(report.coverage.items()):
        parts.append(f'<h3>{_e(path)} <span class="badge">{coverage.percent:.0f} % of nodes and exits</span></h3>')
        parts.append(_svg(coverage_graph(coverage, index), f"graph{index}"))
        rows = "".join(
            f'<tr><td>{_e(n.id)}</td><td>{_e(getattr(n, "title", ""))}</td><td class="n">{coverage.visits.get(n.id, 0)}</td>'
            f'<td class="n">{coverage.bypassed.get(n.id, 0) or ""}</td></tr>' for n in coverage.asset.nodes)
        exits = "".join(
            f'<tr><td>{_e(node)}.{_e(port)}</td><td class="n {"" if coverage.exits.get((node, port)) else "fail"}">'
            f'{coverage.exits.get((node, port), 0) or "never"}</td></tr>' for node, port in coverage.all_exits)
        parts.append('<div class="prompts"><table><tr><th>Node</th><th>Title</th><th>Ran</th><th>Bypassed</th></tr>'
                     f'{rows}</table><table><tr><th>Exit</th><th>Taken</th></tr>{exits}</table></div>')
    parts.append("</section>")
    return "".join(parts)


def _variant_section(variant: VariantReport) -> str:
    a_only, b_only = variant.discordant
    verdict = ("B differs from A (McNemar p < 0.05)" if variant.mcnemar_p < 0.05
               else "no significant difference (McNemar p \u2265 0.05)")
    summary = (
        f'<p>A: <b>{_e(variant.asset_a)}</b> \u2014 B: <b>{_e(variant.asset_b)}</b>; '
        f"{variant.conversations} paired conversations, {variant.differing_turns} differing turn"
        f"{'s' if variant.differing_turns != 1 else ''}.</p>"
        "<table><tr><th>Pass rate A</th><th>Pass rate B</th><th>B \u2212 A</th><th>95 % interval "
        "(clustered by conversation)</th><th>Passed on A only / B only</th><th>McNemar exact p</th></tr>"
        f'<tr><td class="n">{_percent(variant.pass_rate_a)}</td><td class="n">{_percent(variant.pass_rate_b)}</td>'
        f'<td class="n">{_points(variant.difference)}</td>'
        f'<td class="n">{_points(variant.ci_low)} to {_points(variant.ci_high)}</td>'
        f'<td class="n">{a_only} / {b_only}</td><td class="n">{variant.mcnemar_p:.4g}</td></tr></table>'
        f'<p class="{"fail" if variant.mcnemar_p < 0.05 else "pass"}">{verdict}</p>')
    rows, divergences = [], []
    for index, case in enumerate(variant.cases):
        first = case.first_divergence
        link = f'<a href="#divergence-{index}">turn {first.turn}, node {_e(first.node or "(path)")}</a>' if first else "none"
        rows.append(f'<tr><td>{_e(case.case)}</td><td class="n">{case.runs}</td><td class="n">{case.passed_a}</td>'
                    f'<td class="n">{case.passed_b}</td><td class="n">{case.differing_turns}</td><td>{link}</td></tr>')
        if first:
            part = getattr(first, "part", "output")
            divergences.append(
                f'<div class="failure" id="divergence-{index}"><b>{_e(case.case)}</b>, run {first.run + 1}, '
                f"turn {first.turn}, node {_e(first.node or '(the path differs first)')}: the {_e(part)} "
                f"parts at token {first.token_index}."
                f'<table><tr><th>A</th><th>B</th></tr><tr><td>{_e(first.text_a)}</td><td>{_e(first.text_b)}</td></tr>'
                "</table><div class=\"prompts\">"
                f'<div id="divergence-{index}-prompt-a"><details><summary>Prompt on A</summary><pre>{_e(first.prompt_a)}'
                f'</pre></details></div><div id="divergence-{index}-prompt-b"><details><summary>Prompt on B</summary>'
                f"<pre>{_e(first.prompt_b)}</pre></details></div></div></div>")
    chart = _svg(variant_chart(variant), "variant") if variant.cases else ""
    return (f'<section id="variants"><h2>Variant deltas</h2>{summary}{chart}'
            "<table><tr><th>Case</th><th>Runs</th><th>Passed on A</th><th>Passed on B</th><th>Differing turns</th>"
            f'<th>First divergence</th></tr>{"".join(rows)}</table>{"".join(divergences)}</section>')


ARROW = " \u2192 "


def _interval_text(rate) -> str:
    low, high = rate.interval
    return f"{_percent(low)} \u2013 {_percent(high)}"


def _red_team_section(reports: list[RedTeamReport]) -> str:
    parts = ['<section id="red-team"><h2>Red team</h2>']
    for index, report in enumerate(reports):
        verdict = ('<span class="pass">within the thresholds</span>' if report.passed else
                   f'<span class="fail">{_e("; ".join(report.over_threshold()))}</span>')
        parts.append(f"<h3>{_e(report.asset)} <span class=\"badge\">{len(report.attempts)} attacks</span></h3>"
                     f"<p>{verdict} (attack success at most {_percent(report.max_success)} per family, benign lines "
                     f"flagged at most {_percent(report.max_false_positives)})</p>")
        parts.append(_svg(attack_chart(report), f"attacks{index}") if report.families else "")
        rows = "".join(
            f'<tr><td>{_e(f.name)}</td><td>{_e(f.title)}</td><td>{_e(f.goal)}</td>'
            f'<td class="n">{f.success.successes}/{f.success.attempts}</td>'
            f'<td class="n {"fail" if f.success.attempts and f.success.rate > report.max_success else ""}">'
            f'{_percent(f.success.rate)}</td><td class="n">{_interval_text(f.success)}</td>'
            f'<td class="n">{_percent(f.guard_fired.rate)}</td><td class="n">{f.errors or ""}</td></tr>'
            for f in report.families)
        parts.append("<table><tr><th>Family</th><th>Title</th><th>Goal</th><th>Succeeded</th><th>Rate</th>"
                     "<th>95 % interval (Wilson)</th><th>Guard fired</th><th>Turns failed</th></tr>"
                     f"{rows}</table>")
        if report.events:
            names = [f.name for f in report.families]
            rows = "".join(
                f'<tr><td>{_e(e.name)}</td><td>{_e(e.node)}{"." + _e(e.exit) if e.exit else ""}</td>'
                f'<td class="n">{e.overall.successes}/{e.overall.attempts}</td><td class="n">{_percent(e.overall.rate)}'
                f'</td><td class="n">{_interval_text(e.overall)}</td>'
                + "".join(f'<td class="n">{e.families[n].successes}/{e.families[n].attempts}</td>' for n in names)
                + "</tr>" for e in report.events)
            parts.append("<table><tr><th>Game event</th><th>Where</th><th>Reached</th><th>Rate</th>"
                         "<th>95 % interval</th>" + "".join(f"<th>{_e(n)}</th>" for n in names) + f"</tr>{rows}</table>")
        else:
            parts.append('<p class="muted">No game events are marked on this asset: only secrets and character '
                         "breaks count as successes.</p>")
        latency = "".join(f'<tr><td>{_e(kind)}</td><td class="n">{v.runs}</td><td class="n">{v.p50:.2f} ms</td>'
                          f'<td class="n">{v.p95:.2f} ms</td></tr>'
                          for kind, v in [("every guard run", report.latency), *sorted(report.check_latency.items())]
                          if v.runs)
        if not report.line_guards or not report.benign.attempts:
            parts.append('<p class="muted">No benign line was run: ' + (
                "no guard checks the player's line." if not report.line_guards else "none was given.") + "</p>")
        else:
            parts.append(f"<p>Benign lines flagged: <b>{report.benign.successes}/{report.benign.attempts}</b> "
                         f"({_percent(report.benign.rate)}, 95 % interval {_interval_text(report.benign)}) by the "
                         f"line guards {_e(', '.join(report.line_guards))}.</p>")
        if report.flagged:
            rows = "".join(f"<tr><td>{_e(f.line)}</td><td>{_e(f.guard)}</td><td>{_e(f.policy)}</td>"
                           f"<td>{_e(f.why)}</td></tr>" for f in report.flagged)
            parts.append("<details><summary>The flagged benign lines</summary><table><tr><th>Line</th><th>Guard</th>"
                         f"<th>Policy</th><th>Why</th></tr>{rows}</table></details>")
        if latency:
            parts.append("<table><tr><th>Guard latency</th><th>Runs</th><th>p50</th><th>p95</th></tr>"
                         f"{latency}</table>")
        if report.successes:
            rows = "".join(f"<tr><td>{_e(a.family)}</td><td>{_e(a.line)}</td><td>{_e(', '.join(a.how))}</td>"
                           f"<td>{_e(a.reply)}</td><td>{_e(ARROW.join(a.path))}</td></tr>"
                           for a in report.successes)
            parts.append(f"<details><summary>The successful attacks ({len(report.successes)})</summary><table><tr>"
                         "<th>Family</th><th>Line</th><th>How</th><th>Reply</th><th>Path</th></tr>"
                         f"{rows}</table></details>")
    parts.append("</section>")
    return "".join(parts)


def _failures_section(report: Report, prompts: FailurePrompts | None) -> str:
    failing = [r for r in report.results if not r.passed]
    if not failing:
        return '<section id="failures"><h2>Failures</h2><p class="pass">No case failed.</p></section>'
    repeated = any(r.repeat for r in report.results)
    missing = ("the prompt was not kept (the report was written without the run's prompts)" if prompts is None
               else "no node read a prompt in this turn, or the asset records no diagnostics")
    parts = [f'<section id="failures"><h2>Failures <span class="badge">{len(failing)}</span></h2>']
    shown: Counter = Counter()
    in_full = 0
    for number, result in enumerate(failing):
        case_id = f"{result.suite}::{result.case}"
        shown[case_id] += 1
        if shown[case_id] > MAX_FAILED_RUNS:
            continue
        in_full += 1
        if in_full > MAX_FAILURES_SHOWN:
            continue
        run = f" (run {result.repeat + 1})" if repeated else ""
        parts.append(f'<div class="failure" id="failure-{number}"><h3>{_e(result.suite)}::{_e(result.case)}{run}</h3>')
        if result.error:
            parts.append(f'<p class="fail">{_e(result.error)}</p>')
        by_turn = {t.number: t for t in result.turns}
        for turn in result.turns:
            failed = [c for c in turn.checks if not c.passed]
            if not failed and not turn.error:
                continue
            kept = prompts.of(turn) if prompts is not None else None
            path = " \u2192 ".join(turn.path) or "(none)"
            parts.append(f'<div class="turn"><b>Turn {turn.number}</b> <span class="said">player: '
                         f"\u201c{_e(turn.line)}\u201d</span><br>reply: \u201c{_e(turn.reply)}\u201d"
                         f'<br><span class="muted">path: {_e(path)}</span>')
            if turn.error:
                parts.append(f'<p class="fail">{_e(turn.error)}</p>')
            for check in failed:
                node = f" at node {_e(check.node)}" if check.node else ""
                parts.append(f'<p><span class="fail">{_e(check.kind)}</span>{node}: {_e(check.message)}</p>')
            # each prompt once, after the checks about it (a path and an exit check name one node)
            chosen = [_prompt_for(kept, c.node) for c in failed]
            if not chosen or all(p is None for p in chosen):
                parts.append(_prompt_html(None, missing) if failed else "")
            parts += [_prompt_html(p, missing) for i, p in enumerate(chosen)
                      if p is not None and all(q is not p for q in chosen[:i])]
            parts.append("</div>")
        for at_turn, check in result.conversation:
            if check.passed:
                continue
            turn = by_turn.get(at_turn)
            kept = prompts.of(turn) if prompts is not None and turn is not None else None
            parts.append(f'<div class="turn"><b>After turn {at_turn}</b> (a conversation check)'
                         f'<p><span class="fail">{_e(check.kind)}</span>: {_e(check.message)}</p>'
                         f"{_prompt_for_html(kept, check.node, missing)}</div>")
        parts.append("</div>")
    if in_full > MAX_FAILURES_SHOWN:
        parts.append(f'<p class="muted">{in_full - MAX_FAILURES_SHOWN:,} more failing runs are not shown in full (the '
                     f"first {MAX_FAILURES_SHOWN} are above; the table of cases lists every one, and --json has "
                     "them all).</p>")
    else:
        for case_id, count in shown.items():
            if count > MAX_FAILED_RUNS:
                parts.append(f'<p class="muted">{_e(case_id)} failed in {count - MAX_FAILED_RUNS} more runs, not '
                             f"shown (the first {MAX_FAILED_RUNS} are above).</p>")
    parts.append("</section>")
    return "".join(parts)


def _prompt_for_html(kept: list[KeptPrompt] | None, node: str, missing: str) -> str:
    return _prompt_html(_prompt_for(kept, node), missing)


def report_html(report: Report, *, prompts: FailurePrompts | None = None, variant: VariantReport | None = None,
                title: str = "Parley test report", generated: float | None = None,
                red_team: list[RedTeamReport] | None = None) -> str:
    """The whole page. ``prompts`` (kept during the run) gives each failure its prompt; ``variant``
    adds the variant deltas; ``red_team`` the red-team runs (a run of only those shows only them)."""
    passed = sum(r.passed for r in report.results)
    failed = len(report.results) - passed
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(generated if generated is not None else time.time()))
    suites = Counter(r.suite for r in report.results)
    state = f'<span class="pass">all {passed} passed</span>' if not failed else (
        f'<span class="fail">{failed} failed</span>, {passed} passed')
    nav = ['<a href="#pass-rates">Pass rates</a>', '<a href="#coverage">Coverage</a>']
    if variant is not None:
        nav.append('<a href="#variants">Variant deltas</a>')
    nav.append('<a href="#failures">Failures</a>')
    if red_team is not None and not report.results:  # a red-team run alone
        attacks = sum(len(r.attempts) for r in red_team)
        over = sum(not r.passed for r in red_team)
        state = (f'<span class="fail">{over} over a threshold</span>' if over else
                 '<span class="pass">within the thresholds</span>')
        body = [f"<header><h1>{_e(title)}</h1><p>{state} \u00b7 {attacks} attacks \u00b7 {when}</p></header>",
                '<nav><a href="#red-team">Red team</a></nav><main>', _red_team_section(red_team), "</main>"]
        return _page(title, "".join(body))
    if red_team:
        nav.append('<a href="#red-team">Red team</a>')
    body = [
        (f"<header><h1>{_e(title)}</h1><p>{state} in {report.seconds:.1f} s \u00b7 "
         f"{len(suites)} suite{'s' if len(suites) != 1 else ''}: {_e(', '.join(suites))} \u00b7 coverage "
         f"{report.coverage_percent():.0f} % \u00b7 {when}</p></header>"),
        f"<nav>{''.join(nav)}</nav><main>",
        _rates_section(report) if report.results else "",
        _coverage_section(report),
        _variant_section(variant) if variant is not None else "",
        _failures_section(report, prompts),
        _red_team_section(red_team) if red_team else "",
        "</main>",
    ]
    return _page(title, "".join(body))


def in_progress_html() -> str:
    """The page written before a run starts: a run killed midway leaves it, never the previous run's report."""
    from runtime.suites.report import IN_PROGRESS

    return _page("Parley test report: not finished",
                 f'<header><h1>Parley test report</h1><p class="fail">{_e(IN_PROGRESS)}</p></header>')


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>\n")

