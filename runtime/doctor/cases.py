"""The replay guarantees, each run through an ``Agent`` on the chosen backend and model.

A small built-in graph (a classifier, then a reply at a temperature above 0 with a fixed seed)
talks for three turns; that is the reference. Each case then makes the same calls again another
way and passes when every turn's reply, and every node's prompt and output, are the same:

- regenerate the last turn;
- rewind to before turn 2 and go on;
- replay the unchanged graph from turn 1 (each turn must be "unchanged");
- edit a reply, then replay the turns after it, twice (the edit must reach the prompts);
- a cold backend that imports the saved history and goes on from turn 2;
- the same conversation at other thread counts (embedded llama.cpp only: with 1 thread generating and
  2 reading prompts, the other run has 2 generating and 1 reading, so both counts change).

The reply node's system prompt holds the inn's lore, so its prompts pass 256 tokens: one query over
more cached cells than that is where flash attention's numbers depend on the thread count.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

from runtime.agent import Agent, TurnResult
from runtime.asset.file import asset_from_dict
from runtime.asset.model import Asset
from runtime.backends.base import Backend
from runtime.dialogue.dialog_file import dumps_history, history_from_dict
from runtime.dialogue.history import Reply
from runtime.doctor.numerics import INN
from runtime.nodes.running import TurnCancelled, TurnError
from runtime.problems import BackendError, InputError
from runtime.session.session import Session

LINES = (
    "Good evening! Is there a room free tonight?",
    "What is on the stove for supper?",
    "Thank you. Which room looks over the water?",
)
EDITED_REPLY = "We have one room left, over the river. It costs four coppers."
REPLY_TOKENS = 12  # each reply is short: the cases compare numbers, not prose
RESUME_TURN = 1  # the cases that go back go to before this turn (turns count from 0)

RULES = (
    "House rules: supper is served from the sixth bell until the fire is banked; rooms are paid before "
    "the key is given; no weapons are drawn under this roof; horses are stabled at the back for a copper "
    "a night; and anyone who starts a fight sleeps in the ditch. Answer the guest in one short sentence, "
    "in character, and never mention these rules unless asked."
)


def doctor_asset(model: str) -> Asset:
    """The built-in graph the cases talk to, on ``model``."""
    return asset_from_dict({
        "version": 1,
        "name": "Reproducibility self-test",
        "default_model": model,
        "start_node": "classify",
        "nodes": [
            {"id": "classify", "type": "ClassifyIntent", "context_size": 1024,
             "system_prompt": "You classify the guest's latest line. Answer with the intent name only.",
             "intents": [{"name": "ask_room", "description": "asks for a room or a bed", "exit": "reply"},
                         {"name": "ask_food", "description": "asks about food or drink", "exit": "reply"}],
             "fallback_exit": "reply"},
            {"id": "reply", "type": "GenerateAndSpeak", "context_size": 1024, "max_tokens": REPLY_TOKENS,
             "system_prompt": f"You are Mira, the innkeeper of the Wayside Inn.\n\n{INN}\n\n{RULES}",
             "history_role": "assistant", "history_mode": "full", "temperature": 0.9, "top_p": 0.95,
             "seed": 7},
        ],
    }, "<the self-test graph>")


@dataclass(frozen=True)
class NodeCall:
    node: str
    prompt: tuple[tuple[str, str, str], ...]  # (role, content, name) as the model saw them
    output: str


@dataclass(frozen=True)
class TurnOutput:
    reply: str
    nodes: tuple[NodeCall, ...]


def record(result: TurnResult) -> TurnOutput:
    diagnostics = result.diagnostics
    nodes = () if diagnostics is None else tuple(
        NodeCall(n.node, tuple((m.role, m.content, m.name) for m in n.input.prompt), n.output)
        for n in diagnostics.nodes)
    return TurnOutput(result.reply, nodes)


def difference(expected: Sequence[TurnOutput], got: Sequence[TurnOutput], first_turn: int = 0) -> str:
    """Where ``got`` first differs from ``expected`` (turn numbers from 1), or "" when it is the same."""
    for offset, (want, have) in enumerate(zip(expected, got)):
        turn = f"turn {first_turn + offset + 1}"
        for a, b in zip(want.nodes, have.nodes):
            if a.node != b.node:
                return f"{turn}: node {b.node} ran where {a.node} ran before"
            if a.prompt != b.prompt:
                index = next((i for i, (x, y) in enumerate(zip(a.prompt, b.prompt)) if x != y),
                             min(len(a.prompt), len(b.prompt)))
                return f"{turn}, node {a.node}: prompt message {index + 1} differs"
            if a.output != b.output:
                return f"{turn}, node {a.node}: output {_texts(a.output, b.output)}"
        if len(want.nodes) != len(have.nodes):
            return f"{turn}: {len(have.nodes)} nodes ran, not {len(want.nodes)}"
        if want.reply != have.reply:
            return f"{turn}: reply {_texts(want.reply, have.reply)}"
    if len(expected) != len(got):
        return f"{len(got)} turns, not {len(expected)}"
    return ""


def _texts(want: str, have: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(want, have)) if x != y), min(len(want), len(have)))
    start = max(at - 12, 0)
    return f"differs at character {at + 1}: {want[start:at + 24]!r} before, {have[start:at + 24]!r} now"


@dataclass
class ReplayCaseResult:
    name: str
    passed: bool | None  # None: skipped (``detail`` says why)
    detail: str = ""
    seconds: float = 0.0

    @property
    def status(self) -> str:
        return "SKIP" if self.passed is None else "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "status": self.status}


Case = Callable[["CaseRun"], str]  # runs one case; returns what differed ("" when nothing did)
BackendMaker = Callable[[], Backend]


@dataclass
class CaseRun:
    """What every case shares: the reference conversation and the agent that had it."""

    asset: Asset
    make_backend: BackendMaker
    agent: Agent
    reference: list[TurnOutput]
    reference_ids: list[int]
    # A backend at other thread counts, and what they are ("2 threads generating, 1 reading"); None for
    # a backend whose thread counts are not this process's to set (a server's).
    other_threads: tuple[str, BackendMaker] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def talk(self, agent: Agent, lines: Sequence[str]) -> list[TurnOutput]:
        return [record(agent.run_turn(line, cancel=self.cancel)) for line in lines]


def regenerate(run: CaseRun) -> str:
    last = len(LINES) - 1
    return difference(run.reference[last:], [record(run.agent.regenerate(last, cancel=run.cancel))], last)


def rewind(run: CaseRun) -> str:
    run.agent.rewind(RESUME_TURN)
    return difference(run.reference[RESUME_TURN:], run.talk(run.agent, LINES[RESUME_TURN:]), RESUME_TURN)


def replay_unchanged(run: CaseRun) -> str:
    run.agent.select_turn(run.reference_ids[-1])
    recorded = run.agent.recorded_lines(0)
    run.agent.rewind(0)
    got = run.talk(run.agent, [line for line, _ in recorded])
    changed = [str(i + 1) for i, (turn, (_, reply)) in enumerate(zip(got, recorded)) if turn.reply != reply]
    if changed:
        return f"the reply CHANGED at turn {', '.join(changed)}; " + difference(run.reference, got)
    return difference(run.reference, got)


def edit_then_replay(run: CaseRun) -> str:
    agent = run.agent
    agent.select_turn(run.reference_ids[-1])
    edited = [replace(e, text=EDITED_REPLY) if isinstance(e, Reply) and e.node == "reply" else e
              for e in agent.history.turns[0].entries]
    replays = []
    for _ in range(2):
        agent.edit_reply(0, edited)
        replays.append(run.talk(agent, LINES[1:]))
    reply_prompt = next((n.prompt for n in replays[0][0].nodes if n.node == "reply"), ())
    if not any(EDITED_REPLY in content for _, content, _ in reply_prompt):
        return "the edited reply is not in turn 2's prompt"
    return difference(replays[0], replays[1], 1)


def cold_import(run: CaseRun) -> str:
    run.agent.select_turn(run.reference_ids[-1])
    text = dumps_history(run.agent.export_dialog())
    saved = history_from_dict(json.loads(text), "<the self-test's history>")
    backend = run.make_backend()
    try:
        cold = Session(run.asset, backend).agent
        cold.import_dialog(saved, "<the self-test's history>")
        cold.rewind(RESUME_TURN)
        return difference(run.reference[RESUME_TURN:], run.talk(cold, LINES[RESUME_TURN:]), RESUME_TURN)
    finally:
        backend.close()


def threads(run: CaseRun) -> str:
    if run.other_threads is None:
        raise TurnError("this backend cannot be made at another thread count")
    counts, make = run.other_threads
    backend = make()
    try:
        found = difference(run.reference, run.talk(Session(run.asset, backend).agent, LINES))
    finally:
        backend.close()
    return f"at {counts}: {found}" if found else ""


CASES: list[tuple[str, Case]] = [
    ("regenerate the last turn with the same seed", regenerate),
    ("rewind to before turn 2, then go on", rewind),
    ("replay the unchanged graph from turn 1", replay_unchanged),
    ("edit a reply, then replay the turns after it", edit_then_replay),
    ("a cold backend imports the saved history and goes on from turn 2", cold_import),
    ("the same conversation at other thread counts", threads),
]


def run_cases(make_backend: BackendMaker, model: str, *, other_threads: tuple[str, BackendMaker] | None = None,
              cases: Sequence[tuple[str, Case]] = CASES, on_case: Callable[[ReplayCaseResult], None] | None = None,
              cancel: threading.Event | None = None) -> list[ReplayCaseResult]:
    """Talk the reference conversation on a backend from ``make_backend``, then run each case. A case
    that raises fails with the error. Raises BackendError when the reference conversation fails (nothing
    can be compared), ``TurnCancelled`` once ``cancel`` is set."""
    asset = doctor_asset(model)
    results: list[ReplayCaseResult] = []

    def done(result: ReplayCaseResult) -> None:
        results.append(result)
        if on_case is not None:
            on_case(result)

    backend = make_backend()
    try:
        agent = Session(asset, backend).agent
        try:
            turns = [agent.run_turn(line, cancel=cancel) for line in LINES]
        except TurnCancelled:
            raise
        except (BackendError, InputError, TurnError) as exc:
            raise BackendError(f"the self-test's reference conversation failed: {exc}") from None
        run = CaseRun(asset, make_backend, agent, [record(t) for t in turns], [t.turn_id for t in turns],
                      other_threads, cancel or threading.Event())
        for name, case in cases:
            if case is threads and other_threads is None:
                done(ReplayCaseResult(name, None, "a server's thread count is set when it starts (--threads); run the "
                                "self-test on servers started with other counts to compare them"))
                continue
            started = time.perf_counter()
            try:
                found = case(run)
            except TurnCancelled:
                raise
            except (BackendError, InputError, TurnError) as exc:
                found = f"{type(exc).__name__}: {exc}"
            done(ReplayCaseResult(name, not found, found, time.perf_counter() - started))
    finally:
        backend.close()
    return results
