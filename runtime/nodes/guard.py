"""Guard: checks a line against the designer's named policies before the graph acts on it, and
branches on the first policy the line breaks.

What it checks is ``input``: the player's line (empty), or a slot. A slot that is a player-facing
node's output (its id) is that node's reply *before it is spoken*: the agent holds the node's
tokens and sentences back until the guard has run (``checks_reply_of``); a broken policy
withdraws the reply (the player never sees it, and later turns never replay it). Such a reply
guard also checks every other player-facing node wired into it (an exit leading to it): the agent
holds their replies too, and the guard checks the one that led to it this turn, so one guard can
keep a secret for all of an NPC's speaking nodes. A slot that is a Tool Call's result checks what
the game handed the NPC (an item's name, a sign's text).

Each policy is an exit (port ``policy:NAME``, stored in ``policies.N.exit``); a line that breaks
none takes ``default_exit``. A policy's ``reply`` is a canned line the guard says itself, so a
refusal needs no node of its own; its exit can still lead to an in-character refusal node.

The checks run cheapest first, and the first that finds a broken policy decides:

- **patterns**: the policy's own regular expressions and the shipped lists it names (``packs``:
  ``resources/guard/NAME.txt``, or a ``.txt`` file beside the asset), searched within limits
  (``runtime.patterns``);
- **a plugin**: a ``parley.guard_checks`` entry point, such as a dedicated classifier model a
  studio brings (``GuardRequest`` in, ``GuardVerdict`` or None out);
- **the model**: a grammar-constrained question to the node's own model and context, told the
  policies' descriptions; it may answer only a policy's name or ``ok``.

Every check that ran is in the node's diagnostics (``guard``): what fired, why, and its time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from runtime.diagnostics import GuardCheck, GuardRecord
from runtime.dialogue.history import Reply
from runtime.events import Guarded, SentenceSplitter, Speak, Token
from runtime.nodes.base import (
    END,
    OPTIONAL_SLOT_PATTERN,
    SLOT_PATTERN,
    FieldError,
    ModelUse,
    Strict,
    field_help,
    unique_names,
)
from runtime.nodes.checks import NodeChecks
from runtime.nodes.classifier import Classifier
from runtime.nodes.running import NodeRun, TurnError
from runtime.patterns import SEARCH_SECONDS, PatternError, compile_pattern
from runtime.resources import default_prompt, resources_dir

GUARD_MAX_TOKENS = 16
POLICY_PORT_PREFIX = "policy:"
PASS_LABELS = ("ok", "allowed", "passes")
LAST_PASS_LABEL = "no-policy-broken"  # a hyphen, which no policy name (SLOT_PATTERN) can hold
PLUGIN_GROUP = "parley.guard_checks"
MAX_PACK_PATTERNS = 2_000  # one pattern list; the shipped ones hold tens
MAX_CHECKED_CHARS = 20_000  # of the line a guard searches and records (a longer one is cut, and says so)
MAX_WHY_CHARS = 200


def policy_port(name: str) -> str:
    return f"{POLICY_PORT_PREFIX}{name}"


def port_policy(port: str) -> str | None:
    return port[len(POLICY_PORT_PREFIX):] if port.startswith(POLICY_PORT_PREFIX) else None


def pass_label(names: list[str]) -> str:
    """What the model check answers for a line that breaks no policy: a label no policy is named."""
    return next((label for label in PASS_LABELS if label not in names), LAST_PASS_LABEL)


# --- pattern lists ----------------------------------------------------------------------------

def shipped_packs() -> list[str]:
    """The names of the pattern lists shipped in ``resources/guard``."""
    return sorted(p.stem for p in (resources_dir() / "guard").glob("*.txt"))


def pack_path(name: str, asset_dir: str | None) -> Path:
    """Where the pattern list ``name`` is: a shipped one by name, else a file relative to the asset."""
    if not name.endswith(".txt"):
        return resources_dir() / "guard" / f"{name}.txt"
    path = Path(name)
    return path if path.is_absolute() or asset_dir is None else Path(asset_dir) / path


class PackError(ValueError):
    """A pattern list that cannot be read or holds a bad pattern; the message names the file and line."""


@functools.lru_cache(maxsize=64)
def _read_pack(path: str, stamp: tuple[int, int]) -> tuple[tuple[str, Any], ...]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PackError(f"{path}: cannot be read ({exc.__class__.__name__}: {exc})") from None
    patterns = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            patterns.append((line, compile_pattern(line)))
        except PatternError as exc:
            raise PackError(f"{path}, line {number}: {exc}") from None
        if len(patterns) > MAX_PACK_PATTERNS:
            raise PackError(f"{path}: more than {MAX_PACK_PATTERNS:,} patterns")
    return tuple(patterns)


def read_pack(name: str, asset_dir: str | None) -> tuple[tuple[str, Any], ...]:
    """The (pattern, compiled) pairs of pattern list ``name``. Raises ``PackError``."""
    path = pack_path(name, asset_dir)
    try:
        stat = path.stat()
    except OSError:
        known = ", ".join(shipped_packs())
        raise PackError(f"no pattern list {name!r} ({path} does not exist); shipped lists: {known}, "
                        "or a .txt file beside the asset") from None
    return _read_pack(str(path), (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    return compile_pattern(pattern)


def find(compiled: Any, text: str) -> str | None:
    """The text ``compiled`` matches in ``text``, or None. Raises ``PatternError`` on a runaway search."""
    try:
        found = compiled.search(text, timeout=SEARCH_SECONDS, concurrent=True)
    except TimeoutError:
        raise PatternError(f"gave up after {SEARCH_SECONDS:g} s: the pattern backtracks without end") from None
    return None if found is None else found.group(0)


# --- plugins ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GuardRequest:
    """What a plugin check is asked: the text, the policies (name, description), what is checked
    (``line``: the player's or a slot's; ``reply``: a reply not yet spoken) and the node's id."""

    text: str
    policies: tuple[tuple[str, str], ...]
    checking: Literal["line", "reply"]
    node: str


@dataclass(frozen=True)
class GuardVerdict:
    """A plugin's answer when the text breaks a policy: its name and why (shown in the inspector)."""

    policy: str
    why: str = ""


GuardCheckFunction = Callable[[GuardRequest], "GuardVerdict | None"]


def guard_plugins() -> dict[str, metadata.EntryPoint]:
    return {p.name: p for p in metadata.entry_points(group=PLUGIN_GROUP)}


@functools.cache
def load_guard_plugin(name: str) -> GuardCheckFunction:
    """The check function of the ``parley.guard_checks`` entry point ``name``. Raises LookupError or
    TypeError saying why not."""
    point = guard_plugins().get(name)
    if point is None:
        known = ", ".join(sorted(guard_plugins())) or "none are installed"
        raise LookupError(f"no guard check plugin {name!r} ({PLUGIN_GROUP} entry points: {known})")
    loaded = point.load()
    if not callable(loaded):
        raise TypeError(f"{point.value} is a {type(loaded).__name__}, not a function of a GuardRequest")
    return loaded


# --- the node ---------------------------------------------------------------------------------

class GuardPolicy(Strict):
    name: str = Field(pattern=SLOT_PATTERN, description="The policy's name: its exit, and what reports and the game are told.")
    description: str = Field("", description="What breaks this policy, in words: what the model check is told. Empty: the model check skips it.")
    packs: list[str] = Field(default_factory=list, description="Shipped pattern lists (narration, role_override, secret_probe, out_of_world, game_content, multilingual) or .txt files beside the asset.")
    patterns: list[str] = Field(default_factory=list, description="Regular expressions of its own, searched case-blind (a secret's words, for a reply guard).")
    reply: str = Field("", description="A canned line the guard says when this policy is broken. Empty says nothing here.")
    exit: str = Field(END, description="Node that runs when this policy is broken. Empty ends the turn.")

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"name": f"policy_{number}", "description": "", "packs": [], "patterns": [], "reply": "", "exit": ""}

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                _compiled(pattern)
            except PatternError as exc:
                raise FieldError(f"patterns.{index}", f"pattern {index + 1}: {exc}") from None
        return patterns


class Guard(Classifier):
    type: Literal["Guard"] = "Guard"
    input: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, **field_help(
        "What is checked. Empty: the player's line, before the graph answers. A player-facing node's id: its reply, "
        "held back until the guard passes it (and the reply of any other speaking node wired into this guard). "
        "A Tool Call's id: what the game answered.", "Guard"))
    policies: list[GuardPolicy] = Field(default_factory=list, **field_help(
        "The rules a line must keep; the first one broken takes its own exit.", "Policies"))
    check_patterns: bool = Field(True, **field_help("Search each policy's patterns and pattern lists (fast, exact).", "Guard"))
    check_plugin: str = Field("", **field_help(f"A {PLUGIN_GROUP} entry point to ask as well (a studio's own classifier). Empty asks none.", "Guard"))
    check_model: bool = Field(False, **field_help(
        "Also ask this node's model whether the line breaks a policy's description. Slower, and only as good as the "
        "model: the 135M sample model flags benign lines too; measure it with a red-team run.", "Guard"))
    system_prompt: str = Field(default_factory=lambda: default_prompt("guard_system"), **field_help(
        "Instructions for the model check.", "Model", multiline=True))
    context_size: int = Field(1024, ge=0, le=1_048_576, **field_help("The model check's own context window. 0 uses the model's size.", "Model"))
    slot: str = Field("guard", pattern=SLOT_PATTERN, **field_help("Slot the broken policy's name is written to ('' when the line passes).", "Guard"))
    default_exit: str = Field(END, **field_help("Node that runs when the line breaks no policy. Empty ends the turn.", "Exits"))

    # Its canned lines are replies the player hears.
    PLAYER_FACING: ClassVar[bool] = True
    CHECK_READS_FILES: ClassVar[bool] = True  # its pattern lists

    _unique_policies = unique_names("policies", "policy")

    def speaks(self) -> bool:
        return True

    def uses_model(self) -> bool:
        return self.check_model

    def model_uses(self) -> list[ModelUse]:
        return super().model_uses() if self.check_model else []

    def checks_reply_of(self) -> str:
        return self.input

    def guards_the_line(self) -> bool:
        return not self.input

    # --- exits ------------------------------------------------------------------------------

    def exits(self) -> dict[str, str]:
        out = {policy_port(p.name): p.exit for p in self.policies}
        out["default_exit"] = self.default_exit
        return out

    def exit_field(self, port: str) -> str:
        name = port_policy(port)
        if name is not None:
            for index, policy in enumerate(self.policies):
                if policy.name == name:
                    return f"policies.{index}.exit"
            raise KeyError(port)
        return super().exit_field(port)

    def exit_label(self, port: str) -> str:
        name = port_policy(port)
        return name if name is not None else ("passes" if port == "default_exit" else super().exit_label(port))

    def exit_line_kind(self, port: str) -> str:
        name = port_policy(port)
        for policy in self.policies:
            if policy.name == name:
                return (f"a line that breaks this rule: {policy.description.strip().rstrip('.')}" if policy.description
                        else f"a line that breaks the rule {policy.name.replace('_', ' ')!r}")
        return "an ordinary line that breaks none of the rules" if port == "default_exit" else ""

    # --- the model check ----------------------------------------------------------------------

    def _described(self) -> list[GuardPolicy]:
        return [p for p in self.policies if p.description.strip()]

    def instructions(self) -> str:
        names = [p.name for p in self._described()]
        lines = [f"- {p.name}: {p.description.strip()}" for p in self._described()]
        lines.append(f"- {pass_label(names)}: the text breaks none of the rules above")
        return f"{self.system_prompt.strip()}\n\nRules:\n" + "\n".join(lines)

    def answer_tokens(self, context_size: int) -> int:
        return GUARD_MAX_TOKENS

    def answer_constraint(self) -> dict[str, Any]:
        names = [p.name for p in self._described()]
        return {"choices": names + [pass_label(names)]}

    # --- running ------------------------------------------------------------------------------

    def _held_reply(self, run: NodeRun) -> str:
        """The held reply this guard checks: the node that led here when its reply is held back (a
        speaking node wired into a reply guard), else ``input``'s when it is held; '' for none."""
        path = run.turn.path
        before = path[-2] if len(path) > 1 and path[-1] == self.id else ""
        if before and before in run.turn.held and before in run.turn.slots:
            return before
        return self.input if self.input in run.turn.held else ""

    def run(self, run: NodeRun) -> str:
        started = time.perf_counter()
        held = self._held_reply(run)
        source = held or self.input
        if source and source not in run.turn.slots:
            # Nothing to check (a Tool Call that called no tool): nothing breaks a policy.
            run.diag.warnings.append(f"slot {source!r} was not written this turn; the guard checked nothing "
                                     "and passed the turn on")
        text = run.line(source) if not source or source in run.turn.slots else ""
        checked = text[:MAX_CHECKED_CHARS]
        record = GuardRecord(checked="reply" if held else "line", text=checked)
        run.diag.guard = record
        if len(text) > MAX_CHECKED_CHARS:
            run.diag.warnings.append(f"the line is {len(text):,} characters; only the first {MAX_CHECKED_CHARS:,} were checked")
        verdict = None
        if self.check_patterns:
            verdict = self._timed(record, "patterns", lambda: self._patterns(run, checked))
        if verdict is None and self.check_plugin:
            verdict = self._timed(record, f"plugin:{self.check_plugin}", lambda: self._plugin(run, checked, held))
        if verdict is None and self.check_model and self._described():
            verdict = self._timed(record, "model", lambda: self._model(run))
        record.ms = round((time.perf_counter() - started) * 1000, 3)
        if verdict is None:
            run.turn.slots[self.slot] = ""
            if held:
                run.turn.release(held)
            return "default_exit"

        policy = next(p for p in self.policies if p.name == verdict.policy)
        record.policy, record.why = policy.name, verdict.why
        run.turn.slots[self.slot] = policy.name
        if held:
            run.turn.withdraw(held)
            record.withdrew = held
        check = record.checks[-1].check
        run.emit(Guarded(self.id, policy.name, policy_port(policy.name), check, verdict.why, record.checked))
        if policy.reply:
            self._say(run, policy.reply)
        return policy_port(policy.name)

    def _timed(self, record: GuardRecord, name: str, check: Callable[[], GuardVerdict | None]) -> GuardVerdict | None:
        started = time.perf_counter()
        verdict = check()
        record.checks.append(GuardCheck(
            check=name, policy=verdict.policy if verdict else "", why=verdict.why if verdict else "",
            ms=round((time.perf_counter() - started) * 1000, 3)))
        return verdict

    def _patterns(self, run: NodeRun, text: str) -> GuardVerdict | None:
        for index, policy in enumerate(self.policies):
            for pattern in policy.patterns:
                found = self._search(_compiled(pattern), text, f"policies.{index}.patterns")
                if found is not None:
                    return GuardVerdict(policy.name, _why(found, pattern, "its own pattern"))
            for pack in policy.packs:
                try:
                    patterns = read_pack(pack, run.asset_dir)
                except PackError as exc:
                    raise TurnError(str(exc), self.id, f"policies.{index}.packs") from None
                for pattern, compiled in patterns:
                    found = self._search(compiled, text, f"policies.{index}.packs")
                    if found is not None:
                        return GuardVerdict(policy.name, _why(found, pattern, f"list {pack!r}"))
        return None

    def _search(self, compiled: Any, text: str, field: str) -> str | None:
        try:
            return find(compiled, text)
        except PatternError as exc:
            raise TurnError(f"{compiled.pattern[:80]!r}: {exc}", self.id, field) from None

    def _plugin(self, run: NodeRun, text: str, held: str) -> GuardVerdict | None:
        try:
            check = load_guard_plugin(self.check_plugin)
        except Exception as exc:  # noqa: BLE001 - any failure to load is the node's problem, named
            raise TurnError(f"the guard check plugin could not be loaded: {exc}", self.id, "check_plugin") from None
        request = GuardRequest(text, tuple((p.name, p.description) for p in self.policies),
                               "reply" if held else "line", self.id)
        verdict = check(request)
        if verdict is None or (isinstance(verdict, GuardVerdict) and not verdict.policy):
            return None
        names = [p.name for p in self.policies]
        if not isinstance(verdict, GuardVerdict) or verdict.policy not in names:
            raise TurnError(f"the guard check plugin {self.check_plugin!r} answered {verdict!r:.120}, not None or a "
                            f"GuardVerdict naming one of the policies ({', '.join(names)})", self.id, "check_plugin")
        return GuardVerdict(verdict.policy, str(verdict.why)[:MAX_WHY_CHARS])

    def _model(self, run: NodeRun) -> GuardVerdict | None:
        result = self.ask(run, "passed the line")
        answer = result.text.strip() if result is not None else ""
        if answer in {p.name for p in self._described()}:
            return GuardVerdict(answer, "the model answered this policy")
        return None

    def _say(self, run: NodeRun, line: str) -> None:
        run.diag.output = line
        run.turn.entries.append(Reply(self.id, line, True))
        run.turn.replies.append(line)
        run.emit(Token(self.id, line, True))
        splitter = SentenceSplitter()
        for sentence in [*splitter.feed(line), *splitter.flush()]:
            run.emit(Speak(self.id, sentence, True))

    # --- validation ---------------------------------------------------------------------------

    def check(self, checks: NodeChecks) -> None:
        if not self.policies:
            checks.warning("no policies: every line passes", "policies")
        if not (self.check_patterns or self.check_plugin or self.check_model):
            checks.warning("no check is on: every line passes. Turn on check_patterns, check_model or "
                           "name a check_plugin.", "check_patterns")
        for index, policy in enumerate(self.policies):
            if self.check_patterns and not (policy.patterns or policy.packs) and not (
                    (self.check_model or self.check_plugin) and policy.description.strip()):
                checks.warning(f"policy {policy.name!r} has no patterns or pattern lists"
                               + (" and no description" if self.check_model else "")
                               + ": nothing can break it", f"policies.{index}")
            for pack in policy.packs:
                try:
                    read_pack(pack, checks.asset_dir)
                except PackError as exc:
                    checks.error(str(exc), f"policies.{index}.packs")
            if not policy.reply and policy.exit == END:
                checks.warning(f"policy {policy.name!r} has no reply and no exit: when it is broken the turn ends "
                               "and the player gets no answer. Give it a reply or connect its exit.",
                               f"policies.{index}.reply")
        if self.check_model and not self._described():
            checks.warning("check_model is on but no policy has a description: the model is never asked",
                           "check_model")
        if self.check_plugin and self.check_plugin not in guard_plugins():
            known = ", ".join(sorted(guard_plugins())) or "none are installed"
            checks.error(f"no guard check plugin {self.check_plugin!r} ({PLUGIN_GROUP} entry points: {known})",
                         "check_plugin")


def _why(found: str, pattern: str, where: str) -> str:
    shown = found if len(found) <= 60 else found[:57] + "\u2026"
    source = pattern if len(pattern) <= 80 else pattern[:77] + "\u2026"
    return f"{shown!r} matched {where}: {source}"[:MAX_WHY_CHARS]
