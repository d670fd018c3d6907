"""The Python client's driver for the protocol test set (clients/protocol/README.md): runs each step of
``conversation.json`` through ``runtime.serve.client`` and prints ``step N JSON``. Run as
``python -m tests.clients.protocol_python`` with the driver's environment."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from runtime.serve.client import ParleyClient, ParleyError, ServerEvent, ToolRequest, TurnFailed
from tests.clients.protocol import named

WAIT = 20.0  # a wait's deadline: past it the step fails instead of hanging


class Seen:
    """One turn's observation, as clients/protocol/README.md defines it."""

    def __init__(self) -> None:
        self.tools: list[str] = []
        self.shown, self.reply, self.error, self.line = "", "", "", ""
        self.spoken: list[str] = []
        self.tags: dict[str, str] = {}
        self.queued = threading.Event()

    def event(self, event: ServerEvent) -> None:
        if event.kind == "token" and event.is_reply:
            self.shown += event.data["text"]
        elif event.kind == "speak":
            self.spoken.append(event.data["text"])
        elif event.kind == "tag":
            self.tags[event.data["name"]] = event.data["value"]
        elif event.kind == "turn_queued":
            self.queued.set()

    def run(self, client: ParleyClient, session: str, line: str, tools: Any) -> Seen:
        try:
            self.reply = client.turn(session, line, tools=tools, on_event=self.event).reply
        except TurnFailed as exc:
            self.error, self.line = exc.code, exc.line
        return self

    def json(self) -> dict[str, Any]:
        return {"tools": self.tools, "shown": self.shown, "reply": self.reply, "spoken": self.spoken,
                "queued": self.queued.is_set(), "tags": self.tags, "error": self.error, "line": self.line}


def answering(seen: Seen, answers: dict[str, str]):
    def tools(request: ToolRequest) -> str:
        seen.tools.append(request.tool)
        return answers.get(request.tool, "unknown tool")
    return tools


def say(client: ParleyClient, step: dict[str, Any]) -> dict[str, Any]:
    seen, session = Seen(), step["session"]
    answer = answering(seen, step.get("tools", {}))
    if step.get("cancel_at") == "tool_request":
        def cancelling(request: ToolRequest) -> str:
            answer(request)
            client.cancel(session)
            return "cancelled"  # the server has stopped waiting: the client drops it (unknown_call)
        return seen.run(client, session, step["line"], cancelling).json()
    return seen.run(client, session, step["line"], answer).json()


def double_text(client: ParleyClient, step: dict[str, Any]) -> dict[str, Any]:
    first, second, session = Seen(), Seen(), step["session"]
    answers = step.get("tools", {})
    answer_second = answering(second, answers)
    answer_first = answering(first, answers)
    talker = threading.Thread(target=second.run, args=(client, session, step["second"], answer_second))

    def first_tools(request: ToolRequest) -> str:
        talker.start()  # the player speaks again while the NPC waits on the game
        if not second.queued.wait(WAIT):
            raise RuntimeError("the second line was never queued")
        return answer_first(request)

    first.run(client, session, step["line"], first_tools)
    talker.join(WAIT)
    return {"first": first.json(), "second": second.json()}


def run(client: ParleyClient, step: dict[str, Any]) -> dict[str, Any]:
    match step["do"]:
        case "health":
            return {"status": client.health().status}
        case "create":
            made = client.create_session(step["asset"], id=step["session"])
            return {"session": made.id, "turns": made.turns}
        case "say":
            return say(client, step)
        case "double_text":
            return double_text(client, step)
        case "history":
            lines = client.turns(step["session"])
            return {"turns": len(lines), "lines": [t.line for t in lines]}
        case "delete":
            client.delete_session(step["session"])
            return {"deleted": True}
    raise ValueError(f"unknown step {step['do']!r}")


def main() -> None:
    name = os.environ["PARLEY_CLIENT"]
    with open(os.environ["PARLEY_PROTOCOL"], encoding="utf-8") as script:
        steps = named(json.load(script)["steps"], name)
    with ParleyClient(os.environ["PARLEY_URL"], token=os.environ.get("PARLEY_TOKEN")) as client:
        for n, step in enumerate(steps):
            try:
                seen = run(client, step)
            except ParleyError as exc:
                seen = {"error": exc.code}
            print(f"step {n} {json.dumps(seen)}", flush=True)
    print("protocol done", flush=True)


if __name__ == "__main__":
    main()
