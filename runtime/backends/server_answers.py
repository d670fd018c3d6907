"""What the remote backends read from a server's answers, as pydantic models: one place that says
which fields are used, what type each has and which values make sense.

Every answer a backend reads goes through :func:`read_answer`, so a malformed one (a missing field,
a wrong type, ``Infinity`` for a size, a count no tokenizer could give) is a ``BackendError`` that
names the server, the endpoint and the field, instead of a traceback from deep in a backend. Fields
a backend does not read are ignored, so a server may send anything more.

Sizes that decide what the backend builds or sends (a slot's context, the number of slots, token
ids) are refused when out of range. Token counts a server reports about a call (reused, evaluated,
generated tokens) only reach the diagnostics: out-of-range ones are clamped into what the call
could have produced, and a warning in the node's diagnostics says so (:func:`clamped`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from runtime.problems import BackendError

if TYPE_CHECKING:
    from runtime.backends.http import ServerConnection

# --- limits (docs/limits.md lists them) ----------------------------------------------------------

MAX_CONTEXT_TOKENS = 1 << 26  # a slot's or model's context a server may report (67,108,864 tokens)
MAX_SLOTS = 1024  # slots of one llama.cpp server this process uses; a server reporting more gets this many
MAX_TOKEN_ID = (1 << 31) - 1  # llama.cpp's token ids are 32-bit
# A tokenizer gives at most one token per byte of the text, plus a few that come from no byte
# (SentencePiece's leading "▁"); a tokenize answer with more is refused.
TOKENIZE_SLACK = 8
MAX_TOKEN_BYTES = 256  # bytes of reply text one generated token may carry (a reply is cut past max_tokens x this)
MAX_QUOTED_CHARS = 80  # characters of a server's value an error quotes
MAX_MODEL_NAME_CHARS = 255  # characters of a served model's name shown (a file name's longest: real ones whole)

_Model = TypeVar("_Model", bound=BaseModel)

Count = StrictInt  # any whole number: :func:`clamped` puts it into range for the diagnostics
Size = Annotated[StrictInt, Field(ge=1, le=MAX_CONTEXT_TOKENS)]
Milliseconds = Annotated[StrictFloat, Field(allow_inf_nan=False)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# --- llama.cpp's server ----------------------------------------------------------------------------


class GenerationSettings(_Answer):
    n_ctx: Size


class Props(_Answer):
    """``GET /props``: the slots, their context size and the model."""

    default_generation_settings: GenerationSettings
    total_slots: Annotated[StrictInt, Field(ge=1)] = 1
    model_path: StrictStr | None = None

    @property
    def slots(self) -> int:
        """The slots this process uses (a server reporting more than :data:`MAX_SLOTS` gets that many)."""
        return min(self.total_slots, MAX_SLOTS)


class TokenIds(_Answer):
    """``POST /tokenize`` (llama.cpp's shape). Validate with ``context={"text": TEXT}``: more tokens
    than the text has bytes (plus :data:`TOKENIZE_SLACK`) is refused before the ids are read."""

    tokens: list[Annotated[StrictInt, Field(ge=0, le=MAX_TOKEN_ID)]]

    @field_validator("tokens", mode="before")
    @classmethod
    def _at_most_a_token_a_byte(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list):
            _check_count(len(value), info)
        return value


class TokenCount(_Answer):
    """vLLM's ``POST /tokenize`` and llama-cpp-python's ``POST /extras/tokenize/count``."""

    count: Annotated[StrictInt, Field(ge=0)]

    @field_validator("count")
    @classmethod
    def _at_most_a_token_a_byte(cls, value: int, info: ValidationInfo) -> int:
        _check_count(value, info)
        return value


def _check_count(count: int, info: ValidationInfo) -> None:
    text = (info.context or {}).get("text")
    if text is None:
        return
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if count > size + TOKENIZE_SLACK:
        raise ValueError(f"{count:,} tokens for a text of {size:,} bytes; a tokenizer gives at most "
                         f"{size + TOKENIZE_SLACK:,} (a token is at least one byte)")


class AppliedTemplate(_Answer):
    """``POST /apply-template``."""

    prompt: StrictStr


class Timings(_Answer):
    cache_n: Count | None = None
    prompt_n: Count | None = None
    predicted_n: Count | None = None
    prompt_ms: Milliseconds | None = None
    predicted_ms: Milliseconds | None = None


class CompletionEvent(_Answer):
    """One event of ``POST /completion``'s stream; the one with ``stop`` is the last and says how it went."""

    content: StrictStr = ""
    tokens: list[StrictInt] | None = None  # the ids this event's content came from
    stop: StrictBool = False
    stop_type: StrictStr | None = None
    truncated: StrictBool = False
    tokens_cached: Count | None = None
    timings: Timings | None = None

    @property
    def token_count(self) -> int:
        """Tokens this event carries: its ids, else one if it has text."""
        return len(self.tokens) if self.tokens else int(bool(self.content))


# --- OpenAI-compatible servers --------------------------------------------------------------------


class ModelMeta(_Answer):
    n_ctx_train: Size | None = None  # llama.cpp's: slots may be smaller


class ModelEntry(_Answer):
    id: StrictStr
    max_model_len: Size | None = None  # vLLM's: what it serves
    meta: ModelMeta | None = None


class ModelList(_Answer):
    """``GET /v1/models``."""

    data: list[ModelEntry]


class PromptDetails(_Answer):
    cached_tokens: Count | None = None


class Usage(_Answer):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    prompt_tokens_details: PromptDetails | None = None


class Delta(_Answer):
    content: StrictStr | None = None


class StreamChoice(_Answer):
    delta: Delta | None = None
    finish_reason: StrictStr | None = None


class ChatChunk(_Answer):
    """One event of ``POST /v1/chat/completions``'s stream."""

    choices: list[StreamChoice] | None = None
    usage: Usage | None = None


# --- reading -------------------------------------------------------------------------------------


def read_answer(model: type[_Model], answer: Any, server: ServerConnection, endpoint: str, *,
                context: dict[str, Any] | None = None, hint: str = "") -> _Model:
    """``answer`` as ``model``, or a ``BackendError`` naming ``server``, ``endpoint`` and the first
    wrong field, followed by ``hint`` (what to check). Server text in it is quoted by the
    connection (control characters escaped, the API key redacted)."""
    try:
        return model.model_validate(answer, context=context)
    except ValidationError as exc:
        wrong = wrong_field(exc.errors(include_url=False)[0], lambda text: server.quoted(text, MAX_QUOTED_CHARS))
        raise BackendError(f"{server.label}: {endpoint} answered {wrong}{'; ' + hint if hint else ''}") from None
    except RecursionError:  # a value nested deeper than Python can walk
        raise BackendError(f"{server.label}: {endpoint} answered with values nested too deep to read") from None


def _short_repr(text: str) -> str:
    return repr(text[:MAX_QUOTED_CHARS]) + ("..." if len(text) > MAX_QUOTED_CHARS else "")


def wrong_field(err: ErrorDetails, quote: Callable[[str], str] = _short_repr) -> str:
    """What is wrong, and where: ``default_generation_settings.n_ctx = Infinity, which should be
    a whole number``; ``quote`` writes a text the server sent."""
    where = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    if kind == "missing":
        return f"without {where}"
    got = shown(err.get("input"), quote)
    if kind in ("model_type", "model_attributes_type", "dict_type", "list_type"):
        wanted = "a list" if kind == "list_type" else "an object"
        return f"{where} as {got}, not {wanted}" if where else f"with {got}, not {wanted}"
    if kind == "value_error":
        return f"{where}: {err['ctx']['error']!s}"
    said = err["msg"].removeprefix("Input ")
    said = said.replace("should be a valid integer", "should be a whole number")
    said = said.replace("should be a valid string", "should be text")
    return f"{where} = {got}, which {said}"


def shown(value: Any, quote: Callable[[str], str] = _short_repr) -> str:
    """A server's value as an error quotes it: a text by ``quote`` (which cuts it short), a number
    as itself, a list or object by its size only (never walked)."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, float):
        return "Infinity" if math.isinf(value) else "NaN" if math.isnan(value) else repr(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) < 10**30 else "a number of more than 30 digits"
    if isinstance(value, list):
        return f"a list of {len(value):,} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"an object of {len(value):,} key{'' if len(value) == 1 else 's'}"
    return type(value).__name__


def clamped(value: int | None, most: int, field: str, warnings: list[str], server: str) -> int | None:
    """A count a server reported, put into 0..``most`` (what the call could have produced); a
    warning says when it had to be."""
    if value is None or 0 <= value <= most:
        return value
    fixed = 0 if value < 0 else most
    warnings.append(f"{server} reported {field} = {shown(value)}, which cannot be (0 to {most:,} here); "
                    f"the diagnostics count {fixed:,}")
    return fixed
