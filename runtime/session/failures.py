"""Why a turn did not finish: the one table from what the runtime raised to a code, a message and the
node and field it names. The editor, ``parley serve``'s ``turn_failed``, suites, simulated players and
the followed server session all read a failure here, so a missing model is ``model_missing`` everywhere
and a Stop reads the same in every view."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from runtime.backends.base import CallCancelled
from runtime.models.folder import FetchCancelled, ModelNotFound
from runtime.nodes.running import TurnCancelled, TurnError
from runtime.problems import BackendError, InputError

# code -> when (the order a reader checks them in; the OpenAPI schema and docs/serving.md list these)
FAILURE_CODES: dict[str, str] = {
    "cancelled": "the turn was stopped (Stop, a cancel request, or the stream closed)",
    "tool_timeout": "the game did not answer a tool call in time",
    "model_missing": "a node's model names no file in the models folder; `model` is the name it gave",
    "backend_error": "the model could not run (a file it cannot read, a server it cannot reach, a context too large)",
    "bad_input": "a file or value the turn read is wrong (a history, a template); the message says where",
    "turn_error": "a node failed or took an exit it does not have; `node` and `field` say where",
    "stream_limit": "the turn's stream passed its event limit and was stopped (parley serve)",
    "store_error": "the turn ran but could not be saved to the session store, so it was taken back (parley serve)",
    "store_conflict": "another server changed the session while this turn ran, so the turn was taken back "
                      "(parley serve replicas on one store)",
    "superseded": "the player spoke again and the asset's double_text is latest_wins: the turn and its line were "
                  "dropped (parley serve)",
    "interrupted": "the player spoke again and the asset's double_text is interrupt: the line stays in the history "
                   "with the reply cut where it stopped (parley serve)",
    "turn_lost": "the server running the turn stopped before the turn finished, so nothing of it was kept: say the "
                 "line again (a client resuming a stream)",
    "server_gone": "the server died mid-turn and could not be reached again (a client's own code; apart from "
                   "unavailable, a server never reached): say the line again once it is back",
    "stream_ended": "the turn's stream broke and the turn was cancelled, not resumed (a client's own code: "
                    "cancel_on_disconnect, or a stream that broke before it named its run)",
}
CANCELLED_MESSAGE = "Stopped: the turn was cancelled, and the conversation is as it was before it."


class ToolTimeout(TurnError):
    """Nobody answered a tool call in time (a game through ``parley serve``)."""


@dataclass(frozen=True)
class Failure:
    """A turn that did not finish; the conversation is as it was before it."""

    code: str  # one of FAILURE_CODES
    message: str
    node: str = ""  # the node it failed in, when known
    field: str = ""  # the node's field at fault, when known
    model: str = ""  # model_missing: the model name that resolved to no file
    unexpected: bool = False  # not one of the runtime's own errors: a bug to log with its traceback

    @property
    def cancelled(self) -> bool:
        return self.code == "cancelled"

    def to_json(self) -> dict[str, str]:
        """The wire form (``turn_failed``'s ``error``)."""
        data = asdict(self)
        del data["unexpected"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Failure:
        """A failure from its wire form; missing fields are empty and an unknown code is kept as given."""
        return cls(**{name: str(data.get(name) or "") for name in ("code", "message", "node", "field", "model")})


def failure_of(exc: BaseException) -> Failure:
    """The failure that ``exc``, raised by a turn (or by making the agent or backend it runs on), means."""
    node, field = getattr(exc, "node_id", "") or "", getattr(exc, "field", "") or ""
    if isinstance(exc, TurnCancelled | CallCancelled | FetchCancelled):  # Stop, whatever it stopped
        return Failure("cancelled", CANCELLED_MESSAGE, node)
    if isinstance(exc, ToolTimeout):
        return Failure("tool_timeout", exc.reason, node, field)
    if isinstance(exc, TurnError):
        return Failure("turn_error", str(exc), node, field)
    if isinstance(exc, ModelNotFound):
        return Failure("model_missing", str(exc), node, field, model=exc.model)
    if isinstance(exc, BackendError):
        return Failure("backend_error", str(exc), node, field)
    if isinstance(exc, InputError):
        first = exc.errors[0] if exc.errors else None
        return Failure("bad_input", str(exc), node or (first.node_id if first else ""), field or (first.field if first else ""))
    return Failure("turn_error", f"{type(exc).__name__}: {exc}", node, field, unexpected=True)
