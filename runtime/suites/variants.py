"""Comparing two variants of an asset: the suite's asset is A, another asset file is B. The same
cases run on both with the same seeds and repeats, so each conversation of A has its twin on B.

- Each case's pass rate on A and B, and the paired difference B - A of the conversations' pass
  rates with its 95 % interval. Both arms' outcomes are stacked and the interval is the
  cluster-robust one with each conversation a cluster (its A and B runs are one pair), from
  statsmodels: the paired interval, as a maintained library computes it.
- McNemar's exact test on the per-conversation outcomes (passed on one arm and not the other).
- Differing turns: a turn where some node's prompt or output, the reply or the path differ.
  Replays are exact (fixed seeds), so an unchanged variant differs in none.
- The first divergence of each case: its run, turn, node and the first token (of the prompt when
  the prompts differ, else of the output) where A and B part, with both prompts as the model saw them.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.asset.model import Asset
from runtime.problems import InputError, Problem
from runtime.session.record import HoldsRecord
from runtime.session.session import graph_of

if TYPE_CHECKING:
    from runtime.backends.base import Backend
    from runtime.session.record import TurnRecord
    from runtime.suites.file import LoadedSuite
    from runtime.suites.report import CaseResult, Report, TurnOutcome
    from runtime.suites.run import Server


@dataclass
class TurnDivergence:
    """Where a conversation on A and its twin on B first part."""

    case: str  # suite::case
    run: int  # from 0 (the repeat)
    turn: int  # from 1
    node: str  # the first node, in the order it ran, whose prompt or output differs ("" : the path differs first)
    token_index: int  # the first token (from 0) that differs, in ``part``
    text_a: str  # the node's output on A (or the turn's reply, when no node's differs)
    text_b: str
    prompt_a: str  # the node's prompt as the model saw it, one "role: content" a message
    prompt_b: str
    part: str = "output"  # where the token is: "prompt" or "output"


@dataclass
class CaseComparison:
    case: str  # suite::case
    runs: int
    passed_a: int
    passed_b: int
    differing_turns: int
    first_divergence: TurnDivergence | None = None

    @property
    def pass_rate_a(self) -> float:
        return self.passed_a / self.runs if self.runs else 0.0

    @property
    def pass_rate_b(self) -> float:
        return self.passed_b / self.runs if self.runs else 0.0


@dataclass
class VariantReport:
    asset_a: str
    asset_b: str
    cases: list[CaseComparison]
    conversations: int  # paired conversations (on each arm)
    differing_turns: int
    pass_rate_a: float
    pass_rate_b: float
    difference: float  # B - A
    ci_low: float  # 95 %, clustered by conversation; nan with fewer than 2 conversations
    ci_high: float
    discordant: tuple[int, int]  # (passed on A only, passed on B only)
    mcnemar_p: float  # exact McNemar on the per-conversation outcomes
    seconds: float = 0.0
    outcomes: list[tuple[str, int, bool, bool]] = field(default_factory=list)  # (case, run, passed A, passed B)
    # Each arm's suite report ("A", "B"): its results (turn results dropped) and coverage; not in to_json.
    reports: dict[str, Report] = field(default_factory=dict, repr=False)

    @property
    def significant(self) -> bool:
        return self.mcnemar_p < 0.05

    def to_json(self) -> dict[str, Any]:
        def number(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        data: dict[str, Any] = {
            "asset_a": self.asset_a, "asset_b": self.asset_b, "cases": [asdict(c) for c in self.cases],
            "conversations": self.conversations, "differing_turns": self.differing_turns,
            **{key: getattr(self, key) for key in ("pass_rate_a", "pass_rate_b", "difference", "ci_low", "ci_high",
                                                   "mcnemar_p")},
        }
        for key in ("pass_rate_a", "pass_rate_b", "difference", "ci_low", "ci_high", "mcnemar_p"):
            data[key] = number(data[key])
        data["discordant"] = {"a_only": self.discordant[0], "b_only": self.discordant[1]}
        data["significant"] = self.significant
        data["seconds"] = round(self.seconds, 3)
        data["outcomes"] = [{"case": c, "run": r, "passed_a": a, "passed_b": b} for c, r, a, b in self.outcomes]
        for case, comparison in zip(data["cases"], self.cases):
            case["pass_rate_a"] = round(comparison.pass_rate_a, 6)
            case["pass_rate_b"] = round(comparison.pass_rate_b, 6)
        return data


# --- statistics -----------------------------------------------------------------------------------


def paired_difference(a: list[bool], b: list[bool]) -> tuple[float, float, float]:
    """The difference of pass rates B - A over paired conversations (``a[i]`` and ``b[i]`` are one
    conversation on each arm) and its 95 % interval: both arms' outcomes stacked, regressed on
    "is B", with standard errors clustered by conversation (statsmodels' cluster-robust covariance,
    t with conversations - 1 degrees of freedom). With fewer than 2 conversations the interval is nan."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes: {len(a)} on A but {len(b)} on B")
    n = len(a)
    if n == 0:
        return math.nan, math.nan, math.nan
    difference = (sum(b) - sum(a)) / n
    if n < 2:
        return difference, math.nan, math.nan
    diffs = [int(y) - int(x) for x, y in zip(a, b)]
    if all(d == diffs[0] for d in diffs):  # no spread: the interval is the point (statsmodels would divide 0 by 0)
        return difference, difference, difference
    import numpy as np
    import statsmodels.api as sm

    y = np.array([*map(float, a), *map(float, b)])
    x = sm.add_constant(np.array([0.0] * n + [1.0] * n))
    groups = np.array(list(range(n)) * 2)
    fit = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    # The contrast alone: the constant's own variance may come out a rounding below 0 (when A always
    # passes, its residuals are all 0), and bse would take its square root.
    low, high = fit.t_test(np.array([[0.0, 1.0]])).conf_int(alpha=0.05)[0]
    return difference, float(low), float(high)


def mcnemar_exact(a: list[bool], b: list[bool]) -> tuple[tuple[int, int], float]:
    """McNemar's exact test on paired outcomes: ((passed on A only, passed on B only), two-sided p),
    from statsmodels. No discordant pair: p is 1."""
    a_only = sum(x and not y for x, y in zip(a, b))
    b_only = sum(y and not x for x, y in zip(a, b))
    if a_only + b_only == 0:
        return (0, 0), 1.0
    from statsmodels.stats.contingency_tables import mcnemar

    both = sum(x and y for x, y in zip(a, b))
    neither = len(a) - both - a_only - b_only
    result = mcnemar([[both, a_only], [b_only, neither]], exact=True)
    return (a_only, b_only), float(result.pvalue)


# --- running both arms ----------------------------------------------------------------------------


@dataclass
class _NodeTrace:
    node: str
    prompt: list[tuple[str, str, str]]  # (role, name, content) as the model received it
    output: str


@dataclass
class _TurnTrace(HoldsRecord):
    """What one turn did, kept once the turn's full result is dropped: enough to compare and to show."""

    record: TurnRecord | None  # without its diagnostics and prompts (None: the turn failed)
    error: str
    nodes: list[_NodeTrace]

    def same_as(self, other: _TurnTrace) -> bool:
        return (self.reply, self.path, self.error, [(n.node, n.prompt, n.output) for n in self.nodes]) == (
            other.reply, other.path, other.error, [(n.node, n.prompt, n.output) for n in other.nodes])


@dataclass
class _Run:
    passed: bool
    turns: list[_TurnTrace]


def _trace(outcome: TurnOutcome) -> _TurnTrace:
    nodes = []
    diagnostics = outcome.record.diagnostics if outcome.record is not None else None
    for diag in diagnostics.nodes if diagnostics is not None else []:
        nodes.append(_NodeTrace(diag.node, [(m.role, m.name, m.content) for m in diag.input.prompt], diag.output))
    light = outcome.record.without_details() if outcome.record is not None else None
    return _TurnTrace(light, outcome.error, nodes)


def variant_suite(loaded: LoadedSuite, variant: str | os.PathLike[str] | Asset) -> LoadedSuite:
    """The suite ``loaded`` with its asset replaced by ``variant`` (a file, or an asset that reads its
    behaviours from the suite's asset folder): the suite's model applied, its behaviours expanded.
    Raises ``InputError`` naming the variant's file when it cannot be loaded."""
    from runtime.asset.file import load_asset
    from runtime.suites.file import LoadedSuite as Loaded

    suite = loaded.suite
    if isinstance(variant, Asset):
        asset, folder, source, name = variant, loaded.asset_folder, "", suite.asset
    else:
        path = Path(variant).resolve()
        if not path.is_file():
            raise InputError([Problem("error", "--variant: no such asset file", str(variant))])
        asset, folder, source = load_asset(path), path.parent, str(path)
        name = os.path.relpath(path, loaded.path.parent.resolve())
    if suite.model:
        asset = asset.model_copy(update={"default_model": suite.model})
    asset = graph_of(asset, folder, source)
    return Loaded(loaded.path, suite.model_copy(update={"asset": name}), asset)


Tokenize = Callable[[str, str], list[Any]]  # (node id, text) -> its tokens


def compare_variants(suite: str | os.PathLike[str] | LoadedSuite, variant: str | os.PathLike[str] | Asset,
                     backend: Callable[[], Backend] | list[Server] | None = None, *, repeat: int = 1, jobs: int = 1,
                     seed: int | None = None, judge_model: str = "",
                     on_case: Callable[[str, CaseResult], None] | None = None,
                     on_turn: Callable[[str, str, TurnOutcome], None] | None = None,
                     cancel: threading.Event | None = None, tokenize: Tokenize | None = None,
                     personas: bool = True, conversations: int | None = None,
                     player_backend: Callable[[], Backend] | None = None, player_model: str = "") -> VariantReport:
    """Run the suite's cases (``repeat`` times each, with the same seeds) on its asset (A) and on
    ``variant`` (B), and compare them conversation by conversation.

    ``backend`` makes the backends (as ``run_suites``' ``make_backend``; None: the embedded one).
    ``on_case(arm, result)`` is told of each conversation as it ends, ``arm`` "A" or "B", and
    ``on_turn(arm, case id, outcome)`` of each turn (its full result still there). Tokens
    of a divergence are the model's (a backend that can ``tokenize``, made once more after the run
    when some run diverged) or whitespace-separated words (the scripted backend's tokens);
    ``tokenize`` overrides both.

    With ``personas``, the suite's personas then play both arms too (``conversations`` each, else the
    persona's own number; random play, not guided: guided players steer by what each arm reached, so
    their lines would not pair), the player on ``player_backend`` (None: the agent's backend) with
    ``player_model`` ('': the sample model). A persona's conversation #k on A pairs with #k on B (same
    player seed); it passes when no turn of it failed. Simulated turns keep no prompts: their
    divergence names the node whose exit first differs, else the reply's, and the reply's token. Raises ``InputError`` when the suite or the variant cannot be read."""
    from runtime.suites.file import load_suite
    from runtime.suites.run import run_suites

    started = time.perf_counter()
    loaded_a = suite if not isinstance(suite, (str, os.PathLike)) else load_suite(suite)
    loaded_b = variant_suite(loaded_a, variant)
    if backend is None:
        from runtime.backends.profiles import backend_factory

        backend = backend_factory("embedded")
    arms: dict[str, dict[tuple[str, int], _Run]] = {"A": {}, "B": {}}
    lock = threading.Lock()

    def keep(arm: str):
        def kept(result: CaseResult) -> None:
            run = _Run(result.passed, [_trace(t) for t in result.turns])
            for t in result.turns:  # a turn's full result (diagnostics, prompt parts) is most of its memory
                t.drop_details()
            with lock:
                arms[arm][(f"{result.suite}::{result.case}", result.repeat)] = run
            if on_case is not None:
                on_case(arm, result)
        return kept

    reports: dict[str, Report] = {}
    for arm, loaded in (("A", loaded_a), ("B", loaded_b)):
        told = (lambda cid, outcome, arm=arm: on_turn(arm, cid, outcome)) if on_turn is not None else None
        reports[arm] = run_suites([loaded], backend, jobs=jobs, repeat=repeat, seed=seed, judge_model=judge_model,
                                  on_case=keep(arm), on_turn=told, cancel=cancel, keep_turn_results=True)
    keys = [(loaded_a.case_id(c), k) for c in loaded_a.suite.cases for k in range(repeat)]
    closing: list[Backend] = []
    if tokenize is None:
        tokenize = _tokenizer(backend, loaded_a, keys, arms, closing)
    try:
        cases, outcomes = _compared(loaded_a, repeat, arms, tokenize)
        if personas and loaded_a.suite.personas:
            played = [_play(loaded, backend, player_backend, player_model, conversations, seed, cancel)
                      for loaded in (loaded_a, loaded_b)]
            _compare_played(loaded_a, *played, cases, outcomes,
                            tokenize if tokenize is not _words else _tokenizer(backend, loaded_a, [], {}, closing))
    finally:
        for made in closing:
            made.close()
    a = [o[2] for o in outcomes]
    report = _report(loaded_a, loaded_b, cases, outcomes, a, started)
    report.reports = reports
    return report


def _compared(loaded_a: LoadedSuite, repeat: int, arms: dict[str, dict[tuple[str, int], _Run]],
              tokenize: Tokenize) -> tuple[list[CaseComparison], list[tuple[str, int, bool, bool]]]:
    cases: list[CaseComparison] = []
    outcomes: list[tuple[str, int, bool, bool]] = []
    for case in loaded_a.suite.cases:
        cid = loaded_a.case_id(case)
        comparison = CaseComparison(cid, repeat, 0, 0, 0)
        for k in range(repeat):
            run_a, run_b = arms["A"][(cid, k)], arms["B"][(cid, k)]
            comparison.passed_a += run_a.passed
            comparison.passed_b += run_b.passed
            outcomes.append((cid, k, run_a.passed, run_b.passed))
            for number, (ta, tb) in enumerate(_pad(run_a.turns, run_b.turns), 1):
                if ta is not None and tb is not None and ta.same_as(tb):
                    continue
                comparison.differing_turns += 1
                if comparison.first_divergence is None:
                    comparison.first_divergence = _divergence(cid, k, number, ta, tb, tokenize)
        cases.append(comparison)
    return cases, outcomes


def _report(loaded_a: LoadedSuite, loaded_b: LoadedSuite, cases: list[CaseComparison],
            outcomes: list[tuple[str, int, bool, bool]], a: list[bool], started: float) -> VariantReport:
    b = [o[3] for o in outcomes]
    difference, low, high = paired_difference(a, b)
    discordant, p = mcnemar_exact(a, b)
    n = len(outcomes)
    return VariantReport(
        asset_a=str(loaded_a.path.parent / loaded_a.suite.asset), asset_b=str(loaded_b.path.parent / loaded_b.suite.asset),
        cases=cases, conversations=n, differing_turns=sum(c.differing_turns for c in cases),
        pass_rate_a=sum(a) / n if n else math.nan, pass_rate_b=sum(b) / n if n else math.nan,
        difference=difference, ci_low=low, ci_high=high, discordant=discordant, mcnemar_p=p,
        seconds=time.perf_counter() - started, outcomes=outcomes)


def _pad(a: list[_TurnTrace], b: list[_TurnTrace]) -> list[tuple[_TurnTrace | None, _TurnTrace | None]]:
    """Turns side by side; a run that stopped early (a failed turn) has None for the turns it lacks."""
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else None, b[i] if i < len(b) else None) for i in range(n)]


def prompt_text(prompt: list[tuple[str, str, str]]) -> str:
    """A prompt as the model received it, one message a paragraph: ``role: content`` (``role (name)``)."""
    return "\n\n".join(f"{role}{f' ({name})' if name else ''}: {content}" for role, name, content in prompt)


def _first_difference(a: list[Any], b: list[Any]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _divergence(case: str, run: int, turn: int, ta: _TurnTrace | None, tb: _TurnTrace | None,
                tokenize: Tokenize) -> TurnDivergence:
    """The first node (in the order they ran) whose prompt or output differs on the two arms."""
    if ta is None or tb is None:  # one arm's conversation stopped before this turn
        there = ta or tb
        assert there is not None
        text = there.error or there.reply
        return TurnDivergence(case, run, turn, "", 0, text if ta else "(no turn: the run stopped)",
                              text if tb else "(no turn: the run stopped)", "", "", "turn")
    for na, nb in zip(ta.nodes, tb.nodes):
        if na.node != nb.node:  # the graph took another way with the same outputs before: the graph differs
            return TurnDivergence(case, run, turn, na.node, 0, f"ran {na.node}", f"ran {nb.node}",
                                  prompt_text(na.prompt), prompt_text(nb.prompt), "path")
        if na.prompt != nb.prompt:
            pa, pb = prompt_text(na.prompt), prompt_text(nb.prompt)
            return TurnDivergence(case, run, turn, na.node, _first_difference(tokenize(na.node, pa), tokenize(nb.node, pb)),
                                  na.output, nb.output, pa, pb, "prompt")
        if na.output != nb.output:
            return TurnDivergence(case, run, turn, na.node,
                                  _first_difference(tokenize(na.node, na.output), tokenize(nb.node, nb.output)),
                                  na.output, nb.output, prompt_text(na.prompt), prompt_text(nb.prompt), "output")
    if len(ta.nodes) != len(tb.nodes):  # one arm ran more nodes, all the shared ones alike
        longer, shorter = (ta, tb) if len(ta.nodes) > len(tb.nodes) else (tb, ta)
        extra = longer.nodes[len(shorter.nodes)]
        prompt = prompt_text(extra.prompt)
        return TurnDivergence(case, run, turn, extra.node, 0, extra.output if longer is ta else "(not run)",
                              extra.output if longer is tb else "(not run)", prompt if longer is ta else "",
                              prompt if longer is tb else "", "path")
    # Same nodes alike: the reply (a template node's), the path or the error differ.
    return TurnDivergence(case, run, turn, "", _first_difference(ta.reply.split(), tb.reply.split()),
                          ta.error or ta.reply, tb.error or tb.reply, "", "", "output")


def _words(node: str, text: str) -> list[str]:
    return text.split()


def _tokenizer(backend: Callable[[], Backend] | list[Server], loaded_a: LoadedSuite, keys: list[tuple[str, int]],
               arms: dict[str, dict[tuple[str, int], _Run]], closing: list[Backend]) -> Tokenize:
    """The model's tokens for a divergence's text when the backend can tokenize (a backend made once
    more, only when some run diverged; put in ``closing``), else whitespace-separated words."""
    if keys and all(len(arms["A"][k].turns) == len(arms["B"][k].turns)
           and all(x.same_as(y) for x, y in zip(arms["A"][k].turns, arms["B"][k].turns)) for k in keys):
        return _words
    make = backend[0].make_backend if isinstance(backend, list) else backend
    try:
        made = make()
    except Exception:  # noqa: BLE001 - words are tokens enough to say where two texts part
        return _words
    closing.append(made)
    if not callable(getattr(made, "tokenize", None)):
        return _words
    nodes = {n.id: n for n in loaded_a.asset.nodes}
    cache: dict[tuple[str, str], list[Any]] = {}

    def tokens(node: str, text: str) -> list[Any]:
        found = nodes.get(node)
        model = loaded_a.asset.model_for(found) if found is not None else loaded_a.asset.default_model
        if (model, text) not in cache:
            try:
                cache[(model, text)] = list(made.tokenize(model, text))
            except Exception:  # noqa: BLE001 - a node without a model (a template): words
                cache[(model, text)] = text.split()
        return cache[(model, text)]

    return tokens


# --- personas on both arms --------------------------------------------------------------------------


def _play(loaded: LoadedSuite, backend: Callable[[], Backend] | list[Server], player_backend: Callable[[], Backend] | None,
          player_model: str, conversations: int | None, seed: int | None, cancel: threading.Event | None):
    from runtime.suites.simulate import SimulatedPlayer, simulate

    made = (backend[0].make_backend if isinstance(backend, list) else backend)()
    player = player_backend() if player_backend is not None else made
    try:
        return simulate(loaded, made, SimulatedPlayer(player, player_model), conversations=conversations, seed=seed,
                        cancel=cancel)
    finally:
        made.close()
        if player is not made:
            player.close()


def _compare_played(loaded_a: LoadedSuite, played_a: Any, played_b: Any, cases: list[CaseComparison],
                    outcomes: list[tuple[str, int, bool, bool]], tokenize: Tokenize) -> None:
    """Each persona as a case: its conversations paired by number, turn by turn."""
    on_b = {(c.persona, c.index): c for c in played_b.conversations}
    by_persona: dict[str, CaseComparison] = {}
    for conv_a in played_a.conversations:
        conv_b = on_b.get((conv_a.persona, conv_a.index))
        if conv_b is None:  # stopped (cancelled) before B played it
            continue
        cid = f"{loaded_a.name}::persona {conv_a.persona}"
        comparison = by_persona.get(cid)
        if comparison is None:
            comparison = by_persona[cid] = CaseComparison(cid, 0, 0, 0, 0)
            cases.append(comparison)
        comparison.runs += 1
        comparison.passed_a += not conv_a.error
        comparison.passed_b += not conv_b.error
        outcomes.append((cid, conv_a.index, not conv_a.error, not conv_b.error))
        turns_a, turns_b = conv_a.turns, conv_b.turns
        for i in range(max(len(turns_a), len(turns_b))):
            ta = turns_a[i] if i < len(turns_a) else None
            tb = turns_b[i] if i < len(turns_b) else None
            if ta is not None and tb is not None and (ta.line, ta.reply, ta.path, ta.exits, ta.error) == (
                    tb.line, tb.reply, tb.path, tb.exits, tb.error):
                continue
            comparison.differing_turns += 1
            if comparison.first_divergence is None:
                comparison.first_divergence = _played_divergence(cid, conv_a.index, i + 1, ta, tb, tokenize)


def _played_divergence(case: str, run: int, turn: int, ta: Any, tb: Any, tokenize: Tokenize) -> TurnDivergence:
    if ta is None or tb is None:
        there = ta or tb
        text = there.error or there.reply
        return TurnDivergence(case, run, turn, "", 0, text if ta else "(no turn: the conversation ended)",
                              text if tb else "(no turn: the conversation ended)", "", "", "turn")
    if ta.line != tb.line:  # the player said another line (only after a turn that differed; kept for safety)
        return TurnDivergence(case, run, turn, "", _first_difference(ta.line.split(), tb.line.split()),
                              ta.line, tb.line, "", "", "line")
    node = next((a[0] for a, b in zip(ta.exits, tb.exits) if a != b), "")
    if not node and ta.path != tb.path:
        node = next((a for a, b in zip(ta.path, tb.path) if a != b), (ta.path or tb.path or [""])[-1])
    node = node or (ta.path[-1] if ta.path else "")
    return TurnDivergence(case, run, turn, node, _first_difference(tokenize(node, ta.reply), tokenize(node, tb.reply)),
                          ta.error or ta.reply, tb.error or tb.reply, "", "", "output")
