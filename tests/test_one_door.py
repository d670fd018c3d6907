"""Every entry point runs an agent through the session's one door (bench/bench_one_door.py counts
them): a new reader that made its own agent, translated a failure itself or wrote prompts as JSON by
hand would fail here, naming where."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _counts() -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("bench_one_door", ROOT / "bench" / "bench_one_door.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.counts()


def test_agents_failures_prompts_and_behaviours_go_through_the_session():
    counts = _counts()
    assert counts["agents_built_outside_the_session"] == [], "make a runtime.session.Session instead"
    assert counts["failure_translations"] == ["runtime/session/failures.py:failure_of"], "use failure_of"
    assert counts["prompt_json_forms"] == [], "use TurnRecord.to_json / from_json"
    # a reader of the whole graph below the session (the memory estimate) takes validation.as_run
    assert counts["expand_calls_outside_session_agent_and_validation"] == [], (
        "use runtime.session.graph_of / open_graph, or runtime.asset.validation.as_run below the session")
    assert len(counts["turn_shapes_with_reply_and_path"]) <= 4, counts["turn_shapes_with_reply_and_path"]
    # the follower feeds the SessionView through its methods, never the local conversation (55 before it)
    assert counts["follower_references_into_the_local_conversation"] == 0, "feed editor.session.view.SessionView"
