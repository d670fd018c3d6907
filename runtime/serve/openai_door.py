"""An OpenAI-compatible door to ``parley serve``: ``POST /v1/chat/completions`` (streamed and not) and
``GET /v1/models``, so a game's existing LLM plugin, or the official ``openai`` package, talks to a
Parley NPC, graph and all.

- ``model`` names an asset (a path under an ``--assets`` folder, as ``GET /v1/models`` lists them).
- The session is named by ``user`` or the ``X-Parley-Session`` header. A session that does not exist
  yet is made on that asset; one that runs another asset is refused.
- The player's line is the last message, which must be the user's (its text, or its text parts joined).
  The NPC keeps its own conversation, so the earlier messages a plugin resends are not read again.
- The reply is what the player sees: a streamed answer sends only the reply's tokens (``reply``
  true), never an inner node's, such as a Tool Call's JSON.
- A tool with a ``mock_result`` is answered with it. A tool the game must answer cannot be answered
  through this door: the turn is stopped, and the answer says to use the native protocol.

Errors are the server's typed JSON (``{"error": {"code", "message"}}``, which the ``openai`` package
reads as its own), with the status of their code; a failed turn answered whole is ``turn_failed``.
In a stream, where the status has been sent, the error is the stream's last ``data:``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from runtime.serve.npcs import Item, NPCs, Stream
from runtime.serve.protocol import ERROR_STATUS, KEEP_ALIVE_SECONDS, ServeError, whole_characters

SESSION_HEADER = "x-parley-session"


class OpenAIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls and the rest: not read

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionIn(BaseModel):
    # temperature, max_tokens, stream_options and the rest a plugin sends are the graph's to decide: ignored
    model_config = ConfigDict(extra="allow")

    model: str = Field(description="The asset: its path under one of the server's --assets folders.")
    messages: list[OpenAIMessage] = Field(min_length=1)
    stream: bool = False
    user: str = Field("", description="The NPC's session id (or give it as the X-Parley-Session header).")


def register(app: FastAPI, npcs: NPCs) -> None:
    """Add the door's routes to ``app``."""

    @app.get("/v1/models", include_in_schema=False)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "parley"}
                                           for name, _path in npcs.assets()]}

    @app.post("/v1/chat/completions", include_in_schema=False)
    async def chat_completions(body: ChatCompletionIn, request: Request) -> Any:
        session_id = body.user or request.headers.get(SESSION_HEADER, "")
        if not session_id:
            raise ServeError("bad_request", "name the NPC's session: 'user' in the request, or the X-Parley-Session "
                             "header (a session that does not exist yet is made on the asset 'model' names)")
        line = _line(body.messages)
        _session(npcs, session_id, body.model)
        stream = npcs.turn(session_id, line, "", mock_tools=True)
        completion = Completion(f"chatcmpl-{stream.run}", int(time.time()), body.model)
        if body.stream:
            return StreamingResponse(completion.chunks(npcs, stream), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-store"})
        reply = await completion.reply(npcs, stream)
        return completion.whole(reply)


def _line(messages: list[OpenAIMessage]) -> str:
    last = messages[-1]
    if last.role != "user":
        raise ServeError("bad_request", f"messages: the last is the {last.role!r} message; the player's line is the "
                         "last message, the user's")
    if isinstance(last.content, str):
        return _whole_line(last.content)
    parts = [p.get("text") for p in last.content or [] if isinstance(p, dict) and p.get("type") == "text"]
    if not parts or not all(isinstance(p, str) for p in parts):
        raise ServeError("bad_request", "messages: the last message has no text (give a string, or text parts)")
    return _whole_line("\n".join(parts))  # type: ignore[arg-type]


def _whole_line(line: str) -> str:
    """The player's line, refused (as the native turns route refuses it) when it holds a lone surrogate:
    the turn would be kept with a line no history can hold, and every later listing of it would fail."""
    try:
        return whole_characters(line)
    except ValueError as exc:
        raise ServeError("bad_request", f"messages: the last message: {exc}") from None


def _session(npcs: NPCs, session_id: str, asset: str) -> None:
    """The session ``session_id`` on ``asset``: made when it does not exist; refused when it runs another asset."""
    try:
        npc = npcs.get(session_id)
    except ServeError as exc:
        if exc.code != "unknown_session":
            raise
        npcs.create(asset, {}, session_id)
        return
    if npc.asset_path != asset:
        raise ServeError("bad_request", f"session {session_id!r} runs {npc.asset_path!r}, not {asset!r} ('model'): "
                         "name another session for another NPC")


class Completion:
    """One chat completion: a turn's events in OpenAI's shapes."""

    def __init__(self, completion_id: str, created: int, model: str) -> None:
        self.id, self.created, self.model = completion_id, created, model

    def whole(self, reply: str) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    async def reply(self, npcs: NPCs, stream: Stream) -> str:
        """The turn's reply, or the ServeError it failed with."""
        async for item in _items(npcs, stream):
            if item.kind == "turn_finished":
                return str(item.data.get("reply", ""))
            if item.kind == "turn_failed":
                raise _failure(item.data)
        raise ServeError("internal", "the turn's stream ended without its end")  # never: the stream ends with one

    async def chunks(self, npcs: NPCs, stream: Stream) -> AsyncIterator[bytes]:
        yield self._chunk({"role": "assistant", "content": ""})
        async for item in _items(npcs, stream, keep_alive=True):
            if item is None:
                yield b": keep-alive\n\n"
            elif item.kind == "token" and item.data.get("reply") is True:
                yield self._chunk({"content": item.data.get("text", "")})
            elif item.kind == "turn_finished":
                yield self._chunk({}, "stop")
                yield b"data: [DONE]\n\n"
                return
            elif item.kind == "turn_failed":
                error = _failure(item.data)
                yield b"data: " + json.dumps(_openai_error(error)).encode() + b"\n\n"
                return


async def _items(npcs: NPCs, stream: Stream, *, keep_alive: bool = False) -> AsyncIterator[Any]:
    """The turn's events; a tool the game must answer stops the turn (this door cannot answer it), and
    the turn's end then says why."""
    asked = ""
    async for got in stream.follow(0, KEEP_ALIVE_SECONDS):
        if got is None:
            if keep_alive:
                yield None
            continue
        _number, item = got
        if item.kind == "tool_request" and not asked:
            asked = str(item.data.get("tool", ""))
            npcs.stop(stream.running)
            continue
        if item.kind == "turn_failed" and asked:
            message = (f"the NPC's tool {asked!r} needs the game's answer, which this door cannot give: give the tool "
                       "a mock_result, or run the turn on POST /v1/sessions/ID/turns and answer its tool_request")
            item = Item("turn_failed", {**item.data, "error": {"code": "bad_request", "message": message}})
        yield item


def _failure(data: dict[str, Any]) -> ServeError:
    error = data.get("error") or {}
    code = str(error.get("code", ""))
    message = str(error.get("message", "the turn failed"))
    if code in ERROR_STATUS:
        return ServeError(code, message)
    return ServeError("turn_failed", f"{code}: {message}" if code else message)  # cancelled, tool_timeout, ...


def _openai_error(error: ServeError) -> dict[str, Any]:
    return {"error": {"message": error.message, "type": error.code, "code": error.code}}
