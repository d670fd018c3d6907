"""A 3-NPC scene on the sample model: the tavern (Mira, Tomas, Brann, all there from the start), 20
player lines with up to 2 NPC lines after each (issue 37).

- **Cache reuse**: per NPC, the share of its history-carrying nodes' prompt tokens (Generate, Generate
  and Speak) that came from the node's KV cache, over its ordinary turns (the node ran before, and did
  not trim this turn). Target: at least 90 % for each NPC. The classifiers (its guard behaviour's
  Classify Intent, the bard's Classify Attributes) read only the line at hand, so they are reported
  apart.
- **Time to each speaker's first token**: from the NPC's turn starting to its first reply token, against
  the same NPC alone (its asset as a single agent, the same player lines, no one else's).
- **Leaks**: every line of the scene, checked against every NPC's prompts over the whole run: a line an
  NPC did not hear (a whisper to Mira every 5th line; Brann out of Tomas's earshot) must never be in
  them. Target: 0.

    python bench/bench_scene.py                # ~4 min on 2 cores: bench/results/scene.json
    python bench/bench_scene.py --lines 4      # a smoke run (not written unless --write)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from conversation import player_lines, sample_model, write_results

from runtime.backends.llama import LlamaBackend
from runtime.events import NodeStarted, Token
from runtime.resources import examples_dir
from runtime.scene.scene import Scene, SceneLine
from runtime.session.session import Session

LINES = 20
CONTEXT = 4096
MIN_REUSED_SHARE = 0.90
HISTORY_NODES = ("Generate", "GenerateAndSpeak")
NAMES = {"mira": "Mira", "tomas": "Tomas", "brann": "Brann"}


def tavern(model: str, folder: Path, context: int) -> Path:
    """The tavern scene with all three NPCs there, its assets (and their guard behaviour) on ``model``
    with ``context`` tokens per node: 20 rounds of a 3-NPC scene fill a 1,024-token window several
    times over, and a trim re-reads a node's whole prompt."""
    shutil.copytree(examples_dir(), folder / "examples")
    for name in ("tavern_keeper", "bard", "gate_guard", "behaviours/guard_threats"):
        path = folder / "examples" / f"{name}.json"
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["default_model"] = model
        for node in raw["nodes"]:
            if "context_size" in node:
                node["context_size"] = context
        path.write_text(json.dumps(raw), encoding="utf-8")
    scene_path = folder / "examples" / "scenes" / "tavern.scene.json"
    raw = json.loads(scene_path.read_text(encoding="utf-8"))
    for npc in raw["npcs"]:
        npc["present"] = True
    raw["director"]["max_npc_lines"] = 2
    scene_path.write_text(json.dumps(raw), encoding="utf-8")
    return scene_path


def script(n: int) -> list[dict[str, Any]]:
    """The player's lines: every 4th addresses an NPC by name, every 5th is whispered to Mira."""
    lines = []
    order = ["mira", "tomas", "brann"]
    for i, text in enumerate(player_lines(n, seed=9)):
        if i % 5 == 4:
            lines.append({"line": text, "to": "mira", "whisper": True})
        elif i % 4 == 3:
            npc = order[(i // 4) % 3]
            lines.append({"line": f"{NAMES[npc]}, {text[0].lower()}{text[1:]}", "to": "", "whisper": False})
        else:
            lines.append({"line": text, "to": "", "whisper": False})
    return lines


class FirstTokens:
    """Per NPC turn: seconds from its first node starting to its first reply token."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.first: dict[str, list[float]] = {}

    def __call__(self, speaker: str, event: Any) -> None:
        now = time.perf_counter()
        if isinstance(event, SceneLine):
            self.started.pop(speaker, None)
        elif isinstance(event, NodeStarted) and speaker not in self.started:
            self.started[speaker] = now
        elif isinstance(event, Token) and event.reply and speaker in self.started:
            self.first.setdefault(speaker, []).append(now - self.started.pop(speaker))


def _reuse(turns: list[Any]) -> dict[str, Any]:
    """Reused share over ordinary calls of history nodes, and of classifiers apart."""
    seen: set[str] = set()
    history = [0, 0]
    classifiers = [0, 0]
    for result in turns:
        for node in result.diagnostics.nodes:
            tokens = node.tokens
            if not tokens.prompt:
                continue
            ordinary = node.node in seen and not (node.trim and node.trim.triggered)
            seen.add(node.node)
            if not ordinary:
                continue
            bucket = history if node.type in HISTORY_NODES else classifiers
            bucket[0] += tokens.reused
            bucket[1] += tokens.prompt
    share = (lambda b: round(b[0] / b[1], 3) if b[1] else None)
    return {"history_nodes_reused_share": share(history), "history_prompt_tokens": history[1],
            "classifiers_reused_share": share(classifiers), "classifier_prompt_tokens": classifiers[1]}


def _leaks(scene: Scene) -> list[dict[str, str]]:
    found = []
    for npc, member in scene.members.items():
        prompts = "\n".join(m.content for r in scene.rounds for t in r.turns if t.npc == npc
                            for node in t.result.diagnostics.nodes for m in node.input.prompt)
        for line in scene.transcript:
            if line.speaker != npc and line not in member.heard and f"{line.name}: {line.text}" in prompts:
                found.append({"npc": npc, "line": f"{line.name}: {line.text}"})
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=LINES)
    parser.add_argument("--context", type=int, default=CONTEXT, help="every node's context size")
    parser.add_argument("--write", action="store_true", help="write the results of a shorter run too")
    args = parser.parse_args()
    model = sample_model()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        path = tavern(model, Path(folder), args.context)
        backend = LlamaBackend(asset_dir=path.parent)
        try:
            scene = Scene.open(path, backend, session_id="bench")
            timing = FirstTokens()
            rounds = []
            for i, step in enumerate(script(args.lines)):
                t0 = time.perf_counter()
                round_ = scene.say(step["line"], to=step["to"], whisper=step["whisper"], on_event=timing)
                seconds = time.perf_counter() - t0
                t1 = time.perf_counter()
                read = scene.warm()  # while the player reads and types (as parley serve and the editor do)
                warm_s = time.perf_counter() - t1
                rounds.append({"round": i, "speakers": round_.speakers, "rules": [t.rule for t in round_.turns],
                               "heard_by": list(round_.player.heard_by), "seconds": round(seconds, 2),
                               "read_ahead_s": round(warm_s, 2),
                               "read_ahead_tokens": {npc: sum(nodes.values()) for npc, nodes in read.items()}})
                print(f"round {i:2d}: {', '.join(round_.speakers)} ({seconds:.1f} s, read-ahead {warm_s:.1f} s)",
                      flush=True)
            # The same NPCs alone: each its own agent, the same player lines, nobody else.
            alone = FirstTokens()
            for npc, member in scene.members.items():
                session = Session(member.session.agent.source_asset, backend, member.session.folder,
                                  session_id=f"alone/{npc}")
                for step in script(args.lines)[: max(1, args.lines // 2)]:
                    session.turn(step["line"], on_event=lambda event, npc=npc: alone(npc, event))
                    session.warm()
            per_npc = {}
            for npc, member in scene.members.items():
                results = [t.result for r in scene.rounds for t in r.turns if t.npc == npc]
                scene_first = timing.first.get(npc, [])
                alone_first = alone.first.get(npc, [])
                per_npc[npc] = {
                    "lines_spoken": len(results), **_reuse(results),
                    "first_token_s_median": round(statistics.median(scene_first), 3) if scene_first else None,
                    "first_token_s_median_alone": round(statistics.median(alone_first), 3) if alone_first else None,
                }
            leaks = _leaks(scene)
        finally:
            backend.close()
    shares = [v["history_nodes_reused_share"] for v in per_npc.values() if v["history_nodes_reused_share"] is not None]
    summary = {
        "player_lines": args.lines, "context_size": args.context, "npc_lines": sum(len(r["speakers"]) for r in rounds),
        "per_npc": per_npc, "leaks": len(leaks), "leaked_lines": leaks[:10],
        "targets": {"history_nodes_reused_share_min": MIN_REUSED_SHARE, "leaks": 0},
        "pass_reuse": bool(shares) and min(shares) >= MIN_REUSED_SHARE and len(shares) == len(per_npc),
        "pass_leaks": not leaks,
        "read_ahead_s_median": round(statistics.median(r["read_ahead_s"] for r in rounds), 2) if rounds else None,
        "round_s_median": round(statistics.median(r["seconds"] for r in rounds), 2) if rounds else None,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    summary["pass"] = summary["pass_reuse"] and summary["pass_leaks"]
    print(json.dumps({k: v for k, v in summary.items() if k != "leaked_lines"}, indent=1))
    if args.lines == LINES or args.write:
        write_results("scene", {"summary": summary, "rounds": rounds})
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
