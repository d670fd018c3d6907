"""Summarize: folds older turns into a rolling summary so long conversations keep their thread.

The folding itself (what to fold, the prompt, shortening a turn too long for the context) is
``runtime.nodes.summarize.folding``; this module is the node: its settings, when it runs and what it checks.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from runtime.diagnostics import SummaryRecord
from runtime.dialogue.history import Turn
from runtime.events import Summarized
from runtime.nodes.base import (
    END,
    TOKENS_PER_MESSAGE,
    AnswerInContext,
    FieldError,
    ModelParams,
    NodeBase,
    SamplingParams,
    field_help,
)
from runtime.nodes.checks import NodeChecks
from runtime.nodes.running import NodeRun
from runtime.nodes.summarize.folding import TurnCosts, fold_turns
from runtime.prompting.budget import messages_tokens
from runtime.prompting.prompt import message_parts
from runtime.resources import default_prompt

# Below this much room for the transcript a fold can hold little more than a shortened line.
SUMMARY_MIN_TRANSCRIPT_TOKENS = 64


class Summarize(AnswerInContext, NodeBase, ModelParams, SamplingParams):
    type: Literal["Summarize"] = "Summarize"
    context_size: int = Field(2048, ge=0, le=1_048_576, **field_help("The summarizer's own context window (its own KV cache). 0 uses the model's size.", "Model"))
    temperature: float = Field(0.2, ge=0.0, le=2.0, **field_help("Sampling temperature; low keeps summaries factual.", "Sampling"))
    trigger_tokens: int = Field(1024, ge=0, **field_help("Fold when the turns not yet summarized reach this many tokens. Set it below the budget of the node that answers. 0 turns the token trigger off.", "Folding"))
    trigger_turns: int = Field(0, ge=0, **field_help("Fold when this many turns are not yet summarized (for tests and authored pacing). 0 turns it off.", "Folding"))
    keep_recent_turns: int = Field(3, ge=0, **field_help("The latest turns that are never folded and always replay word for word. Below 2 the character paraphrases what just happened.", "Folding"))
    max_summary_tokens: int = Field(256, ge=1, **field_help("Hard cap on a summary's length; cuts mid-word. Must be at least 64 below Context Size.", "Folding"))
    system_prompt: str = Field(default_factory=lambda: default_prompt("summarize_system"), **field_help("Instructions for the summarizer.", "Prompt", multiline=True))
    template: str = Field(default_factory=lambda: default_prompt("summarize_template"), **field_help("Mustache template of the fold request: {{previous_summary}}, {{transcript}}, {{max_words}}.", "Prompt", mustache=True, multiline=True))
    notify_client: bool = Field(False, **field_help("Emit a 'summarized' event with covered_through, folded_turns, summary_chars and the text.", "Folding"))
    default_exit: str = Field(END, **field_help("Node that runs next. Empty ends the turn (the usual place: Summarize runs last).", "Exits"))

    WRITES_SUMMARY: ClassVar[bool] = True
    ANSWER_FIELD: ClassVar[str] = "max_summary_tokens"
    PROMPT_ROOM: ClassVar[int] = SUMMARY_MIN_TRANSCRIPT_TOKENS

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    @model_validator(mode="after")
    def _folds(self) -> Summarize:
        if self.trigger_tokens == 0 and self.trigger_turns == 0:
            raise FieldError("trigger_tokens", "set trigger_tokens or trigger_turns above 0, or the node never folds")
        return self

    def run(self, run: NodeRun) -> str:
        model = run.model()
        context = run.context_size(model)
        run.budget(context, self.max_summary_tokens, "max_summary_tokens")
        count = run.counter(model)
        turn, diag = run.turn, run.diag
        turns = run.history.turns + [Turn(turn.player, list(turn.entries))]
        fold = fold_turns(
            self, turns, run.history.summary, context, count,
            lambda request: run.generate(model, request), run.source,
            costs=run.cache().setdefault("turn_costs", TurnCosts()),
        )
        counted = messages_tokens(fold.messages, count)
        if fold.messages:
            run.record_parts(message_parts(fold.messages, count), context)
        run.record(fold.messages, fold.result, context - self.max_summary_tokens, counted)
        diag.warnings += fold.warnings
        if fold.summary is not None:
            summary = fold.summary
            run.add_summary(summary)
            diag.output = summary.text
            diag.summary = SummaryRecord(
                covered_through=summary.covered_through, folded_turns=summary.folded_turns,
                summary_chars=summary.summary_chars, unsummarized_tokens=fold.unsummarized_tokens,
                shortened_turn=fold.shortened_turn, omitted_words=fold.omitted_words,
                summary_omitted_words=fold.summary_omitted_words,
            )
            if self.notify_client:
                run.emit(Summarized(self.id, summary.covered_through, summary.folded_turns,
                                    summary.summary_chars, summary.text))
        return "default_exit"

    def check_in_graph(self, checks: NodeChecks) -> None:
        if self.id in checks.reachable:
            later = checks.once("player_facing_later", lambda: checks.runs_later(lambda n: n.PLAYER_FACING))
            reply = later.get(self.id)
            if reply is not None and reply != self.id:
                checks.warning(
                    f"Summarize runs before the reply of {reply}: the player waits for the summary. "
                    "Place Summarize last, after the reply.",
                    "default_exit",
                )
        context = self.context_size or checks.model_context(self)
        if context:
            fixed = checks.count(self.system_prompt) + checks.count(self.template) + 2 * TOKENS_PER_MESSAGE
            room = context - self.max_summary_tokens - fixed
            if room < SUMMARY_MIN_TRANSCRIPT_TOKENS:
                checks.warning(
                    f"the summarizer's own system prompt and template (about {fixed} tokens) leave "
                    f"{max(room, 0)} tokens for the transcript in context_size {context} minus "
                    f"max_summary_tokens {self.max_summary_tokens}; it cannot fold. Raise context_size, "
                    "lower max_summary_tokens or shorten the prompt.",
                    "context_size",
                )
        if self.trigger_tokens:
            # Every node's history budget, smallest first, found once for all Summarize nodes.
            budgets = checks.once("history_budgets", lambda: sorted(
                ((budget, index, node.id) for index, node in enumerate(checks.asset.nodes)
                 if (budget := checks.history_budget(node)) is not None)))
            for budget, _index, consumer_id in budgets:
                if self.trigger_tokens < budget:
                    break
                checks.warning(
                    f"trigger_tokens ({self.trigger_tokens}) is at or above the prompt budget of "
                    f"{consumer_id!r} ({budget}); turns will be trimmed before they are summarized. "
                    "Set it to 60-70 % of that node's room for history.",
                    "trigger_tokens",
                )
