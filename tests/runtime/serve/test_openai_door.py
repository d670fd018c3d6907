"""The OpenAI-compatible door, driven by the official ``openai`` package as a game's plugin would:
``model`` names the asset, ``user`` (or ``X-Parley-Session``) the NPC's session, the last user message
is the player's line; the reply streamed or whole is the one the native protocol records, with no
inner node's text (the Tool Call's JSON); and every bad request is an error the package raises."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import openai
import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.server import running_server

TOKEN = "tok-" + secrets.token_hex(16)
DEADLINE = 60.0


@pytest.fixture
def served() -> Iterator[str]:
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()], token=TOKEN) as url:
            yield url
    finally:
        backend.close()


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key=TOKEN, max_retries=0, timeout=DEADLINE) as made:
        yield made


def native_turns(served: str, session: str) -> list[dict]:
    answer = httpx.get(f"{served}/v1/sessions/{session}/turns", headers={"Authorization": f"Bearer {TOKEN}"},
                       timeout=DEADLINE)
    answer.raise_for_status()
    return answer.json()["turns"]


def test_a_whole_completion_is_a_turn_of_the_npc_named_by_user(client: openai.OpenAI, served: str) -> None:
    first = client.chat.completions.create(model="chat.json", user="npc-7",
                                           messages=[{"role": "system", "content": "ignored: the graph has its own"},
                                                     {"role": "user", "content": "Good evening!"}])
    reply = first.choices[0].message.content
    assert first.choices[0].finish_reason == "stop" and first.model == "chat.json" and reply
    again = client.chat.completions.create(
        model="chat.json", user="npc-7",
        messages=[{"role": "user", "content": "Good evening!"}, {"role": "assistant", "content": reply},
                  {"role": "user", "content": [{"type": "text", "text": "Any rooms free?"}]}])
    turns = native_turns(served, "npc-7")
    assert [t["line"] for t in turns] == ["Good evening!", "Any rooms free?"]  # one session, its own history
    assert [t["reply"] for t in turns] == [reply, again.choices[0].message.content]


def test_a_streamed_completion_sends_the_reply_only(client: openai.OpenAI, served: str) -> None:
    """tool_calling.json's Tool Call streams its JSON as tokens; the door sends only the reply's (its tool
    has a mock_result, which answers it)."""
    chunks = list(client.chat.completions.create(
        model="tool_calling.json", messages=[{"role": "user", "content": "How many arrows are there?"}],
        stream=True, extra_headers={"X-Parley-Session": "quartermaster"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    [turn] = native_turns(served, "quartermaster")
    assert text == turn["reply"] and "check_stock" not in text and "240" in text


def test_the_models_are_the_assets(client: openai.OpenAI) -> None:
    assert {"chat.json", "tool_calling.json", "quest_giver.json"} <= {m.id for m in client.models.list()}


def test_bad_requests_are_errors_the_package_raises(client: openai.OpenAI, served: str) -> None:
    hello = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.BadRequestError, match="session"):
        client.chat.completions.create(model="chat.json", messages=hello)  # no session named
    with pytest.raises(openai.NotFoundError, match="no_such"):
        client.chat.completions.create(model="no_such.json", messages=hello, user="npc-1")
    with pytest.raises(openai.BadRequestError, match="last"):
        client.chat.completions.create(model="chat.json", user="npc-1",
                                       messages=[*hello, {"role": "assistant", "content": "hi"}])
    client.chat.completions.create(model="chat.json", messages=hello, user="npc-2")
    with pytest.raises(openai.BadRequestError, match="runs 'chat.json'"):
        client.chat.completions.create(model="tool_calling.json", messages=hello, user="npc-2")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{served}/v1", api_key="wrong-token-xxxxxxxx", max_retries=0).chat.completions.create(
            model="chat.json", messages=hello, user="npc-2")


def test_a_tool_only_the_game_can_answer_stops_the_turn_and_says_so(client: openai.OpenAI, served: str) -> None:
    """price_of has no mock_result: this door cannot answer it, so the turn is stopped at once (not
    after the tool timeout) and the session is as it was."""
    ask = [{"role": "user", "content": "What is the price of arrows?"}]
    with pytest.raises(openai.BadRequestError, match="price_of"):
        client.chat.completions.create(model="tool_calling.json", messages=ask, user="shop")
    assert native_turns(served, "shop") == []
    with pytest.raises(openai.APIError, match="price_of"):
        list(client.chat.completions.create(model="tool_calling.json", messages=ask, user="shop", stream=True))


@pytest.mark.model
def test_the_official_package_streams_an_npc_on_the_sample_model(sample_model, tmp_path) -> None:
    from runtime.backends.llama import LlamaBackend
    from tests.samples import example_on_sample_model

    example_on_sample_model("chat", sample_model, tmp_path, 24)
    backend = LlamaBackend(asset_dir=tmp_path)
    try:
        with running_server(backend, [tmp_path], token=TOKEN) as url, \
                openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=DEADLINE) as client:
            stream = client.chat.completions.create(model="chat.json", user="innkeeper", stream=True,
                                                    messages=[{"role": "user", "content": "Is there a room?"}])
            text = "".join(c.choices[0].delta.content or "" for c in stream)
            [turn] = native_turns(url, "innkeeper")
    finally:
        backend.close()
    assert text.strip() and text == turn["reply"]


def test_half_an_emoji_in_the_players_line_is_refused_and_changes_nothing(served: str) -> None:
    """Issue 39, found fuzzing the server's routes: a lone surrogate (``\\ud83d``, a cut emoji) in the last
    message ran as the player's line. Whole, the answer was a 500 with a traceback in the log; streamed,
    the turn was kept with a line no history can hold."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    contents = ['"Hello \\ud83d"', '[{"type": "text", "text": "\\udc00 there"}]']
    for content in contents:
        for stream in ("false", "true"):
            body = (f'{{"model": "chat.json", "user": "npc-cut", "stream": {stream}, '
                    f'"messages": [{{"role": "user", "content": {content}}}]}}')
            answer = httpx.post(f"{served}/v1/chat/completions", content=body.encode(), headers=headers,
                                timeout=DEADLINE)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["code"] == "bad_request" and "lone surrogate" in error["message"], error
    listed = httpx.get(f"{served}/v1/sessions", headers=headers, timeout=DEADLINE)
    assert listed.status_code == 200 and listed.json()["sessions"] == []  # no session made, none poisoned
