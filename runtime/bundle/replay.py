"""Replaying a repro bundle: every exact turn of its conversation tree again, parents before children,
in a fresh embedded engine made with the bundle's settings and model files, each compared with what
was recorded, byte for byte.

A turn is replayed from its parent's recorded state (history, summaries, window starts, variables and
each node's decode journal), so each turn is checked on its own: the engine rebuilds every node's
cache from the parent's journal as it was first read, says the turn's player line again (tool calls
are answered with the recorded results) and must leave each node's journal exactly as recorded (the
prompt's tokens in the same chunks, then the same generated tokens) and, unless the designer edited
the turn, write the same replies. The first difference is named by turn, node and token.

Turns are skipped, and say why, when nothing of theirs can be checked: a state reconstructed from a
history that kept no tree, and turns the designer wrote (seeded) that no model read.
"""

from __future__ import annotations

import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any, Literal

from runtime.agent import Agent, TurnError
from runtime.backends.base import Backend, Reproducibility
from runtime.backends.llama import LlamaBackend
from runtime.bundle.file import Bundle, BundleError, LlamaBuild, ModelFile, bundle_path_problem, model_sha256
from runtime.dialogue.dialog_file import HistoryError
from runtime.dialogue.history import Entry, Reply
from runtime.dialogue.tree import ConversationTree, TurnNode
from runtime.models.folder import ModelFileError, models_dir, resolve_model
from runtime.models.journal import EMPTY, Chunk, DecodeJournal, common_prefix
from runtime.nodes.running import TurnCancelled
from runtime.problems import BackendError, InputError, Problem
from runtime.session.session import Session
from runtime.session.tools import recorded_answers

Outcome = Literal["identical", "different", "failed", "skipped"]


@dataclass(frozen=True)
class Difference:
    """Where a replayed turn first departs from the recorded one."""

    node: str
    what: str  # "generated token", "prompt token", "reading", "reply token", "entries" or "failed"
    token: int | None = None  # generated tokens: which one of the call's (from 0); reply tokens: which one
    position: int | None = None  # the cell of the node's cache it is in
    recorded: str = ""  # the recorded token's text (or what was recorded, in words)
    replayed: str = ""
    recorded_id: int | None = None  # token ids, where a token differs
    replayed_id: int | None = None
    detail: str = ""

    def describe(self) -> str:
        node = f"node {self.node}" if self.node else "the turn"
        if self.what == "failed":
            return f"{node} failed: {self.detail}"
        if self.what in ("generated token", "prompt token", "reply token"):
            where = f"{self.what} {self.token}" if self.token is not None else self.what
            if self.position is not None:
                where += f" (cache position {self.position})"
            return (f"{node}, {where}: recorded {_shown(self.recorded, self.recorded_id)}, "
                    f"replayed {_shown(self.replayed, self.replayed_id)}")
        return f"{node}, {self.what}: {self.detail}"


def _shown(text: str, token: int | None) -> str:
    if token is None:
        return text or "nothing (it ended there)"
    return f"{text!r} (token {token})"


@dataclass(frozen=True)
class TurnReplay:
    turn_id: int
    index: int  # its position on its path (turns count from 0; shown from 1)
    player: str
    outcome: Outcome
    difference: Difference | None = None
    reason: str = ""  # why it was skipped, or what an identical turn could not be checked for
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"turn {self.index + 1} (id {self.turn_id})"

    def describe(self) -> str:
        if self.outcome == "identical":
            return f"{self.label}: identical" + (f" ({self.reason})" if self.reason else "")
        if self.outcome == "skipped":
            return f"{self.label}: skipped ({self.reason})"
        assert self.difference is not None
        return f"{self.label}: {self.outcome.upper()}: {self.difference.describe()}"


@dataclass
class ReplayReport:
    source: str
    turns: list[TurnReplay] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what may explain a difference (another build, a forced model)
    reproducibility: Reproducibility | None = None  # what the replaying engine promises
    stopped_early: bool = False  # stopped at the first difference

    @property
    def identical(self) -> bool:
        """No turn differed or failed (skipped turns are said, not counted)."""
        return all(t.outcome in ("identical", "skipped") for t in self.turns)

    @property
    def first_difference(self) -> TurnReplay | None:
        return next((t for t in self.turns if t.outcome in ("different", "failed")), None)

    def count(self, outcome: Outcome) -> int:
        return sum(t.outcome == outcome for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        def turn(t: TurnReplay) -> dict[str, Any]:
            return {"turn_id": t.turn_id, "turn": t.index + 1, "player": t.player, "outcome": t.outcome,
                    "difference": None if t.difference is None else {**asdict(t.difference),
                                                                     "text": t.difference.describe()},
                    "reason": t.reason, "seconds": round(t.seconds, 3)}

        first = self.first_difference
        return {
            "bundle": self.source,
            "identical": self.identical,
            "turns": [turn(t) for t in self.turns],
            "first_difference": None if first is None else turn(first),
            "notes": list(self.notes),
            "reproducibility": None if self.reproducibility is None else asdict(self.reproducibility),
            "stopped_early": self.stopped_early,
        }


# --- the engine ---------------------------------------------------------------------------------


class ReplayBackend(LlamaBackend):
    """The embedded engine with the bundle's settings, each model name the asset uses pinned to the
    file checked against the bundle's hash."""

    def __init__(self, files: Mapping[str, Path], asset_dir: str | None = None, **settings: Any) -> None:
        super().__init__(asset_dir, **settings)
        self._files = dict(files)

    def model_path(self, model: str) -> Path:
        pinned = self._files.get(model)
        return pinned if pinned is not None else super().model_path(model)


def model_files(bundle: Bundle, given: Sequence[str | Path] = (), force: bool = False
                ) -> tuple[dict[str, Path], list[str]]:
    """Each model name of the bundle -> the file on this machine that hashes as recorded, and notes.
    ``given`` are files named on the command line (the bundle's only model, or the one with the same
    file name); else the name as the asset gives it, then the file name in the models folder. Raises
    ``BundleError``: a model not found, or a file with another hash (unless ``force``: then a note)."""
    files: dict[str, Path] = {}
    notes: list[str] = []
    given_paths = [Path(p) for p in given]
    for path in given_paths:
        if not (len(bundle.models) == 1 or any(m.file == path.name for m in bundle.models)):
            names = ", ".join(m.file for m in bundle.models) or "none"
            raise BundleError([Problem("error", f"--model {path} is none of the bundle's models (by file name: "
                                       f"{names})", bundle.source, field="models")])
    for i, model in enumerate(bundle.models):
        where = f"models.{i}"
        chosen = [p for p in given_paths if len(bundle.models) == 1 or p.name == model.file]
        if chosen:
            path = chosen[0]
            if not path.exists():
                raise BundleError([Problem("error", f"--model {path}: no such file", bundle.source, field=where)])
        else:
            found = _found(model)
            if found is None:
                raise BundleError([Problem(
                    "error", f"the model {model.file} (SHA-256 {model.sha256}) is not on this machine: looked for "
                    f"{model.name!r} and for {model.file} in the models folder ({models_dir()}). Put it there, or "
                    "give its path with --model", bundle.source, field=where)])
            path = found
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                raise BundleError([Problem("error", f"{path} is not a regular file (a device, a pipe, a folder): it "
                                           "is not read", bundle.source, field=where)])
            # a file of another size is another file: it is not read (a name the bundle gives could be
            # anything on this machine, a file that never ends among them)
            digest = model_sha256(path) if info.st_size == model.size else None
        except OSError as exc:
            raise BundleError([Problem("error", f"cannot read {path}: {exc.strerror or exc}", bundle.source,
                                       field=where)]) from None
        if digest != model.sha256:
            said = (f"{path} has SHA-256 {digest}" if digest is not None else f"{path} has {info.st_size} bytes") + (
                f", but the bundle was recorded on {model.file} with " + (
                    f"SHA-256 {model.sha256}" if digest is not None else f"{model.size} bytes"))
            if not force:
                raise BundleError([Problem("error", f"{said}: another file gives other numbers. Give the bundle's "
                                           "model with --model, or --force to replay on this one anyway",
                                           bundle.source, field=f"{where}.sha256")])
            notes.append(f"{said}; replayed on it anyway (--force), so a difference may come from the model")
        files[model.name] = path.resolve()
    return files, notes


def _found(model: ModelFile) -> Path | None:
    """The first file named as recorded that has the recorded size (else the first found at all)."""
    candidates: list[Path] = []
    for name in (model.name, model.file):
        if bundle_path_problem(name.replace("\\", "/")) is not None:
            continue  # an absolute path, or one going up: another machine's, never looked for here
        try:
            path = resolve_model(name)
        except ModelFileError:
            continue
        if path not in candidates:
            candidates.append(path)
    for path in candidates:
        try:
            if path.stat().st_size == model.size:
                return path
        except OSError:
            continue
    return candidates[0] if candidates else None


def build_notes(bundle: Bundle, here: LlamaBuild) -> list[str]:
    """What, besides the conversation, may make this replay differ from the recording."""
    notes = []
    if bundle.llama.version != here.version:
        notes.append(f"recorded on llama-cpp-python {bundle.llama.version}, replayed on {here.version}: another "
                     "llama.cpp may compute other numbers")
    if bundle.llama.system_info != here.system_info:
        notes.append(f"llama.cpp here was built for other CPU features (recorded: {bundle.llama.system_info}; "
                     f"here: {here.system_info}): other kernels may compute other numbers")
    if not bundle.reproducibility.exact:
        notes.append(f"the backend it was recorded on promised no exact replay: {bundle.reproducibility.note}")
    for node, seed in sorted(bundle.seeds.items()):
        if seed < 0:
            notes.append(f"node {node} samples with a random seed (-1): its replies cannot repeat")
    return notes


# --- replaying ----------------------------------------------------------------------------------


def replay_bundle(bundle: Bundle, models: Sequence[str | Path] = (), *, force: bool = False,
                  asset_dir: str | None = None, stop_at_first: bool = False,
                  on_turn: Callable[[TurnReplay], None] | None = None,
                  cancel: threading.Event | None = None, backend: Backend | None = None) -> ReplayReport:
    """Replay every exact turn of ``bundle`` in a fresh engine (see the module's docstring). The graph
    replayed is the bundle's own (``Bundle.runs``): its behaviours expanded from the files the bundle
    holds, never from the disk. Raises ``BundleError`` when a model file is missing or differs
    (``force``: replay anyway), or the conversation does not fit the asset; ``BackendError`` when the
    engine cannot be made; ``TurnCancelled`` once ``cancel`` is set. ``backend``: replay on this engine
    instead (a test's deterministic one; its models and settings are its own, so none is checked)."""
    owned = backend is None
    if owned:
        files, notes = model_files(bundle, models, force)
        notes += build_notes(bundle, LlamaBuild.here())
        backend = ReplayBackend(files, asset_dir, **bundle.settings.backend_arguments())
    else:
        notes = [f"replayed on {type(backend).__name__}, not on the bundle's engine and models"]
    report = ReplayReport(bundle.source, notes=notes)
    try:
        report.reproducibility = backend.reproducibility()
        if not report.reproducibility.exact:
            report.notes.append(f"this engine promises no exact replay: {report.reproducibility.note}")
        for node, recorded in sorted(bundle.contexts.items()) if owned else ():
            mine = backend.context_params(recorded.params.n_ctx)  # type: ignore[attr-defined]
            if mine != recorded.params:
                report.notes.append(f"node {node}'s context is made here with {mine}, where the bundle's was "
                                    f"{recorded.params}: a difference may come from that")
        agent = Session(bundle.runs, backend, asset_dir).agent
        try:
            agent.import_dialog(bundle.conversation, bundle.source)
        except HistoryError as exc:
            raise BundleError([Problem(p.severity, p.message, bundle.source, field=".".join(
                x for x in ("conversation", p.node_id, p.field) if x)) for p in exc.problems]) from None
        tree = agent.tree.copy()  # the recorded tree: replayed turns are added to the agent's, not to it
        for turn_id in tree.parents_first():
            replayed = _replay_turn(agent, backend, tree, tree.nodes[turn_id], cancel)
            report.turns.append(replayed)
            if on_turn is not None:
                on_turn(replayed)
            if stop_at_first and replayed.outcome in ("different", "failed"):
                report.stopped_early = True
                break
    finally:
        if owned:
            backend.close()
    return report


def _replay_turn(agent: Agent, backend: Backend, tree: ConversationTree, node: TurnNode,
                 cancel: threading.Event | None) -> TurnReplay:
    index = tree.depth(node.id)

    def outcome(kind: Outcome, difference: Difference | None = None, reason: str = "") -> TurnReplay:
        return TurnReplay(node.id, index, node.turn.player, kind, difference, reason, time.perf_counter() - started)

    started = time.perf_counter()
    before = tree.state_after(node.parent)
    if not node.exact:
        return outcome("skipped", reason="its state was reconstructed from a history that kept no tree")
    if node.edited and node.after.journals == before.journals:
        return outcome("skipped", reason="written by the designer; no model read it")
    agent.go_to(node.parent)
    agent.reroll_seeds(node.after.seed_salt)  # the salt the turn was generated with
    try:
        result = agent.run_turn(node.turn.player, tool_result=recorded_answers(node.turn), cancel=cancel)
    except TurnCancelled:
        raise
    except (TurnError, BackendError, InputError) as exc:
        return outcome("failed", Difference(getattr(exc, "node_id", "") or "", "failed", detail=str(exc)))
    # A turn that came out as the recorded one is that turn again: the agent reads on from it as read
    # ahead after it (``AgentState.warmed``), so its journals are compared with those.
    recorded_journals = node.after.reading() if result.repeated else node.after.journals
    order = list(dict.fromkeys([*result.path, *sorted({*recorded_journals, *agent.journals})]))
    # A model-backed node that has no journal in the recorded states around the turn was not tracked
    # (a history written before journals, a turn that ran on a server): only its replies can be
    # compared. A node that reads no model (a Subgraph node, a behaviour's Exit) never has one.
    reads = {n.id for n in agent.asset.nodes if n.model_uses()}
    untracked = [key for key in order if key in reads and key not in recorded_journals
                 and key not in before.journals]
    for key in order:
        recorded = recorded_journals.get(key, EMPTY)
        mine = agent.journals.get(key, EMPTY)
        if recorded != mine and key not in untracked:
            return outcome("different", _journal_difference(key, recorded, mine, backend, agent))
    if not node.edited:
        difference = _entries_difference(node.turn.entries, agent.tree.nodes[result.turn_id].turn.entries,
                                         backend, agent)
        if difference is not None:
            return outcome("different", difference)
    if untracked and not node.edited:
        return outcome("identical", reason=f"replies only: no decode journal was recorded for {', '.join(untracked)}")
    if untracked:
        return outcome("skipped", reason=f"edited by the designer, and no decode journal was recorded for "
                       f"{', '.join(untracked)}")
    return outcome("identical")


def _model_of(agent: Agent, node_id: str) -> str:
    try:
        return agent.model_for(agent.asset.node(node_id))
    except KeyError:
        return ""


def _text(backend: Backend, model: str, token: int | None) -> str:
    if token is None:
        return ""
    try:
        return backend.token_text(model, token) if model and hasattr(backend, "token_text") else f"#{token}"
    except BackendError:
        return f"#{token}"


def _chunk_words(c: Chunk) -> str:
    if c.singles:
        return f"{c.kept} token{'s' if c.kept != 1 else ''} read one at a time"
    kept = f" ({c.kept} kept)" if c.kept != len(c.tokens) else ""
    return f"a chunk of {len(c.tokens)} tokens{kept}"


def _journal_difference(node: str, recorded: DecodeJournal, mine: DecodeJournal, backend: Backend,
                        agent: Agent) -> Difference:
    """The first token (or chunk) at which two journals of ``node`` part."""
    model = _model_of(agent, node)

    def token(what: str, index: int | None, position: int, a: int | None, b: int | None) -> Difference:
        return Difference(node, what, index, position, _text(backend, model, a), _text(backend, model, b), a, b)

    at = 0
    for a, b in zip(recorded.chunks, mine.chunks):
        if a == b:
            at += a.kept
            continue
        if a.singles and b.singles:
            k = common_prefix(a.held, b.held)
            return token("generated token", k, at + k, a.held[k] if k < a.kept else None,
                         b.held[k] if k < b.kept else None)
        k = common_prefix(a.tokens, b.tokens)
        if k < len(a.tokens) and k < len(b.tokens) and not a.singles and not b.singles:
            return token("prompt token", at + k, at + k, a.tokens[k], b.tokens[k])
        return Difference(node, "reading", position=at,
                          detail=f"from cache position {at} the recording read {_chunk_words(a)}, the replay "
                          f"{_chunk_words(b)}")
    longer, shorter, who = (recorded, mine, "recording") if len(recorded.chunks) > len(mine.chunks) else \
        (mine, recorded, "replay")
    extra = longer.chunks[len(shorter.chunks)]
    if extra.singles:
        a, b = (extra.tokens[0], None) if who == "recording" else (None, extra.tokens[0])
        return token("generated token", 0, at, a, b)
    return Difference(node, "reading", position=at,
                      detail=f"from cache position {at} only the {who} read on ({_chunk_words(extra)})")


def _entry_words(entry: Entry | None) -> str:
    if entry is None:
        return "nothing"
    if isinstance(entry, Reply):
        return f"a reply by {entry.node}: {entry.text!r}"
    return f"{entry.node}'s call of {entry.tool}({entry.arguments}) -> {entry.result!r}"


def _entries_difference(recorded: list[Entry], mine: list[Entry], backend: Backend,
                        agent: Agent) -> Difference | None:
    """The first reply token (or entry) at which a turn's recorded and replayed entries part."""
    for a, b in zip_longest(recorded, mine):
        if a == b:
            continue
        if isinstance(a, Reply) and isinstance(b, Reply) and a.node == b.node and a.text != b.text:
            model = _model_of(agent, a.node)
            try:
                ours, theirs = backend.tokenize(model, a.text), backend.tokenize(model, b.text)  # type: ignore[attr-defined]
            except (BackendError, AttributeError):  # an engine that does not tokenize (a test's)
                ours, theirs = [], []
            k = common_prefix(ours, theirs)
            if ours or theirs:
                x = ours[k] if k < len(ours) else None
                y = theirs[k] if k < len(theirs) else None
                return Difference(a.node, "reply token", k, None, _text(backend, model, x), _text(backend, model, y),
                                  x, y)
        node = (a or b).node  # type: ignore[union-attr]
        return Difference(node, "entries", detail=f"recorded {_entry_words(a)}; replayed {_entry_words(b)}")
    return None
