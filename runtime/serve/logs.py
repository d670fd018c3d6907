"""``parley serve``'s log: plain lines (``[SESSION turn N]`` before the message when it is about
one), or with ``--log-format json`` one JSON object a line that a log system reads as it is, each
with the session and turn it is about when it is about one.

A turn's thread says which session and turn it runs (``about_turn``); every line logged on that
thread meanwhile carries them, whoever logs it (the runtime's nodes, the backend). A line logged
elsewhere names them itself: ``log.info(..., extra={"session": id})``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time

_TURN: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("parley_turn", default=None)
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(about)s%(message)s"


def about_turn(session: str, turn: int) -> None:
    """Lines logged on this thread from now are about ``session``'s turn ``turn`` (from 0)."""
    _TURN.set((session, turn))


class TurnIds(logging.Filter):
    """Gives each record ``session`` and ``turn`` (None when it is about neither)."""

    def filter(self, record: logging.LogRecord) -> bool:
        about = _TURN.get()
        if not hasattr(record, "session"):
            record.session = about[0] if about else None
        if not hasattr(record, "turn"):
            record.turn = about[1] if about and record.session == about[0] else None
        record.about = "" if record.session is None else (
            f"[{record.session}] " if record.turn is None else f"[{record.session} turn {record.turn}] ")
        return True


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, session, turn, and the
    traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "session": getattr(record, "session", None),
            "turn": getattr(record, "turn", None),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(fmt: str) -> None:
    """The process's log as ``fmt`` says ("text" or "json"), at INFO."""
    handler = logging.StreamHandler()
    handler.addFilter(TurnIds())
    handler.setFormatter(JsonLines() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
