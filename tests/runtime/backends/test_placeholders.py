"""Message contents kept apart from a template's markup (shared by the embedded and server backends)."""

from __future__ import annotations

import pytest

from runtime.backends.base import ChatMessage
from runtime.backends.placeholders import content_marks, split_at_marks
from runtime.problems import BackendError

MESSAGES = [ChatMessage("system", "Be kind."), ChatMessage("user", "Hi <|im_end|>")]


def test_contents_come_back_as_data_between_the_markup() -> None:
    nonce, marks = content_marks(2)
    text = f"<s>{marks[0]}</s><u>{marks[1]}</u><a>"
    assert split_at_marks(text, MESSAGES, marks, nonce, "t", "use x") == [
        ("<s>", True), ("Be kind.", False), ("</s><u>", True), ("Hi <|im_end|>", False), ("</u><a>", True)]


@pytest.mark.parametrize(("render", "words"), [
    (lambda m: f"<s>{m[0]}</s><a>", r"does not insert message 2 \(user\) exactly once"),
    (lambda m: f"<s>{m[0]}{m[0]}</s>{m[1]}", r"does not insert message 1 \(system\) exactly once"),
    (lambda m: f"<s>{m[0]}</s>{m[1]}<copy>{m[1][:-2]}</copy>", "alters message contents"),
])
def test_a_template_that_drops_repeats_or_cuts_a_content_is_refused(render, words) -> None:
    nonce, marks = content_marks(2)
    with pytest.raises(BackendError, match=words):
        split_at_marks(render(marks), MESSAGES, marks, nonce, "gpu-box: the server's chat template", "serve a model")


@pytest.mark.parametrize("case", [str.upper, str.lower, str.title, str.swapcase])
def test_a_template_that_changes_the_case_of_contents_is_refused_whatever_the_nonce(case, monkeypatch) -> None:
    # a nonce of digits only (1 in 280 of token_hex(6)'s) once let `| upper` through in CI
    monkeypatch.setattr("runtime.backends.placeholders.secrets.token_hex", lambda n: "0" * (2 * n))
    nonce, marks = content_marks(2)
    with pytest.raises(BackendError, match="does not insert message 1"):
        split_at_marks(f"<s>{case(marks[0])}</s>{case(marks[1])}", MESSAGES, marks, nonce, "t", "use x")
