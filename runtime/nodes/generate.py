"""Generate and Generate and Speak: nodes that build a prompt from the dialog history and write text.

``GeneratingNode`` is also the base of Tool Call (``runtime.nodes.tool_call``): all three build
their prompt the same way (``runtime.prompting.prompt.build_prompt``) and differ in what the output becomes.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult
from runtime.diagnostics import NodeTrim
from runtime.dialogue.history import Reply
from runtime.events import ReplyTagged, SentenceSplitter, Speak, Token
from runtime.models.journal import DecodeJournal
from runtime.nodes.base import (
    END,
    OPTIONAL_SLOT_PATTERN,
    TOKENS_PER_MESSAGE,
    AnswerInContext,
    FieldError,
    ModelParams,
    NodeBase,
    SamplingParams,
    field_help,
)
from runtime.nodes.checks import NodeChecks
from runtime.nodes.running import NodeRun, TurnError
from runtime.prompting.budget import PromptBudget
from runtime.prompting.prompt import build_prompt, current_turn_messages

HistoryRole = Literal["assistant", "none"]
# A template that reads these knows the turn only once it runs (its instructions, slots, knowledge, line)
TURN_VALUES = re.compile(r"\{\{\s*[#^/&{]?\s*(instructions|slots|knowledge|input)\b")
Placement = Literal["before", "after"]
HistoryMode = Literal["full", "summarized", "last_n", "none"]
# A Generate and Speak node's tag: what it is called when tag_name is empty, and how the model is asked
DEFAULT_TAG_NAME = "tag"
TAG_QUESTION = "Before you answer, choose the {name} of your reply. Answer with exactly one of: {tags}."


class GeneratingNode(AnswerInContext, NodeBase, ModelParams, SamplingParams):
    """Generate, GenerateAndSpeak and ToolCall: nodes that build a prompt from the dialog history."""

    system_prompt: str = Field("", **field_help("The node's instructions; never trimmed, so every token comes out of the history budget.", "Prompt", mustache=False, multiline=True))
    max_tokens: int = Field(256, ge=1, **field_help("Tokens kept free for the answer. Must be below Context Size; the rest is the prompt budget.", "Model"))
    history_role: HistoryRole = Field("assistant", **field_help("assistant: later turns see this node's output. none: its output is never replayed (a hidden reasoning step).", "History"))
    input: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, **field_help("Slot read as the current turn's line. Empty reads the player's line.", "Prompt"))
    template: str = Field("", **field_help("Mustache template framing the current turn: {{instructions}}, {{#knowledge}}{{text}}{{/knowledge}}, {{slots.NAME}}, {{vars.NAME}}, {{input}}, {{language}} (the agent's).", "Prompt", mustache=True, multiline=True))
    placement: Placement = Field("before", **field_help("Whether the rendered template goes before or after the player's line.", "Prompt"))
    history_mode: HistoryMode = Field("full", **field_help("full: all history that fits the budget. summarized: the summary plus the last History Window entries. last_n: exactly the last History Window entries. none: no history.", "History"))
    history_window: int = Field(8, ge=1, le=10_000, **field_help("Entries (player lines, replies, tool pairs count as one each) kept by the summarized and last_n modes.", "History"))
    default_exit: str = Field(END, **field_help("Node that runs next. Empty ends the turn.", "Exits"))

    RUNTIME_SYSTEM_PROMPT: ClassVar[bool] = True
    STREAMS_TO_CHAT: ClassVar[bool] = True
    # Not the field defaults (256 tokens, the model's whole context, no penalty), which invited a
    # reply that loops up to a long cap: 128 tokens is a few spoken sentences, 2048 holds a long
    # talk on any model this runs and costs a quarter of an 8k context's KV cache, and 1.1 is
    # llama.cpp's usual mild repeat penalty.
    NEW_NODE_FIELDS: ClassVar[dict[str, Any]] = {"max_tokens": 128, "context_size": 2048, "repeat_penalty": 1.1}

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    # --- what other node types ask ------------------------------------------------------------

    def prompt_budget(self, model_context: int | None) -> int | None:
        """The prompt budget (``PromptBudget.limit``); None while the context size is unknown or
        leaves no room for the prompt (reported separately)."""
        if not (self.context_size or model_context):
            return None
        try:
            return PromptBudget.for_node(self, model_context or 0).limit
        except ValueError:
            return None

    def history_budget(self, model_context: int | None) -> int | None:
        return None if self.history_mode == "none" else self.prompt_budget(model_context)

    def system_additions(self) -> list[str]:
        """Text the system message carries after the system prompt (a Tool Call node's tools)."""
        return []

    # --- running ------------------------------------------------------------------------------

    def output_schema(self) -> dict[str, Any] | None:
        """A JSON schema the output must follow (a Tool Call node's call), or None for free text."""
        return None

    def run(self, run: NodeRun) -> str:
        model = run.model()
        try:
            budget = PromptBudget.for_node(self, run.backend.model_context_size(model))
        except ValueError as exc:
            raise TurnError(str(exc), self.id, "max_tokens") from None
        count = run.counter(model)
        turn, diag = run.turn, run.diag
        line = run.line(self.input)
        current = current_turn_messages(
            self, line, turn.instructions, turn.slots, run.variables, turn.entries, run.source, run.language
        )
        prompt = build_prompt(
            self, system_prompt=run.system_prompt(), history=run.history,
            window_start=run.window_start, current=current, budget=budget, count=count,
        )
        run.move_window_start(prompt.trim.window_start_after)
        diag.warnings += prompt.warnings
        trim = prompt.trim
        diag.trim = NodeTrim(
            window_start_before=trim.window_start_before, window_start_after=trim.window_start_after,
            dropped_turns=trim.dropped_turns, triggered=trim.triggered, history_entries=prompt.history_entries,
        )
        run.record_parts(prompt.parts, budget.context_size)

        request = GenerationRequest(
            prompt.messages, max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
            min_p=self.min_p, repeat_penalty=self.repeat_penalty, seed=run.seed(self.seed), json_schema=self.output_schema(),
        )
        splitter = SentenceSplitter() if self.speaks() else None
        reply = self.is_reply()
        tags = self.tag_reply(run, model, prompt.messages, budget, prompt.counted_tokens)

        def on_token(text: str) -> None:
            run.emit(Token(self.id, text, reply))
            if splitter is not None:
                for sentence in splitter.feed(text):
                    run.emit(Speak(self.id, sentence, reply, tags))

        result = run.generate(model, request, on_token)
        if splitter is not None:
            for sentence in splitter.flush():
                run.emit(Speak(self.id, sentence, reply, tags))
        run.record(prompt.messages, result, budget.limit, prompt.counted_tokens)
        self.use_output(run, result)
        return "default_exit"

    def read_ahead(self, run: NodeRun, line: str) -> DecodeJournal | None:
        """Between turns (``Agent.warm``): read the prompt this node's next call starts with into its
        cache: its system prompt and the history as it will replay it, then the turn's message with
        ``line`` when the node reads the turn's line as it is (no input slot, and a template that reads
        nothing else of the turn; else up to where that message's text starts).
        Nothing is read when the history would be trimmed: the next call trims it anew."""
        model = run.model()
        try:
            budget = PromptBudget.for_node(self, run.backend.model_context_size(model))
        except ValueError:
            return None
        # The line is known where the node reads the turn's line as it is, framed by a template that
        # reads nothing else of the turn (the agent's variables and language are known now too).
        plain = not self.input and not TURN_VALUES.search(self.template)
        current = current_turn_messages(self, line if plain else "", "", {}, run.variables, [], run.source,
                                        run.language)
        prompt = build_prompt(self, system_prompt=run.system_prompt(), history=run.history,
                              window_start=run.window_start, current=current, budget=budget, count=run.counter(model))
        if prompt.trim.triggered:
            return None
        messages = prompt.messages[: len(prompt.messages) - len(current.messages)]
        return run.read_ahead(model, [*messages, current.messages[0] if plain else ChatMessage("user", "")])

    def tag_reply(self, run: NodeRun, model: str, messages: list[ChatMessage], budget: PromptBudget,
                  counted: int) -> dict[str, str]:
        """Before the reply is generated from ``messages``: the tags its sentences carry (name -> value).
        Only Generate and Speak picks one (``GenerateAndSpeak.tags``)."""
        return {}

    def is_reply(self) -> bool:
        """Whether this node's output is part of the turn's reply (the player sees it as it streams)."""
        return self.PLAYER_FACING and self.history_role == "assistant"

    def use_output(self, run: NodeRun, result: GenerationResult) -> None:
        """What the output becomes: a reply in the history, this node's slot, and (for player-facing
        nodes that replay) part of the turn's reply."""
        run.turn.entries.append(Reply(self.id, result.text, self.history_role == "assistant"))
        run.turn.slots[self.id] = result.text
        if self.is_reply():
            run.turn.replies.append(result.text)

    # --- validation ---------------------------------------------------------------------------

    def check(self, checks: NodeChecks) -> None:
        if self.PLAYER_FACING and not self.system_prompt.strip():
            checks.warning(
                "no system prompt: the model writes this reply with no instructions, so it does not know "
                "who it plays or how to answer. Describe the character and how it should reply "
                "(leave it empty only if the game sets it at run time).",
                "system_prompt",
            )

    def check_in_graph(self, checks: NodeChecks) -> None:
        if self.history_mode == "summarized" and not checks.once(
                "summary_writers", lambda: any(n.WRITES_SUMMARY for n in checks.asset.nodes)):
            checks.warning(
                "history_mode is 'summarized' but no Summarize node writes a summary: this node sees only "
                "its last history_window entries. Add a Summarize node after the reply, or use 'last_n'.",
                "history_mode",
            )
        model_size = checks.model_context(self)
        if not self.context_size and model_size and self.max_tokens >= model_size:
            checks.error(
                f"max_tokens ({self.max_tokens}) must be less than the model's context size ({model_size}); "
                "lower it or set context_size",
                "max_tokens",
            )
        budget = checks.node_value(self, ("prompt_budget", model_size), lambda: self.prompt_budget(model_size))
        if budget is not None and self.system_prompt:
            fixed = checks.count(self.system_prompt) + TOKENS_PER_MESSAGE
            if fixed >= budget:
                checks.warning(
                    f"the system prompt alone (about {fixed} tokens) fills the prompt budget of {budget} tokens; "
                    "the model will see no history. Shorten it, raise context_size or lower max_tokens.",
                    "system_prompt",
                )


class Generate(GeneratingNode):
    type: Literal["Generate"] = "Generate"

    PLAYER_FACING: ClassVar[bool] = True

    def check_in_graph(self, checks: NodeChecks) -> None:
        """Also warns when this node writes the last reply of a turn the player is shown but never
        hears, in an agent that speaks its other turns. Exactly when all of these hold:

        - its output is part of the turn's reply (``history_role`` 'assistant');
        - it is the last reply of its turn: no player-facing node can run after it;
        - some path from the start node reaches it without running a node that speaks;
        - a node that speaks (Generate and Speak) is reachable elsewhere in the graph.

        An agent with no speaking node (text only) never gets this warning, and neither does a
        turn that spoke earlier on every path here.
        """
        super().check_in_graph(checks)
        if self.history_role != "assistant" or self.id not in checks.reachable:
            return

        def speaks(node: NodeBase) -> bool:
            return node.PLAYER_FACING and node.speaks()

        speakers = checks.once("speakers", lambda: sorted(
            n.id for n in checks.asset.nodes if n.id in checks.reachable and speaks(n)))
        if not speakers or self.id not in checks.once("reached_silently", lambda: checks.reachable_without(speaks)):
            return
        if self.id in checks.once("player_facing_later", lambda: checks.runs_later(lambda n: n.PLAYER_FACING)):
            return
        named = ", ".join(repr(n) for n in speakers[:3]) + (" and others" if len(speakers) > 3 else "")
        checks.warning(
            "this reply ends its turn as text only: the player sees it but never hears it, since no node "
            f"on the way here from the start node speaks, while {named} speak{'s' if len(speakers) == 1 else ''} "
            "other turns. Use a Generate and Speak node for this reply, or set history_role to 'none' if "
            "its output is not meant for the player.",
            "history_role",
        )


class GenerateAndSpeak(GeneratingNode):
    """Writes the reply and speaks it sentence by sentence. With tags set, it first picks the reply's tag
    (an emotion, an animation) from them, so the game has it with the first sentence."""

    type: Literal["GenerateAndSpeak"] = "GenerateAndSpeak"
    tags: list[str] = Field(default_factory=list, **field_help("Tags the game gets with each reply, one a line (an emotion: calm, angry, sad; or an animation: wave, bow). Before the reply, the model picks one under a grammar; it is sent on every speak event and in turn_finished's tags. Empty: no tag.", "Game"))
    tag_name: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, **field_help(f"What the tag is called in the events' tags (emotion, animation). Empty: {DEFAULT_TAG_NAME!r}.", "Game"))

    PLAYER_FACING: ClassVar[bool] = True
    WRITTEN_WHEN_SET: ClassVar[tuple[str, ...]] = ("tags", "tag_name")

    def speaks(self) -> bool:
        return True

    @field_validator("tags")
    @classmethod
    def _tags_are_named_once(cls, v: list[str]) -> list[str]:
        for index, tag in enumerate(v):
            if not tag.strip():
                raise FieldError(str(index), f"tag {index + 1} is empty: give it a name or remove the line")
            if tag in v[:index]:
                raise FieldError(str(index), f"tag {tag!r} is listed twice: list each tag once")
        return v

    @property
    def tag_key(self) -> str:
        """The name the tag is sent under."""
        return self.tag_name or DEFAULT_TAG_NAME

    def tag_question(self) -> str:
        return TAG_QUESTION.format(name=self.tag_key, tags=", ".join(self.tags))

    def tag_reply(self, run: NodeRun, model: str, messages: list[ChatMessage], budget: PromptBudget,
                  counted: int) -> dict[str, str]:
        """Picks the reply's tag with a short call on this node's own context before the reply: the
        reply's prompt with the question added at its end, the answer held to ``tags`` by a grammar.
        The reply's call then reuses all of that prompt but the question from the cache. The tag goes
        to the turn's tags (a ``tag`` event now, ``turn_finished`` later); the sentences carry the
        turn's tags so far (this one, and the ``reply_tags`` earlier nodes wrote)."""
        if self.tags:
            tag = self._pick_tag(run, model, messages, budget, counted)
            if tag:
                run.turn.tags[self.tag_key] = tag
                run.emit(ReplyTagged(self.id, self.tag_key, tag))
        return dict(run.turn.tags)

    def _pick_tag(self, run: NodeRun, model: str, messages: list[ChatMessage], budget: PromptBudget,
                  counted: int) -> str:
        count = run.counter(model)
        question = self.tag_question()
        asked = list(messages)
        if asked and asked[-1].role == "user":
            last = asked[-1]
            asked[-1] = ChatMessage("user", f"{last.content}\n\n{question}" if last.content else question, last.name)
            extra = count(question)
        else:
            asked.append(ChatMessage("user", question))
            extra = count(question) + TOKENS_PER_MESSAGE
        answer = max(count(t) for t in self.tags) + 1
        if counted + extra + answer >= budget.context_size:
            run.diag.warnings.append(
                f"no {self.tag_key} tag: the question that picks it ({extra} tokens) and its answer do not fit "
                f"the context of {budget.context_size} tokens after the prompt; raise max_tokens above "
                f"{extra + answer}, the room the prompt leaves")
            return ""
        request = GenerationRequest(asked, max_tokens=answer, temperature=0.0, seed=run.seed(self.seed),
                                    choices=list(self.tags))
        tag = run.generate(model, request).text
        if tag not in self.tags:
            run.diag.warnings.append(f"the model's {self.tag_key} tag {tag!r} is none of the tags; no tag was sent")
            return ""
        return tag

    def check(self, checks: NodeChecks) -> None:
        super().check(checks)
        for index, tag in enumerate(self.tags):
            if tag != tag.strip():
                # A warning, not an error: the editor takes each keystroke ("very " on the way to "very angry").
                checks.warning(f"tag {tag!r} starts or ends with a space, which the model must write too and "
                               "the game gets as it is; remove the space", f"tags.{index}")

    def check_in_graph(self, checks: NodeChecks) -> None:
        super().check_in_graph(checks)
        if self.tags and self.tag_key in checks.asset.reply_tags:
            checks.warning(
                f"tag_name {self.tag_key!r} is also one of the agent's reply_tags, which another node's slot "
                "fills: the two overwrite each other. Give this node's tag another name.",
                "tag_name",
            )
        if self.tags and self.history_role != "assistant":
            checks.warning(
                "this node picks a tag for its reply, but its output is not the player's reply "
                "(history_role 'none'): the game gets a tag for words it never shows. Clear the tags, "
                "or set history_role to 'assistant'.",
                "tags",
            )
