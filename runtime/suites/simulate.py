"""Simulated players: a model plays each persona of a suite against the agent, K conversations each,
at random (in character) or steered by coverage toward what no line has reached yet, and the lines
that reached new coverage saved as scripted cases.

The player is a model on a backend of its own choosing (the sample model by default). Each
conversation starts a fresh agent seeded as a case is (``run_case``: the suite's seed plus
``seed``), so a line saved as a case replays the same turn; only the player's seed changes from one
conversation to the next.

Coverage is what ``runtime.suites.report.Coverage`` counts: nodes run and exits taken. In guided
mode, before each line the player is told one kind of line that would reach a node or exit not
reached yet, in the graph's own words: a Classify Intent node's intent descriptions (and, for its
fallback, the intents it is none of), and the title of the node the exit leads to. Each kind is
tried in turn, the least tried first, until its nodes and exits are reached.

Asking is not enough: a small player model often ignores the steer and plays its character. So a
guided turn does not depend on the player's obedience. The player writes up to ``candidates``
lines (seeds of their own); each is said to the agent, and a line that reaches nothing new is taken
back (``Agent.rewind``, which restores every node's cache, window and summaries exactly) and the
next one is tried. The first line that reaches something new is kept, else the last one. Thanks to
exact replays, a kept line replays the same turn as a saved case. The agent runs more turns than
the conversation has (``SimulatedTurn.tried``; ``SimulationResult.agent_turns`` counts them), so a
bench compares guided and random play at the agent's cost too.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.asset.model import Asset
from runtime.backends.base import Backend, ChatMessage, GenerationRequest
from runtime.problems import InputError, Problem
from runtime.session.failures import failure_of
from runtime.session.record import HoldsRecord, TurnRecord
from runtime.session.session import Session
from runtime.session.tools import scripted_answers
from runtime.suites.file import LoadedSuite, Persona, SuiteError, load_suite, read_suite_yaml, save_cases
from runtime.suites.report import CaseResult, Coverage

# The player's session on its backend: a key no node id can be (ids take no ':'), so a backend the
# agent shares keeps the player's context apart from every node's
PLAYER_SESSION = "simulated:player"
PLAYER_CONTEXT = 2048
PLAYER_MAX_TOKENS = 32
PLAYER_TEMPERATURE = 0.9
MAX_LINE_CHARS = 300
FALLBACK_LINE = "Hello."  # said when the player model wrote nothing usable
# What the player hears before their first line: spoken, so a small model answers in speech (a
# stage direction here is answered with more of them)
OPENING = "Hello there. What do you want?"
GUIDED_CANDIDATES = 3  # lines a guided player tries per turn, by default
MAX_GUIDED_CANDIDATES = 20  # at most (``--candidates``): each is a model call per turn of every conversation
CANDIDATE_SEED_STEP = 7919  # candidate k of a turn plays with the turn's seed + k * this

Target = tuple[str, str]  # ("node", id) or ("exit", "id.port")


# --- the graph's words for what is not reached ------------------------------------------------


@dataclass(frozen=True)
class Steer:
    """One kind of line, in the graph's words, and the nodes and exits it would reach."""

    hint: str
    targets: tuple[Target, ...]


def _exit_hint(node: Any, port: str) -> str:
    return node.exit_line_kind(port) or f"a line that makes '{node.display_title}' take its '{node.exit_label(port)}' exit"


def steers(asset: Asset) -> list[Steer]:
    """The kinds of line that reach the graph's nodes and exits, in graph order (breadth first from
    the start node). Nodes and exits every turn reaches (those before the first branch) have none."""
    nodes = {n.id: n for n in asset.nodes}
    hint_of: dict[Target, str] = {}
    seen, queue = {asset.start_node}, [asset.start_node]
    node_hint: dict[str, str] = {asset.start_node: ""}
    while queue:
        node_id = queue.pop(0)
        node = nodes.get(node_id)
        if node is None:
            continue
        exits = node.exits()
        for port, target in exits.items():
            hint = _exit_hint(node, port) if len(exits) > 1 else node_hint[node_id]
            if hint and nodes.get(target) is not None:
                hint = f"{hint} (it leads to '{nodes[target].display_title}')"
            hint_of[("exit", f"{node_id}.{port}")] = hint
            if target and target not in seen and target in nodes:
                seen.add(target)
                node_hint[target] = hint
                hint_of[("node", target)] = hint
                queue.append(target)
    grouped: dict[str, list[Target]] = {}
    for target, hint in hint_of.items():
        if hint:
            grouped.setdefault(hint, []).append(target)
    return [Steer(hint, tuple(targets)) for hint, targets in grouped.items()]


def _reached(coverage: Coverage) -> set[Target]:
    return ({("node", n) for n, times in coverage.visits.items() if times}
            | {("exit", f"{n}.{p}") for (n, p), times in coverage.exits.items() if times})


def all_targets(asset: Asset) -> list[Target]:
    return [("node", n.id) for n in asset.nodes] + [("exit", f"{n}.{p}") for n, p in Coverage(asset).all_exits]


# --- the player -------------------------------------------------------------------------------


class SimulatedPlayer:
    """A persona played by a model: it writes the player's next line from the conversation so far."""

    def __init__(self, backend: Backend, model: str = "") -> None:
        from runtime.models.folder import SAMPLE_MODEL

        self.backend = backend
        self.model = model or SAMPLE_MODEL.file_name

    def start(self) -> None:
        """A new conversation: the player's context starts empty, so a conversation does not depend
        on the ones before it."""
        self.backend.session(PLAYER_SESSION, self.model, PLAYER_CONTEXT).release()

    def prompt(self, persona: Persona, character: str, history: list[tuple[str, str]], steer: str) -> list[ChatMessage]:
        """The messages the player model reads: who they are and, guided, what kind of line to say
        next (``steer``), then the conversation: the agent's replies as the other side's lines (a
        greeting, ``OPENING``, before the first), the player's own as theirs."""
        goals = "".join(f"\n- {g}" for g in persona.goals)
        system = (f"You play a player in a game, talking to {character}. Stay in character.\n"
                  f"Who you are: {persona.description.strip()}"
                  + (f"\nYour goals:{goals}" if goals else "")
                  + (f"\nYour next line must be {steer}." if steer else "")
                  + "\nWrite only what you say: one short sentence, no narration, no stage directions.")
        messages = [ChatMessage("system", system), ChatMessage("user", OPENING)]
        for line, reply in history:
            messages += [ChatMessage("assistant", line), ChatMessage("user", reply)]
        return messages

    def next_line(self, messages: list[ChatMessage], seed: int) -> str:
        session = self.backend.session(PLAYER_SESSION, self.model, PLAYER_CONTEXT)
        result = session.generate(GenerationRequest(messages, PLAYER_MAX_TOKENS, temperature=PLAYER_TEMPERATURE,
                                                    seed=seed, stop=["\n"]))
        return clean_line(result.text)


_SPEAKER = re.compile(r"^\s*(?:player|you|me|user)\s*:\s*", re.IGNORECASE)
_STAGE_DIRECTION = re.compile(r"\([^)]*\)?|\[[^\]]*\]?|\*[^*]*\*?")


def clean_line(text: str) -> str:
    """The model's output as a line to say: its first non-empty line, without a speaker's name, stage
    directions (in brackets or asterisks) or quotes, at most ``MAX_LINE_CHARS``; ``FALLBACK_LINE``
    when nothing is left."""
    lines = [_STAGE_DIRECTION.sub("", ln) for ln in text.splitlines()]
    line = next((ln for ln in lines if ln.strip()), "")
    line = " ".join(_SPEAKER.sub("", line).strip().strip('"*\u201c\u201d').split())
    return line[:MAX_LINE_CHARS] or FALLBACK_LINE


# --- a simulation's results -------------------------------------------------------------------


@dataclass
class SimulatedTurn(HoldsRecord):
    number: int  # from 1
    line: str
    # what the turn said and did, without its diagnostics and prompts (None: it failed, or none was said)
    record: TurnRecord | None = None
    exits: list[tuple[str, str]] = field(default_factory=list)  # (node, port) in the order taken
    new: list[Target] = field(default_factory=list)  # nodes and exits no line had reached before
    steer: str = ""  # guided: the kind of line the player was asked for
    tried: list[str] = field(default_factory=list)  # guided: the lines said and taken back before this one
    prompt: list[ChatMessage] = field(default_factory=list)  # what the player model read
    error: str = ""


@dataclass
class SimulatedConversation:
    suite: str
    persona: str
    index: int  # from 0, per persona
    seed: int  # the player's
    turns: list[SimulatedTurn] = field(default_factory=list)
    counts: CaseResult | None = None  # nodes run and exits taken, as a case's
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.persona} #{self.index + 1}"

    @property
    def lines(self) -> list[str]:
        return [t.line for t in self.turns]

    @property
    def replies(self) -> list[str]:
        return [t.reply for t in self.turns]

    @property
    def error(self) -> str:
        return next((f"turn {t.number}: {t.error}" for t in self.turns if t.error), "")

    @property
    def new(self) -> list[Target]:
        return [x for t in self.turns for x in t.new]


@dataclass
class SimulationResult:
    suite: Path
    asset: str  # the asset file
    guided: bool
    conversations: list[SimulatedConversation] = field(default_factory=list)
    coverage: Coverage | None = None  # the baseline's and every conversation's
    curve: list[float] = field(default_factory=list)  # coverage %: before the first conversation, then after each
    seconds: float = 0.0

    @property
    def agent_turns(self) -> int:
        """The turns the agent ran: each conversation's, and each line a guided player took back."""
        return sum(len(t.tried) + 1 for c in self.conversations for t in c.turns if t.line)

    @property
    def discoveries(self) -> list[tuple[SimulatedConversation, SimulatedTurn]]:
        return [(c, t) for c in self.conversations for t in c.turns if t.new and not t.error]

    @property
    def errors(self) -> list[str]:
        return [f"{c.name}: {c.error}" for c in self.conversations if c.error]

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": str(self.suite), "asset": self.asset, "guided": self.guided, "seconds": round(self.seconds, 2),
            "agent_turns": self.agent_turns,
            "coverage_curve": [round(p, 2) for p in self.curve],
            "conversations": [{
                "persona": c.persona, "conversation": c.index + 1, "seed": c.seed, "seconds": round(c.seconds, 3),
                "error": c.error,
                "turns": [{"turn": t.number, "say": t.line, "reply": t.reply, "path": t.path, "steer": t.steer,
                           "tried": t.tried, "new": [f"{kind} {what}" for kind, what in t.new], "error": t.error} for t in c.turns],
            } for c in self.conversations],
        }


# --- running ----------------------------------------------------------------------------------


def _player_seed(suite_seed: int, persona: str, index: int) -> int:
    return (zlib.crc32(f"{persona}#{index}".encode()) + suite_seed) % 2**31


def simulate(loaded: LoadedSuite, backend: Backend, player: SimulatedPlayer, *, guided: bool = False,
             conversations: int | None = None, seed: int | None = None, baseline: Coverage | None = None,
             candidates: int = GUIDED_CANDIDATES, cancel: threading.Event | None = None,
             on_conversation: Callable[[SimulatedConversation], None] | None = None) -> SimulationResult:
    """Play each persona of ``loaded`` against its agent on ``backend``: ``conversations`` (else the
    persona's own number) conversations of up to its ``max_turns`` lines, one after another (in guided
    mode each steers by what the ones before reached). ``baseline`` is what was reached already (the
    scripted cases' coverage): a line is new only when it reaches what that did not. Guided, each turn
    tries up to ``candidates`` lines, keeping the first that reaches something new (see the module's
    notes); at random, each turn says the player's one line. Never raises for
    a failing turn: the conversation stops there and its turn says why."""
    started = time.perf_counter()
    asset_file = str(loaded.path.parent / loaded.suite.asset)
    coverage = Coverage(loaded.asset)
    if baseline is not None:
        coverage.visits.update(baseline.visits)
        coverage.exits.update(baseline.exits)
        coverage.bypassed.update(baseline.bypassed)
    out = SimulationResult(loaded.path, asset_file, guided, coverage=coverage, curve=[coverage.percent])
    kinds = steers(loaded.asset) if guided else []
    tries: Counter[str] = Counter()
    reached = _reached(coverage)
    character = loaded.asset.name
    for persona in loaded.suite.personas:
        for index in range(conversations if conversations is not None else persona.conversations):
            if cancel is not None and cancel.is_set():
                break
            conv = SimulatedConversation(loaded.name, persona.name, index,
                                         _player_seed(loaded.suite.seed + (seed or 0), persona.name, index))
            conv.counts = CaseResult(loaded.name, conv.name)
            begun = time.perf_counter()
            agent = Session(loaded.asset, backend, loaded.asset_folder).agent
            agent.reroll_seeds(loaded.suite.seed + (seed or 0))  # as run_case seeds a case: saved lines replay
            player.start()
            history: list[tuple[str, str]] = []
            for number in range(1, persona.max_turns + 1):
                if cancel is not None and cancel.is_set():
                    break
                steer = ""
                if guided:
                    open_kinds = [k for k in kinds if any(t not in reached for t in k.targets)]
                    if open_kinds:
                        chosen = min(open_kinds, key=lambda k: tries[k.hint])
                        tries[chosen.hint] += 1
                        steer = chosen.hint
                turn = SimulatedTurn(number, "", steer=steer)
                conv.turns.append(turn)
                turn.prompt = player.prompt(persona, character, history, steer)
                result = None
                for k in range(max(1, candidates) if steer else 1):
                    try:
                        line = player.next_line(turn.prompt, conv.seed + number + k * CANDIDATE_SEED_STEP)
                    except Exception as exc:  # noqa: BLE001 - the player's model failed: said, the run goes on
                        turn.error = f"the player's model failed: {exc}"
                        break
                    if line == turn.line or line in turn.tried:
                        continue  # said already this turn: it would reach the same
                    if result is not None:  # the line before reached nothing new: taken back
                        turn.tried.append(turn.line)
                        agent.rewind(len(history))
                    turn.line = line
                    try:
                        result = agent.run_turn(line, "", cancel=cancel, tool_result=scripted_answers({}))
                    except Exception as exc:  # noqa: BLE001 - a failed turn is a finding, not the end of the run
                        turn.error = f"the turn failed: {failure_of(exc).message}"
                        break
                    if _new_in(result, reached) or (cancel is not None and cancel.is_set()):
                        break
                if turn.error or result is None:
                    break
                turn.record = TurnRecord.of(turn.line, result).without_details()
                for diag in result.diagnostics.nodes if result.diagnostics is not None else []:
                    (conv.counts.bypassed if diag.bypassed else conv.counts.visits)[diag.node] += 1
                    conv.counts.exits[(diag.node, diag.exit)] += 1
                    turn.exits.append((diag.node, diag.exit))
                    if not diag.bypassed and ("node", diag.node) not in reached:
                        turn.new.append(("node", diag.node))
                        reached.add(("node", diag.node))
                    if ("exit", f"{diag.node}.{diag.exit}") not in reached:
                        turn.new.append(("exit", f"{diag.node}.{diag.exit}"))
                        reached.add(("exit", f"{diag.node}.{diag.exit}"))
                history.append((turn.line, turn.reply))
            conv.seconds = time.perf_counter() - begun
            coverage.add(conv.counts)
            out.conversations.append(conv)
            out.curve.append(coverage.percent)
            if on_conversation is not None:
                on_conversation(conv)
    out.seconds = time.perf_counter() - started
    return out


def _new_in(result: Any, reached: set[Target]) -> bool:
    """Whether a turn's result reached a node or exit not in ``reached``."""
    for diag in result.diagnostics.nodes if result.diagnostics is not None else []:
        if (not diag.bypassed and ("node", diag.node) not in reached) or ("exit", f"{diag.node}.{diag.exit}") not in reached:
            return True
    return False


# --- discoveries as scripted cases ------------------------------------------------------------


def discovery_cases(result: SimulationResult, asset: Asset) -> list[dict[str, Any]]:
    """Each conversation that reached new coverage as a case: its lines up to the last one that did,
    each turn expecting the path it took and the exits of the nodes that branch (those with more than
    one exit), so the route a player found is checked from now on."""
    branching = {n.id for n in asset.nodes if len(n.exits()) > 1}
    cases = []
    for conv in result.conversations:
        last = max((t.number for t in conv.turns if t.new and not t.error), default=0)
        if not last:
            continue
        turns = []
        for t in conv.turns[:last]:
            expect: dict[str, Any] = {"path": list(t.path)}
            exits = {node: port for node, port in t.exits if node in branching}
            if exits:
                expect["exits"] = exits
            turns.append({"say": t.line, "expect": expect})
        new = [what for _kind, what in conv.new]
        # named by the branches it found (the intents), else by the nodes
        named = ([w for w in new if w.rsplit(".", 1)[0] in branching and "." in w]
                 or [w for kind, w in conv.new if kind == "node"] or new)
        name = f"{conv.name} reaches {', '.join(named)}"
        cases.append({"name": name if len(name) <= 120 else name[:119] + "\u2026", "turns": turns})
    return cases


def save_discoveries(out_path: str | Path, loaded: LoadedSuite, result: SimulationResult) -> list[str]:
    """Add the discoveries of ``result`` to the suite ``out_path`` as scripted cases (the file is made
    for the asset when missing, with the simulated suite's model and seed so the lines replay as they
    were said). The new file is checked as a suite before it replaces the old one. Returns the names
    of the cases added. Raises ``SuiteError`` naming the file and field when ``out_path`` holds a
    suite for another asset, model or seed (it is then untouched)."""
    out_path = Path(out_path)
    asset_path = (loaded.path.parent / loaded.suite.asset).resolve()
    cases = discovery_cases(result, loaded.asset)
    if not cases:
        return []
    if out_path.exists():
        raw = read_suite_yaml(out_path)[0] or {}
        if isinstance(raw, dict) and raw:
            for key, want in (("model", loaded.suite.model), ("seed", loaded.suite.seed)):
                if raw.get(key, type(want)()) != want:
                    raise SuiteError([Problem("error", f"{key}: {raw.get(key)!r}, but the simulated suite "
                                              f"{loaded.path.name} has {want!r}: its discoveries would not replay "
                                              "here; save them to another file", str(out_path), field=key)])
            named = (out_path.parent / str(raw.get("asset", ""))).resolve()
            if named != asset_path:
                raise SuiteError([Problem("error", f"asset: {raw.get('asset')!r} is not {asset_path}, the asset "
                                          "the players talked to", str(out_path), field="asset")])
    settings = {k: v for k, v in (("model", loaded.suite.model), ("seed", loaded.suite.seed)) if v}
    # A file of our own, new (O_EXCL, never a link someone planted beside the target: a fixed name
    # there was followed, and another file overwritten), to check the cases in before the target
    # is replaced.
    fd, name = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".checking", dir=out_path.parent)
    os.close(fd)
    check = Path(name)
    before = out_path.read_bytes() if out_path.exists() else None
    try:
        if before is not None:
            check.write_bytes(before)
        else:
            check.unlink()  # save_cases makes the suite when its file is missing
        names = save_cases(check, asset_path, cases, settings)
        load_suite(check)  # the cases read back as a suite of this asset before the file is replaced
    except InputError as exc:
        raise SuiteError([_renamed(p, check, out_path) for p in exc.problems]) from None
    finally:
        text = check.read_text(encoding="utf-8") if check.exists() else None
        check.unlink(missing_ok=True)
    from runtime.files.writing import atomic_write_text

    assert text is not None
    atomic_write_text(out_path, text)
    return names


def _renamed(problem: Problem, check: Path, out_path: Path) -> Problem:
    import dataclasses

    return dataclasses.replace(problem, file=str(out_path)) if problem.file == str(check) else problem
