"""What the LLM classifier nodes (Classify Intent, Classify Attributes) share: a context window of
their own, and one short question to the model whose answer is constrained to the allowed values.

A classifier's prompt is its instructions and the line; when that does not fit the node's budget,
the model is not asked and the node takes the way it takes for an answer it cannot use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult
from runtime.models.journal import DecodeJournal
from runtime.nodes.base import ModelParams, NodeBase, field_help
from runtime.nodes.running import NodeRun
from runtime.prompting.budget import messages_tokens
from runtime.prompting.prompt import message_parts


class Classifier(NodeBase, ModelParams):
    """A node that asks the model to classify a line (the player's, or the slot named by ``input``)."""

    context_size: int = Field(2048, ge=0, le=1_048_576, **field_help("The classifier's own context window. 0 uses the model's size.", "Model"))

    if TYPE_CHECKING:  # fields of each classifier type, with its own help text and default
        input: str
        system_prompt: str

    def instructions(self) -> str:
        """The system message: the node's system prompt and what the model may answer."""
        raise NotImplementedError

    def answer_tokens(self, context_size: int) -> int:
        """Tokens kept for the answer in a context of ``context_size``."""
        raise NotImplementedError

    def answer_constraint(self) -> dict[str, Any]:
        """What constrains the answer: ``GenerationRequest`` fields (``choices`` or ``json_schema``)."""
        raise NotImplementedError

    def read_ahead(self, run: NodeRun, line: str) -> DecodeJournal | None:
        """Between turns: the instructions and ``line`` (the start of the next turn's line, where it is
        known and the node reads it), read into the cache ahead of the question."""
        if self.input or not line:
            return None  # the instructions are read already: the node has run
        return run.read_ahead(run.model(), [ChatMessage("system", self.instructions()), ChatMessage("user", line)])

    def ask(self, run: NodeRun, instead: str) -> GenerationResult | None:
        """The model's answer for this turn's line, recorded in the node's diagnostics; None, with a
        warning saying the node did ``instead``, when the prompt does not fit the node's budget."""
        model = run.model()
        context = run.context_size(model)
        budget = run.budget(context, self.answer_tokens(context), "context_size")
        count = run.counter(model)
        messages = [ChatMessage("system", self.instructions()), ChatMessage("user", run.line(self.input))]
        counted = messages_tokens(messages, count)
        run.record_parts(message_parts(messages, count), budget.context_size)
        if counted > budget.limit:
            run.diag.warnings.append(
                f"the classifier's prompt ({counted} tokens) does not fit its budget of {budget.limit}; "
                f"{instead} without asking the model. Raise context_size."
            )
            run.record(messages, None, budget.limit, counted)
            return None
        request = GenerationRequest(messages, budget.max_tokens, temperature=0.0, seed=0, **self.answer_constraint())
        result = run.generate(model, request)
        run.record(messages, result, budget.limit, counted)
        return result
