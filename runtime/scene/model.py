"""A scene asset: several NPCs in one conversation (``*.scene.json``).

Each NPC is an existing agent asset with a display name. The scene says who hears whom (everyone,
less the pairs out of earshot) and how the director picks the next speaker after each line. The
scene holds no graph of its own: each NPC runs its own asset, with its own history, budgets,
summaries and KV caches, and sees only the lines it heard."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from runtime.files.located import MISSING_FIELD, UNKNOWN_KEY, Place, Wording, error_message, located_problems
from runtime.files.reading import parse_input_json, read_input_text
from runtime.names import SLOT_PATTERN
from runtime.nodes import Strict, field_help
from runtime.problems import InputError, Problem

__all__ = ["PLAYER", "SCENE_FORMAT", "SCENE_SUFFIX", "DirectorSettings", "Earshot", "SceneAsset", "SceneError",
           "SceneNpc", "load_scene", "parse_scene"]

SCENE_FORMAT = "parley-scene"
SCENE_VERSION = 1
SCENE_SUFFIX = ".scene.json"
PLAYER = "player"  # the player, where a scene names a speaker (an NPC's id is never 'player')
MAX_NPCS = 16
MAX_SCENE_BYTES = 1 << 20
# The director's rules, tried in this order until one picks a speaker.
Rule = Literal["addressed", "about", "round_robin", "model"]


class SceneError(InputError):
    """A scene file that cannot be read, or a scene asked to do what it cannot; ``problems`` say where."""


class SceneNpc(Strict):
    id: str = Field(pattern=SLOT_PATTERN, description="The NPC's id in the scene: its speaker name in events and suites.")
    name: str = Field(min_length=1, max_length=80, description="What the others call it (the attribution in their prompts, "
                      "and the name the director listens for).")
    asset: str = Field(min_length=1, description="Its agent asset, relative to the scene's folder.")
    present: bool = Field(True, description="In the scene from the start; false: it joins later (Scene.join).")
    hears_before_join: bool = Field(False, description="When it joins, it hears what was said before (every line it would "
                                    "have heard). False: it hears nothing said before it joined.")

    @field_validator("id")
    @classmethod
    def _not_the_player(cls, v: str) -> str:
        if v == PLAYER:
            raise ValueError(f"{PLAYER!r} names the player; give the NPC another id")
        return v


class Earshot(Strict):
    """A pair out of earshot: ``listener`` never hears ``speaker`` (a bystander too far away)."""

    speaker: str = Field(pattern=SLOT_PATTERN, description="An NPC's id, or 'player'.")
    listener: str = Field(pattern=SLOT_PATTERN, description="An NPC's id.")


class DirectorSettings(Strict):
    rules: list[Rule] = Field(default_factory=lambda: ["addressed", "about", "round_robin"], min_length=1, description=(
        "Tried in order after each line until one picks the next speaker: addressed (the line starts with an NPC's "
        "name, or the player spoke to one), about (the line names an NPC), round_robin (the next NPC after the last "
        "speaker), model (a grammar-constrained choice among the NPCs, or nobody, on Model)."))
    max_npc_lines: int = Field(2, ge=1, le=20, description="NPC lines after each player line (or each 'carry on') at most.")
    model: str = Field("", description="The model the 'model' rule asks: a file in the models folder, or a path.")
    context_size: int = Field(1024, ge=128, le=32768, description="The 'model' rule's context.")
    seed: int = Field(1, description="The 'model' rule's seed.")

    @field_validator("rules")
    @classmethod
    def _each_once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("each rule once")
        return v


class SceneAsset(Strict):
    format: Literal["parley-scene"] = SCENE_FORMAT
    version: Literal[1] = SCENE_VERSION
    name: str = Field("Untitled scene", **field_help("The scene's name."))
    player_name: str = Field("Player", min_length=1, max_length=80, description="How the NPCs' prompts name the player.")
    npcs: list[SceneNpc] = Field(min_length=1, max_length=MAX_NPCS)
    out_of_earshot: list[Earshot] = Field(default_factory=list, description="Pairs where the listener never hears the speaker.")
    director: DirectorSettings = Field(default_factory=DirectorSettings)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ids(self) -> SceneAsset:
        ids = [npc.id for npc in self.npcs]
        for index, npc_id in enumerate(ids):
            if npc_id in ids[:index]:
                raise ValueError(f"npcs.{index}.id: {npc_id!r} is used by an earlier NPC; ids must be unique")
        for index, pair in enumerate(self.out_of_earshot):
            if pair.speaker != PLAYER and pair.speaker not in ids:
                raise ValueError(f"out_of_earshot.{index}.speaker: {pair.speaker!r} is no NPC of the scene (nor 'player')")
            if pair.listener not in ids:
                raise ValueError(f"out_of_earshot.{index}.listener: {pair.listener!r} is no NPC of the scene")
        if "model" in self.director.rules and not self.director.model:
            raise ValueError("director.model: the 'model' rule needs a model")
        return self

    def npc(self, npc_id: str) -> SceneNpc:
        for npc in self.npcs:
            if npc.id == npc_id:
                return npc
        raise KeyError(npc_id)

    def hears(self, listener: str, speaker: str) -> bool:
        """Whether ``listener`` (an NPC) hears ``speaker`` (an NPC or the player) when both are there."""
        return listener != speaker and not any(p.speaker == speaker and p.listener == listener
                                               for p in self.out_of_earshot)


def _place(err: ErrorDetails) -> Place:
    loc = [str(part) for part in err["loc"]]
    if not loc and err["type"] == "value_error":
        return Place()
    return Place(field=".".join(loc))


def _said(err: ErrorDetails) -> str:
    wording: Wording = {"extra_forbidden": UNKNOWN_KEY, "missing": MISSING_FIELD}
    return error_message(err, wording)


def parse_scene(text: str, source: str = "<scene>") -> SceneAsset:
    """A scene from its JSON text, or ``SceneError`` naming the file and each field that is wrong."""
    raw = parse_input_json(text, source, SceneError)
    if not isinstance(raw, dict):
        raise SceneError([Problem("error", f"a scene is a JSON object, not {type(raw).__name__}", source)])
    if raw.get("format") != SCENE_FORMAT:
        raise SceneError([Problem("error", f"not a Parley scene (format must be {SCENE_FORMAT!r})", source,
                                  field="format")])
    try:
        return SceneAsset.model_validate(raw)
    except ValidationError as exc:
        problems = located_problems(exc, source, _place, _said)
        # a model check names its field at the start of its message: move it to the problem's field
        for index, problem in enumerate(problems):
            head, sep, rest = problem.message.partition(": ")
            if not problem.field and sep and " " not in head:
                problems[index] = Problem("error", rest, source, field=head)
        raise SceneError(problems) from None
    except RecursionError:
        raise SceneError([Problem("error", "nested too deeply", source)]) from None


def load_scene(path: str | os.PathLike[str]) -> SceneAsset:
    return parse_scene(read_input_text(path, SceneError, MAX_SCENE_BYTES), str(path))

