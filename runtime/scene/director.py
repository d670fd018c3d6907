"""Who speaks next in a scene: the director's rules, tried in the scene's order until one picks.

- ``addressed``: the player spoke to an NPC (``to``), or the line starts with an NPC's name
  ("Tomas, play us a song").
- ``about``: the line names an NPC anywhere ("the bard sings badly" names none; "Tomas sings badly" does).
- ``round_robin``: the next NPC after the last one that spoke, in the scene's order.
- ``model``: a grammar-constrained choice among the NPCs' names, or ``nobody``, on the scene's model.

Only NPCs that are there and heard something since they last spoke can be picked, and never the
speaker of the line just said."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runtime.backends.base import Backend, ChatMessage, GenerationRequest
from runtime.scene.model import SceneAsset, SceneNpc

__all__ = ["NOBODY", "RECENT_LINES", "Pick", "choose", "names_of"]

NOBODY = "nobody"
MODEL_PROMPT = ("You direct a scene in a game. Read the conversation and answer with the name of the character who "
                "should speak next, or 'nobody' when no one needs to answer.")
RECENT_LINES = 12  # what the model rule reads of the scene


@dataclass(frozen=True)
class Pick:
    npc: str  # the NPC's id; '' when nobody speaks
    rule: str  # the rule that decided ('' when none could)


def names_of(npc: SceneNpc) -> list[str]:
    """What a line may call the NPC: its name, and the name's first word ("Tomas" of "Tomas the bard")."""
    first = npc.name.split()[0].strip(",.:;!?")
    return [npc.name] if first == npc.name else [npc.name, first]


def _called(text: str, npc: SceneNpc, at_start: bool) -> bool:
    for name in names_of(npc):
        pattern = rf"^\W*{re.escape(name)}\b" if at_start else rf"\b{re.escape(name)}\b"
        if re.search(pattern, text, re.IGNORECASE):
            return True
    return False


def choose(scene: SceneAsset, line_text: str, speaker: str, candidates: Sequence[str], *, to: str = "",
           last_npc: str = "", transcript: Callable[[], str] = str, backend: Backend | None = None,
           session_key: str = "scene/director") -> Pick:
    """The next speaker after ``speaker`` said ``line_text``, among ``candidates`` (NPC ids, in the
    scene's order). ``to``: the NPC the player spoke to; ``last_npc``: the last NPC that spoke (for
    round robin); ``transcript``: the scene so far, for the model rule."""
    npcs = [scene.npc(c) for c in candidates if c != speaker]
    if not npcs:
        return Pick("", "")
    for rule in scene.director.rules:
        if rule == "addressed":
            if to and any(n.id == to for n in npcs):
                return Pick(to, rule)
            found = next((n.id for n in npcs if _called(line_text, n, at_start=True)), "")
        elif rule == "about":
            found = next((n.id for n in npcs if _called(line_text, n, at_start=False)), "")
        elif rule == "round_robin":
            order = [n.id for n in scene.npcs]
            start = order.index(last_npc) + 1 if last_npc in order else 0
            ids = {n.id for n in npcs}
            found = next((order[(start + k) % len(order)] for k in range(len(order))
                          if order[(start + k) % len(order)] in ids), "")
        else:  # model
            if backend is None:
                continue
            found = _ask_model(scene, npcs, transcript(), backend, session_key)
            if found == NOBODY:
                return Pick("", rule)
        if found:
            return Pick(found, rule)
    return Pick("", "")


def _ask_model(scene: SceneAsset, npcs: list[SceneNpc], transcript: str, backend: Backend, key: str) -> str:
    by_name = {npc.name: npc.id for npc in npcs}
    settings = scene.director
    request = GenerationRequest(
        messages=[ChatMessage("system", MODEL_PROMPT),
                  ChatMessage("user", f"{transcript}\n\nWho speaks next: {', '.join(by_name)} or nobody?")],
        max_tokens=16, temperature=0.0, seed=settings.seed, choices=[*by_name, NOBODY])
    answer = backend.session(key, settings.model, settings.context_size).generate(request).text.strip()
    return by_name.get(answer, NOBODY)
