"""A guard check plugin as a studio would ship one (``parley.guard_checks`` entry point): here a
keyword scorer stands in for a dedicated classifier model."""

from __future__ import annotations

from runtime.nodes import GuardRequest, GuardVerdict

SEEN: list[GuardRequest] = []


def check(request: GuardRequest) -> GuardVerdict | None:
    SEEN.append(request)
    if "bribe" in request.text.lower() and any(name == "bribery" for name, _ in request.policies):
        return GuardVerdict("bribery", "score 0.97 for 'bribe'")
    return None


def answers_nonsense(request: GuardRequest) -> object:
    return {"policy": "bribery"}
