"""The scenes a server runs: several NPCs in one conversation (``runtime.scene``), on the server's one
backend. A round (the player's line and the NPC lines the director picks after it) runs on a worker
thread, as a session's turn does, and its events come back as a run: ``round_started``, every line
said (``scene_line``), each speaking NPC's node events and tool requests with its ``speaker``, then
``round_finished`` or ``round_failed``.

A scene runs one round at a time; a line, a join, a leave or a rewind while it runs is ``busy``. A
round that fails or is cancelled leaves the scene as it was (``Scene.say`` takes it back whole).
Scenes live in memory only (the session store keeps single sessions), and a round's stream cannot be
resumed: it is cancelled when its stream closes, so a dropped connection changes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.agent import noting_nodes
from runtime.crashes import Running
from runtime.events import Event, TurnFinished
from runtime.problems import Problem
from runtime.scene.model import SceneAsset, SceneError, load_scene
from runtime.scene.scene import Scene, SceneLine, SceneRound
from runtime.serve.logs import about_turn
from runtime.serve.npcs import Item, NPCs, RunningTurn, Stream
from runtime.serve.protocol import (
    SESSION_ID,
    SESSION_ID_RULE,
    RoundOut,
    SceneLineOut,
    SceneNpcOut,
    SceneOut,
    ServeError,
    SpokenTurnOut,
    event_data,
)
from runtime.session.record import TurnRecord

# A read-ahead stops at the end of the chunk it is reading (llama.cpp aborts a long read at once):
# a request that changes the scene waits this long for it at most.
READ_AHEAD_STOP_S = 10.0
log = logging.getLogger("parley.serve")

# Backend cache keys of a scene's NPCs: "scene:SCENE/NPC/NODE". A session id never holds ':', so a
# session's "SESSION/NODE" keys (and their release on delete) never meet a scene's.
KEY_PREFIX = "scene:"


def line_out(line: SceneLine) -> SceneLineOut:
    return SceneLineOut(speaker=line.speaker, name=line.name, text=line.text, heard_by=list(line.heard_by))


@dataclass
class ServedScene:
    """One scene of the server: the ``Scene``, the round it runs (if any) and the latest round's events."""

    id: str
    path: str  # the scene file, as the game named it
    scene: Scene
    running: RunningTurn | None = None
    stream: Stream | None = None
    finished: int = 0  # transcript lines of the finished rounds: GET transcript's answer while a round runs
    # The read-ahead after a round (``Scene.warm``), while the game waits for the player: set
    # ``warming`` to stop it; ``warmed`` is set once it has stopped.
    warming: threading.Event | None = None
    warmed: threading.Event | None = None

    def stop_reading_ahead(self) -> threading.Event | None:
        """Stop the read-ahead, if one runs; returns the event set once it has stopped."""
        if self.warming is None:
            return None
        self.warming.set()
        return self.warmed

    def wait_for_read_ahead(self) -> None:
        """Stop the read-ahead and wait for it (it stops at the end of the chunk it reads)."""
        stopped = self.stop_reading_ahead()
        if stopped is not None:
            stopped.wait(READ_AHEAD_STOP_S)

    def out(self) -> SceneOut:
        return SceneOut(id=self.id, scene=self.path, name=self.scene.asset.name,
                        npcs=[SceneNpcOut(id=m.npc, name=m.name, present=m.present) for m in self.scene.members.values()],
                        rounds=len(self.scene.rounds), busy=self.running is not None)

    def transcript(self) -> list[SceneLineOut]:
        return [line_out(line) for line in self.scene.transcript[:self.finished]]


class ServedScenes:
    """Every scene of one server, beside its sessions (``NPCs``): the same backend, workers, asset
    folders, limits and shutdown. Its methods run on the event loop; rounds run on worker threads."""

    def __init__(self, npcs: NPCs) -> None:
        self.npcs = npcs
        self.scenes: dict[str, ServedScene] = {}
        self._ids = itertools.count(1)
        npcs.scenes = self

    def npc_count(self) -> int:
        return sum(len(held.scene.members) for held in list(self.scenes.values()))

    def stop_all(self, shutdown: bool) -> int:
        """Stop every running round (the server stops); returns how many ran."""
        stopped = 0
        for held in list(self.scenes.values()):
            held.stop_reading_ahead()
            if held.running is not None:
                held.running.shutdown = shutdown
                self.npcs.stop(held.running)
                stopped += 1
        return stopped

    # --- scenes -----------------------------------------------------------------------------------

    def create(self, name: str, scene_id: str | None) -> ServedScene:
        if scene_id is not None and not SESSION_ID.fullmatch(scene_id):
            raise ServeError("bad_request", f"id: {SESSION_ID_RULE}")
        path = self.npcs.resolve_asset(name, "scene")
        asset = self._checked_scene(path, name)
        npcs = self.npcs
        if npcs.held() + len(asset.npcs) > npcs.limits.max_sessions:
            raise ServeError("limit_reached", f"the server holds {npcs.limits.max_sessions} sessions (a scene's NPCs "
                             "count one each), its limit (--max-sessions); delete one first")
        if scene_id is None:
            scene_id = f"scene-{next(self._ids)}-{secrets.token_hex(3)}"
        if scene_id in self.scenes:
            raise ServeError("exists", f"a scene {scene_id!r} exists already")
        try:
            scene = Scene(asset, npcs.backend, path.parent, session_id=KEY_PREFIX + scene_id, source=name)
        except SceneError as exc:
            raise ServeError("bad_scene", f"scene {name!r}: an NPC's asset does not load", exc.problems) from None
        held = self.scenes[scene_id] = ServedScene(scene_id, name, scene)
        log.info("scene %s: %s (%s)", scene_id, name, ", ".join(scene.members), extra={"session": scene_id})
        return held

    def _checked_scene(self, path: Path, name: str) -> SceneAsset:
        """The scene file at ``path``, and each NPC's asset checked as a session's is (inside the served
        folders, loaded, no errors); ``bad_scene`` names the field of what is wrong."""
        try:
            asset = load_scene(path)
        except SceneError as exc:
            raise ServeError("bad_scene", f"scene {name!r} cannot be loaded: {exc.problems[0].message}",
                             exc.problems) from None
        for index, npc in enumerate(asset.npcs):
            field = f"npcs.{index}.asset"
            try:
                npc_path = (path.parent / npc.asset).resolve()
            except (OSError, RuntimeError, ValueError):
                npc_path = path.parent / npc.asset
            if not (any(npc_path.is_relative_to(folder) for folder in self.npcs.asset_dirs) and npc_path.is_file()):
                message = (f"NPC {npc.id!r}: its asset {npc.asset!r} is no file inside the server's asset folders "
                           "(--assets)")
                raise ServeError("bad_scene", f"scene {name!r}: {message}", [Problem("error", message, name, field=field)])
            try:
                self.npcs.checked_asset(npc_path, npc.asset)
            except ServeError as exc:
                raise ServeError("bad_scene", f"scene {name!r}: NPC {npc.id!r} ({field}): {exc.message}",
                                 [Problem("error", f"NPC {npc.id!r}: {exc.message}", name, field=field),
                                  *exc.problems]) from None
        return asset

    def get(self, scene_id: str) -> ServedScene:
        held = self.scenes.get(scene_id)
        if held is None:
            raise ServeError("unknown_scene", f"no scene {scene_id[:80]!r} (GET /v1/scenes lists them)")
        return held

    def idle(self, scene_id: str, *, changing: bool = True) -> ServedScene:
        """The scene, with no round running; ``changing``: a read-ahead is stopped first."""
        held = self.get(scene_id)
        if held.running is not None:
            raise ServeError("busy", f"scene {scene_id!r} is running a round; wait for it or cancel it")
        if changing:
            held.wait_for_read_ahead()
        return held

    def _npc(self, held: ServedScene, npc: str, field: str) -> str:
        if npc not in held.scene.members:
            raise ServeError("unknown_npc", f"{field}: scene {held.id!r} has no NPC {npc[:80]!r} (its NPCs: "
                             f"{', '.join(held.scene.members)})")
        return npc

    def delete(self, scene_id: str) -> None:
        held = self.get(scene_id)
        del self.scenes[scene_id]
        held.wait_for_read_ahead()
        if held.running is not None:
            self.npcs.stop(held.running)
        self.npcs.release_caches(KEY_PREFIX + scene_id)
        log.info("scene %s deleted", scene_id, extra={"session": scene_id})

    def join(self, scene_id: str, npc: str) -> ServedScene:
        held = self.idle(scene_id)
        held.scene.join(self._npc(held, npc, "npc"))
        return held

    def leave(self, scene_id: str, npc: str) -> ServedScene:
        held = self.idle(scene_id)
        held.scene.leave(self._npc(held, npc, "npc"))
        return held

    def rewind(self, scene_id: str, keep: int) -> ServedScene:
        """Keep the first ``keep`` rounds; the later ones are taken back."""
        held = self.idle(scene_id)
        rounds = len(held.scene.rounds)
        if keep > rounds:
            raise ServeError("bad_request", f"rounds: the scene has {rounds} rounds; it can keep {rounds} at most")
        held.scene.rewind(rounds - keep)
        held.finished = len(held.scene.transcript)
        return held

    def cancel(self, scene_id: str) -> bool:
        held = self.get(scene_id)
        if held.running is None or not self.npcs.stop(held.running):
            return False  # none runs, or it was kept already
        log.info("scene %s: the client cancelled the running round", scene_id, extra={"session": scene_id})
        return True

    def tool_result(self, scene_id: str, call_id: str, result: str) -> None:
        self.npcs.answer_call(self.get(scene_id).running, call_id, result, f"scene {scene_id!r}")

    # --- rounds -----------------------------------------------------------------------------------

    def say(self, scene_id: str, line: str | None, to: str, whisper: bool, mock_tools: bool) -> Stream:
        """Start a round; its events arrive on the returned stream, the last round_finished or round_failed."""
        npcs = self.npcs
        if line is not None:
            npcs.check_line(line, "")
        if npcs.closing:
            raise ServeError("shutting_down", "the server is shutting down: it takes no new rounds")
        held = self.idle(scene_id, changing=False)
        read_ahead = held.stop_reading_ahead()  # the round waits for it on its own thread
        if to:
            self._npc(held, to, "to")
            if not held.scene.members[to].present:
                raise ServeError("bad_request", f"to: {to!r} is not in the scene now (POST /v1/scenes/{scene_id}/join "
                                 "brings it in)")
        elif whisper:
            raise ServeError("bad_request", "whisper: a whisper needs the NPC it is whispered to (to)")
        stream = Stream(asyncio.get_running_loop(), npcs.limits.max_stream_events, lambda _item: None, line or "",
                        cancel_on_disconnect=True, session=held.id)
        stream.turn = len(held.scene.rounds)
        held.running, held.stream = stream.running, stream
        stream.put(Item("round_started", {"scene": held.id, "round": stream.turn, "line": line, "to": to,
                                            "whisper": whisper, "run": stream.run}))
        npcs.start_thread(self._round, (held, stream, line, to, whisper, mock_tools, read_ahead),
                          f"parley-round-{held.id}")
        return stream

    def _round(self, held: ServedScene, stream: Stream, line: str | None, to: str, whisper: bool,
               mock_tools: bool, read_ahead: threading.Event | None = None) -> None:
        if read_ahead is not None:
            read_ahead.wait(READ_AHEAD_STOP_S)
        npcs, running, scene = self.npcs, stream.running, held.scene
        index = stream.turn or 0
        started = time.perf_counter()
        about_turn(held.id, index)
        speaker = [""]  # the NPC speaking now: named by each of its events and tool requests
        noted: Running | None = None
        notes: dict[str, Any] = {}
        if npcs.crash_watch is not None:
            noted = npcs.crash_watch.running(f"round {index + 1} of scene {held.id} ({held.path}) started")
            notes = {npc: noting_nodes(member.session.agent, noted, f"NPC {npc} of scene {held.id} ({held.path})")
                     for npc, member in scene.members.items()}

        def on_event(npc: str, event: Event | SceneLine) -> None:
            if isinstance(event, SceneLine):
                stream.put(Item("scene_line", line_out(event).model_dump()))
            elif not isinstance(event, TurnFinished):  # round_finished follows, with each NPC's turn
                speaker[0] = npc
                if npc in notes:
                    notes[npc](event)
                stream.put(Item(event.kind, {"speaker": npc, **event_data(event)}))
            if stream.overflowed:
                running.cancel.set()

        tool_result = npcs.asking_the_game(stream, running, lambda: {"speaker": speaker[0]})
        before = len(scene.transcript)
        npcs.take_a_worker()
        try:
            done = scene.say(line, to=to, whisper=whisper, on_event=on_event, cancel=running.cancel,
                             tool_result=tool_result, mock_tools=mock_tools, commit=running.keep)
            last = Item("round_finished", _round_out(index, done, scene.transcript[before:]).model_dump())
        except BaseException as exc:  # noqa: BLE001 - every failure ends the stream with a typed error, never a traceback
            last = Item("round_failed", {"line": line, "speaker": speaker[0], "error": npcs.failure(exc, stream)})
        finally:
            if noted is not None:
                noted.done()
            npcs.give_the_worker_back()

            warming = threading.Event() if last.kind == "round_finished" and not npcs.closing else None
            warmed = threading.Event() if warming is not None else None

            def leaving() -> None:
                held.running = None  # idle before the client hears the round ended
                held.finished = len(scene.transcript)
                held.warming, held.warmed = warming, warmed

            npcs.thread_ends(leaving, still_running=warming is not None)
        seconds = time.perf_counter() - started
        if last.kind == "round_finished":
            log.info("round finished in %.0f ms", seconds * 1000)
        else:
            error = last.data["error"]
            log.log(logging.INFO if error["code"] == "cancelled" else logging.WARNING, "round failed (%s) in %.0f ms: %s",
                    error["code"], seconds * 1000, error["message"])
        stream.put(last, last=True)
        stream.close()
        if warming is not None and warmed is not None:
            self._read_ahead(held, warming, warmed)

    def _read_ahead(self, held: ServedScene, warming: threading.Event, warmed: threading.Event) -> None:
        """While the game waits for the player: every NPC there reads ahead (``Scene.warm``), until
        done or stopped (the next request that changes the scene, a delete, the server stopping)."""
        started = time.perf_counter()
        if not self.npcs.try_a_worker():  # every place computes a turn: those come first
            log.info("no read-ahead: every worker is busy", extra={"session": held.id})
            self.npcs.thread_ends(warmed.set)
            return
        try:
            read = held.scene.warm(warming)
            log.info("read ahead %d tokens in %.0f ms%s", sum(n for nodes in read.values() for n in nodes.values()),
                     (time.perf_counter() - started) * 1000, " (stopped)" if warming.is_set() else "",
                     extra={"session": held.id})
        except Exception:  # a read-ahead only saves time: the next round reads what it lacks
            log.warning("scene %s: the read-ahead failed", held.id, exc_info=True, extra={"session": held.id})
        finally:
            self.npcs.give_the_worker_back()
            self.npcs.thread_ends(warmed.set)


def _round_out(index: int, done: SceneRound, lines: list[SceneLine]) -> RoundOut:
    return RoundOut(round=index, speakers=done.speakers, lines=[line_out(line) for line in lines],
                    turns=[SpokenTurnOut(speaker=t.npc, rule=t.rule,
                                         record=TurnRecord.of(t.heard, t.result).without_details())
                           for t in done.turns])
