"""The one failure table: what each exception a turn raises means, read the same by every door."""

from __future__ import annotations

import pytest

from runtime.backends.base import CallCancelled
from runtime.models.folder import FetchCancelled, ModelNotFound
from runtime.nodes.running import TurnCancelled, TurnError
from runtime.problems import BackendError, InputError, Problem
from runtime.session.failures import CANCELLED_MESSAGE, FAILURE_CODES, Failure, ToolTimeout, failure_of


@pytest.mark.parametrize(("exc", "expected"), [
    (TurnCancelled("the turn was cancelled", "reply"), Failure("cancelled", CANCELLED_MESSAGE, "reply")),
    (CallCancelled("stopped"), Failure("cancelled", CANCELLED_MESSAGE)),
    (FetchCancelled("stopped"), Failure("cancelled", CANCELLED_MESSAGE)),
    (ToolTimeout("no answer to check_stock within 30 s", "lookup", "tools"),
     Failure("tool_timeout", "no answer to check_stock within 30 s", "lookup", "tools")),
    (TurnError("the Generate node failed: boom", "reply"),
     Failure("turn_error", "reply: the Generate node failed: boom", "reply")),
    (ModelNotFound("model file 'x.gguf' not found. Looked in: ...", "x.gguf"),
     Failure("model_missing", "model file 'x.gguf' not found. Looked in: ...", model="x.gguf")),
    (BackendError("the server at http://127.0.0.1:1 cannot be reached"),
     Failure("backend_error", "the server at http://127.0.0.1:1 cannot be reached")),
    (InputError([Problem("error", "unknown variable {mood}", node_id="reply", field="system_prompt")]),
     Failure("bad_input", "reply.system_prompt: error: unknown variable {mood}", "reply", "system_prompt")),
])
def test_each_exception_a_turn_raises_has_one_code(exc, expected):
    assert failure_of(exc) == expected
    assert expected.code in FAILURE_CODES


def test_an_exception_the_runtime_does_not_raise_is_a_turn_error_marked_unexpected():
    found = failure_of(KeyError("mood"))
    assert (found.code, found.message, found.unexpected) == ("turn_error", "KeyError: 'mood'", True)


def test_the_wire_form_round_trips_and_a_partial_one_reads():
    failure = Failure("model_missing", "model file 'x.gguf' not found", "reply", "model", "x.gguf")
    assert failure.to_json() == {"code": "model_missing", "message": "model file 'x.gguf' not found",
                                 "node": "reply", "field": "model", "model": "x.gguf"}
    assert Failure.from_json(failure.to_json()) == failure
    assert Failure.from_json({"code": "cancelled", "message": "stopped", "node": None}) == Failure("cancelled", "stopped")
    assert Failure("cancelled", "x").cancelled and not failure.cancelled
