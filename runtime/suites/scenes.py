"""Test suites for scenes (``*.scene.suite.yaml``): scripted rounds, and what each round must show:
who spoke, in what order, by which of the director's rules, and what each said (a turn's
expectations, per speaker). A run reports the director's coverage: the rules that picked a speaker,
and the NPCs that spoke, out of the scene's.

    scene: tavern.scene.json
    cases:
      - name: a song when asked
        rounds:
          - say: "Tomas, play us a song!"
            expect:
              speakers: [tomas, mira]
              rules: [addressed, round_robin]
              lines:
                tomas: {reply: {max_words: 90}}
          - join: [brann]
            say: "Evening, Brann."
            to: brann
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from runtime.backends.base import Backend
from runtime.files.located import error_message, located_problems
from runtime.problems import InputError, Problem
from runtime.scene.model import SceneAsset, load_scene
from runtime.scene.scene import Scene, SceneRound
from runtime.session.failures import failure_of
from runtime.suites.checks import Check, check_turn
from runtime.suites.file import (
    _WORDING,
    MAX_SUITE_CASES,
    SuiteError,
    TurnExpect,
    _at,
    _case_place,
    _SuiteModel,
    _where,
    read_suite_yaml,
)

__all__ = ["LoadedSceneSuite", "RoundResult", "SceneCaseResult", "SceneSuite", "SceneSuiteResult",
           "is_scene_suite", "load_scene_suite", "run_scene_suite"]

MAX_ROUNDS = 100  # a case's rounds


class RoundExpect(_SuiteModel):
    speakers: list[str] | None = Field(None, description="The NPCs that spoke in the round, exactly, in order ([] : none).")
    spoke: list[str] = Field(default_factory=list, description="NPCs that must speak in the round.")
    silent: list[str] = Field(default_factory=list, description="NPCs that must not speak in the round.")
    rules: list[str] | None = Field(None, description="The director's rule that picked each speaker, in order: the "
                                    "first speakers' (fewer rules than speakers check only the first ones; what "
                                    "picks after an NPC's line may depend on its words).")
    heard_by: list[str] | None = Field(None, description="The NPCs that heard the player's line, in any order.")
    lines: dict[str, TurnExpect] = Field(default_factory=dict, description="NPC id -> what its line in the round must "
                                         "show (a turn's expectations: reply, path, exits, slots, ...).")


class RoundScript(_SuiteModel):
    say: str | None = Field(None, description="The player's line; leave it out for the NPCs to carry on among themselves.")
    to: str = Field("", description="The NPC the player speaks to.")
    whisper: bool = Field(False, description="Only 'to' hears the line.")
    join: list[str] = Field(default_factory=list, description="NPCs that join before the line.")
    leave: list[str] = Field(default_factory=list, description="NPCs that leave before the line.")
    expect: RoundExpect = Field(default_factory=RoundExpect)


class SceneCase(_SuiteModel):
    name: str = Field(min_length=1)
    rounds: list[RoundScript] = Field(min_length=1, max_length=MAX_ROUNDS)


class SceneSuite(_SuiteModel):
    scene: str = Field(description="The scene file, relative to the suite.")
    cases: list[SceneCase] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> SceneSuite:
        names = [c.name for c in self.cases]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"case names must be unique; repeated: {', '.join(repeated)}")
        return self


@dataclass
class LoadedSceneSuite:
    path: Path
    suite: SceneSuite
    scene: SceneAsset

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def scene_path(self) -> Path:
        return (self.path.parent / self.suite.scene).resolve()


def is_scene_suite(path: str | Path) -> bool:
    """Whether the suite file at ``path`` names a scene (``scene:``) rather than an asset."""
    try:
        raw, _ = read_suite_yaml(path)
    except InputError:
        return False
    return isinstance(raw, dict) and "scene" in raw and "asset" not in raw


def load_scene_suite(path: str | Path) -> LoadedSceneSuite:
    """A scene suite, checked, and its scene loaded. Raises ``SuiteError`` naming the file, line, case and field."""
    path = Path(path)
    raw, root = read_suite_yaml(path)
    if not isinstance(raw, dict):
        raise SuiteError([Problem("error", "a scene suite is a mapping with 'scene' and 'cases'", str(path), line=1,
                                  column=1)])
    cases = raw.get("cases")
    if isinstance(cases, list) and len(cases) > MAX_SUITE_CASES:
        raise SuiteError([_at(path, f"cases: {len(cases):,} cases; a suite holds at most {MAX_SUITE_CASES:,}",
                              root, ["cases"])])
    try:
        suite = SceneSuite.model_validate(raw)
    except ValidationError as exc:
        problems = located_problems(exc, str(path), functools.partial(_case_place, raw, root),
                                    functools.partial(error_message, wording=_WORDING))
        raise SuiteError([dataclasses.replace(p, column=_where(root, e["loc"])[1]) if p.line else p
                          for p, e in zip(problems, exc.errors(include_url=False))]) from None
    try:
        scene = load_scene(path.parent / suite.scene)
    except InputError as exc:
        raise SuiteError([_at(path, f"scene: {suite.scene} cannot be loaded", root, ["scene"]), *exc.problems]) from None
    return LoadedSceneSuite(path, suite, _checked_names(path, root, suite, scene))


def _checked_names(path: Path, root: yaml.Node | None, suite: SceneSuite, scene: SceneAsset) -> SceneAsset:
    """Every NPC and rule a case names is the scene's: else a problem at its line."""
    ids = {npc.id for npc in scene.npcs}
    problems = []
    for c, case in enumerate(suite.cases):
        for r, script in enumerate(case.rounds):
            at = ["cases", c, "rounds", r]
            named = [("to", [script.to] if script.to else []), ("join", script.join), ("leave", script.leave),
                     ("expect.speakers", script.expect.speakers or []), ("expect.spoke", script.expect.spoke),
                     ("expect.silent", script.expect.silent), ("expect.heard_by", script.expect.heard_by or []),
                     ("expect.lines", list(script.expect.lines))]
            for where, npcs in named:
                for npc in npcs:
                    if npc not in ids:
                        problems.append(_at(path, f"case {case.name!r}, cases.{c}.rounds.{r}.{where}: {npc!r} is no NPC "
                                            f"of {suite.scene} (its NPCs: {', '.join(sorted(ids))})", root, at))
            for rule in script.expect.rules or []:
                if rule not in scene.director.rules:
                    problems.append(_at(path, f"case {case.name!r}, cases.{c}.rounds.{r}.expect.rules: {rule!r} is not "
                                        f"one of the scene's rules ({', '.join(scene.director.rules)})", root, at))
            if script.whisper and not script.to:
                problems.append(_at(path, f"case {case.name!r}, cases.{c}.rounds.{r}.whisper: a whisper needs 'to'",
                                    root, at))
    if problems:
        raise SuiteError(problems)
    return scene


# --- running -----------------------------------------------------------------------------------


@dataclass
class RoundResult:
    index: int
    round: SceneRound | None
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.round is not None and all(c.passed for c in self.checks)


@dataclass
class SceneCaseResult:
    suite: str
    case: str
    rounds: list[RoundResult] = field(default_factory=list)
    error: str = ""  # a round that failed: what it raised

    @property
    def passed(self) -> bool:
        return not self.error and all(r.passed for r in self.rounds)

    @property
    def case_id(self) -> str:
        return f"{self.suite}::{self.case}"


@dataclass
class SceneSuiteResult:
    suite: str
    cases: list[SceneCaseResult]
    rules: list[str]  # the scene's director rules
    npcs: list[str]
    rules_used: set[str] = field(default_factory=set)
    npcs_spoke: set[str] = field(default_factory=set)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def coverage_lines(self) -> Iterator[str]:
        yield (f"director rules that picked a speaker: {len(self.rules_used)} of {len(self.rules)} ("
               + ", ".join(f"{r} {'yes' if r in self.rules_used else 'never'}" for r in self.rules) + ")")
        yield (f"NPCs that spoke: {len(self.npcs_spoke)} of {len(self.npcs)} ("
               + ", ".join(f"{n} {'yes' if n in self.npcs_spoke else 'never'}" for n in self.npcs) + ")")


def check_round(expect: RoundExpect, round_: SceneRound, scene: Scene) -> list[Check]:
    speakers = round_.speakers
    said = ", ".join(speakers) or "nobody"
    checks = []
    if expect.speakers is not None:
        checks.append(Check("speakers", speakers == expect.speakers,
                            f"speakers {', '.join(expect.speakers) or 'nobody'} (spoke: {said})"))
    for npc in expect.spoke:
        checks.append(Check("speakers", npc in speakers, f"{npc} speaks (spoke: {said})"))
    for npc in expect.silent:
        checks.append(Check("speakers", npc not in speakers, f"{npc} is silent (spoke: {said})"))
    if expect.rules is not None:
        rules = [t.rule for t in round_.turns]
        checks.append(Check("director", rules[:len(expect.rules)] == expect.rules and len(rules) >= len(expect.rules),
                            f"picked by {', '.join(expect.rules)} (by {', '.join(rules) or 'none'})"))
    if expect.heard_by is not None:
        heard = sorted(round_.player.heard_by) if round_.player else []
        checks.append(Check("heard", heard == sorted(expect.heard_by),
                            f"heard by {', '.join(sorted(expect.heard_by))} (heard by {', '.join(heard) or 'nobody'})"))
    for npc, turn_expect in expect.lines.items():
        spoken = next((t for t in round_.turns if t.npc == npc), None)
        if spoken is None:
            checks.append(Check("speakers", False, f"{npc}'s line (it did not speak; spoke: {said})"))
            continue
        history = scene.members[npc].session.agent.history.turns
        for check in check_turn(turn_expect, spoken.result, history[-1] if history else None):
            checks.append(dataclasses.replace(check, message=f"{npc}: {check.message}"))
    return checks


def run_scene_case(loaded: LoadedSceneSuite, case: Any, backend: Backend,
                   cancel: threading.Event | None = None) -> tuple[SceneCaseResult, Scene]:
    scene = Scene(loaded.scene, backend, loaded.scene_path.parent, session_id=f"test/{case.name}",
                  source=str(loaded.scene_path))
    result = SceneCaseResult(loaded.name, case.name)
    for index, script in enumerate(case.rounds):
        try:
            for npc in script.leave:
                scene.leave(npc)
            for npc in script.join:
                scene.join(npc)
            round_ = scene.say(script.say, to=script.to, whisper=script.whisper, cancel=cancel)
        except Exception as exc:  # noqa: BLE001 - a round that fails (a backend error, a bad template) fails the case
            result.rounds.append(RoundResult(index, None))
            result.error = f"round {index + 1} failed: {failure_of(exc).message}"
            break
        result.rounds.append(RoundResult(index, round_, check_round(script.expect, round_, scene)))
    return result, scene


def run_scene_suite(loaded: LoadedSceneSuite, backend: Backend) -> SceneSuiteResult:
    result = SceneSuiteResult(loaded.name, [], list(loaded.scene.director.rules), [n.id for n in loaded.scene.npcs])
    for case in loaded.suite.cases:
        case_result, _ = run_scene_case(loaded, case, backend)
        result.cases.append(case_result)
        for r in case_result.rounds:
            if r.round is not None:
                result.rules_used |= {t.rule for t in r.round.turns}
                result.npcs_spoke |= set(r.round.speakers)
    return result
