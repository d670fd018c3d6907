"""Comparing variants (``parley test SUITE --variant B.json``): the time for a 200-conversation A/B
run at --jobs 1 and 2, and whether the comparison finds a planted 10-point drop.

- **scripted**: 200 one-turn conversations on a router (a classifier, a reply, a tool call) on the
  deterministic scripted backend; B's classifier misroutes 10 % of them. The sample model is too
  slow for 400 conversations here (about 2 s a turn on 2 cores: some 13 minutes a run), so this
  times the comparison's own machinery: two suite runs, the traces, the statistics, the divergences.
- **sample model**: a smaller run on the sample model, CONVERSATIONS_MODEL one-turn conversations
  of the chat example against a copy of it (0 differing turns expected) and against a variant
  with another system prompt.

    python bench/bench_variants.py            # writes bench/results/variants.json
    python bench/bench_variants.py --no-model # the scripted part only
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path

from conversation import sample_model, write_results

from runtime.backends.llama import LlamaBackend
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.resources import examples_dir
from runtime.suites.variants import compare_variants

CONVERSATIONS = 200
CONVERSATIONS_MODEL = 8
LINES = ["greet me please", "shop for a sword", "hello there, greet", "I want to shop for bread"]
ROUTER = {
    "version": 1, "name": "router", "default_model": "m.gguf", "start_node": "classify",
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "intents": [
            {"name": "greet", "exit": "hello"}, {"name": "shop", "exit": "tools"}], "fallback_exit": "hello"},
        {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet."},
        {"id": "tools", "type": "ToolCall", "default_exit": "hello", "tools": [
            {"name": "stock", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
             "mock_result": "3 left"}]},
    ],
}


def scripted_files(folder: Path) -> tuple[Path, Path]:
    cases = []
    for i in range(CONVERSATIONS):
        line = f"{LINES[i % 4]} number {i}"
        intent = "greet" if "greet" in line else "shop"
        cases.append({"name": f"c{i:03}", "turns": [{"say": line, "expect": {"exits": {"classify": f"intent:{intent}"}}}]})
    (folder / "router.json").write_text(json.dumps(ROUTER), encoding="utf-8")
    (folder / "router.suite.yaml").write_text(json.dumps({"asset": "router.json", "cases": cases}), encoding="utf-8")
    b = json.loads(json.dumps(ROUTER))
    b["nodes"][0]["intents"][1]["description"] = "buying things"
    (folder / "b.json").write_text(json.dumps(b), encoding="utf-8")
    return folder / "router.suite.yaml", folder / "b.json"


def misrouting():
    chosen = set(random.Random(25).sample(range(CONVERSATIONS), CONVERSATIONS // 10))

    def reply(key: str, request) -> str:
        text = default_reply(key, request)
        number = re.search(r"number (\d+)", request.messages[-1].content)
        if key == "classify" and "buying things" in request.messages[0].content and number and int(number[1]) in chosen:
            return "shop" if text == "greet" else "greet"
        return text

    return lambda: ScriptedBackend(reply)


def summary(report, load_before: float) -> dict:
    """One run's numbers; conversations are counted on both arms. The load averages say how busy the
    machine was (other processes on its 2 cores slow a run: compare runs of a like load)."""
    return {"wall_s": round(report.seconds, 2), "conversations": report.conversations,
            "conversations_per_min_both_arms": round(2 * report.conversations / report.seconds * 60, 1),
            "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2),
            "pass_rate_a": report.pass_rate_a, "pass_rate_b": report.pass_rate_b,
            "difference": round(report.difference, 4), "ci": [round(report.ci_low, 4), round(report.ci_high, 4)],
            "discordant": list(report.discordant), "mcnemar_p": float(f"{report.mcnemar_p:.4g}"),
            "differing_turns": report.differing_turns}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-model", action="store_true", help="skip the sample model's run")
    args = parser.parse_args()
    results: dict = {"scripted": {"conversations": CONVERSATIONS, "planted_drop": 0.1, "runs": {}}}
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        suite, variant = scripted_files(Path(tmp))
        compare_variants(suite, variant, misrouting())  # warm-up: imports (statsmodels), first-call costs
        for jobs in args.jobs:
            load = os.getloadavg()[0]
            report = compare_variants(suite, variant, misrouting(), jobs=jobs)
            results["scripted"]["runs"][jobs] = summary(report, load)
            ok &= report.mcnemar_p < 0.05 and report.discordant == (20, 0)
            print("scripted", jobs, results["scripted"]["runs"][jobs])
    if not args.no_model:
        model = sample_model()
        results["sample_model"] = {"model": model, "conversations": CONVERSATIONS_MODEL, "runs": {}}
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            chat = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
            chat["default_model"] = model
            (folder / "chat.json").write_text(json.dumps(chat), encoding="utf-8")
            shutil.copy(folder / "chat.json", folder / "copy.json")
            chat["nodes"][0]["system_prompt"] = chat["nodes"][0]["system_prompt"].replace("warm", "gruff")
            (folder / "gruff.json").write_text(json.dumps(chat), encoding="utf-8")
            cases = [{"name": f"c{i}", "variables": {"player_name": "Aldric"},
                      "turns": [{"say": line, "expect": {"path": ["reply"], "reply": {"max_words": 90}}}]}
                     for i, line in enumerate(["Good evening! Is there a room free tonight?",
                                               "What do you have for supper?"])]
            (folder / "chat.suite.yaml").write_text(json.dumps({"asset": "chat.json", "cases": cases}), encoding="utf-8")
            repeat = CONVERSATIONS_MODEL // len(cases)
            for name in ("copy", "gruff"):
                for jobs in args.jobs:
                    load = os.getloadavg()[0]
                    report = compare_variants(folder / "chat.suite.yaml", folder / f"{name}.json", LlamaBackend,
                                              repeat=repeat, jobs=jobs)
                    results["sample_model"]["runs"][f"{name}, jobs {jobs}"] = summary(report, load)
                    ok &= name != "copy" or report.differing_turns == 0
                    print("model", name, jobs, results["sample_model"]["runs"][f"{name}, jobs {jobs}"])
    write_results("variants", results, merge=True)  # --no-model keeps the model's run
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
