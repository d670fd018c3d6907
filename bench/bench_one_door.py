"""How many doors a turn goes through: the counts issue 32 ("one session, one turn record, one view")
set targets for, read from the source with ``ast`` so they are the same on every machine.

    python bench/bench_one_door.py      # prints the counts; writes bench/results/one_door.json

tests/test_one_door.py holds the counts that reached their targets there.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("runtime", "editor")
# Where an exception a turn raised becomes a code or a message: the failure table (runtime/session/failures.py)
TURN_EXCEPTIONS = {"TurnCancelled", "ModelNotFound", "ToolTimeout", "TurnError", "BackendError", "CallCancelled"}


def modules(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def turn_shapes(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """Classes that keep a finished turn's reply and path as fields of their own (not properties)."""
    found = []
    for rel, tree in trees:
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            fields = {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            if {"reply", "path"} <= fields and not cls.name.endswith("Expect"):  # an expectation is no turn
                found.append(f"{rel}:{cls.name}")
    return found


def calls(trees: list[tuple[str, ast.Module]], name: str) -> list[str]:
    return [f"{rel}:{n.lineno}" for rel, tree in trees for n in ast.walk(tree)
            if isinstance(n, ast.Call) and _name(n.func) == name]


def failure_translations(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """Functions that tell two or more of a turn's exception types apart with isinstance."""
    found = []
    for rel, tree in trees:
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            told = set()
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _name(n.func) == "isinstance" and len(n.args) == 2:
                    kinds = n.args[1].elts if isinstance(n.args[1], ast.Tuple) else [n.args[1]]
                    for k in kinds:
                        for part in ast.walk(k):
                            if _name(part) in TURN_EXCEPTIONS:
                                told.add(_name(part))
            # a failed turn written as text from the exception itself: f"the turn failed: {exc}"
            wrote = any(isinstance(n, ast.JoinedStr) and "turn failed" in ast.unparse(n)
                        and any(isinstance(v, ast.FormattedValue) and ast.unparse(v.value) == "exc" for v in n.values)
                        for n in ast.walk(fn))
            if len(told) >= 2 or wrote:
                found.append(f"{rel}:{fn.name}")
    return sorted(set(found))


def prompt_json_forms(trees: list[tuple[str, ast.Module]]) -> list[str]:
    """Modules that write or read a prompt's parts as JSON by hand: ``PromptPart(**raw)``, or
    ``asdict``/``vars`` over parts (TurnRecord's one pydantic adapter does neither)."""
    found = set()
    for rel, tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and _name(n.func) == "PromptPart" and (
                    any(isinstance(a, ast.Starred) for a in n.args) or any(k.arg is None for k in n.keywords)):
                found.add(rel)
            if isinstance(n, ast.ListComp | ast.DictComp) and isinstance(getattr(n, "elt", None), ast.Call) \
                    and _name(n.elt.func) in ("asdict", "vars") and any("parts" in ast.unparse(g.iter) for g in n.generators):
                found.add(rel)
    return sorted(found)


def sizes(trees: list[tuple[str, ast.Module]], folder: str) -> tuple[list[str], list[str]]:
    big_classes, big_functions = [], []
    for rel, tree in trees:
        if not rel.startswith(folder + "/"):
            continue
        for n in ast.walk(tree):
            length = (n.end_lineno or n.lineno) - n.lineno + 1 if hasattr(n, "lineno") else 0
            if isinstance(n, ast.ClassDef) and length > 500:
                big_classes.append(f"{rel}:{n.name} ({length})")
            elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and length > 100:
                big_functions.append(f"{rel}:{n.name} ({length})")
    return big_classes, big_functions


def follower_references() -> int:
    """References from the server follower (editor/session/follow.py; editor/server_attach.py until the
    SessionView) into the local conversation's object: it feeds the view through the view's methods."""
    tree = ast.parse((ROOT / "editor" / "session" / "follow.py").read_text(encoding="utf-8"))
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and ast.unparse(n.value) in ("conv", "self.conversation", "conversation"))


def counts() -> dict[str, object]:
    trees = list(modules(*CODE))
    agents = [c for c in calls(trees, "Agent") if not c.startswith("runtime/session/")]
    expands = [c for c in calls(trees, "expand")
               if not c.startswith(("runtime/session/", "runtime/asset/validation.py", "runtime/agent.py"))]
    big_classes, big_functions = sizes(trees, "editor")
    data = {
        "turn_shapes_with_reply_and_path": turn_shapes(trees),
        "failure_translations": failure_translations(trees),
        "prompt_json_forms": prompt_json_forms(trees),
        "agents_built_outside_the_session": agents,
        "expand_calls_outside_session_agent_and_validation": expands,
        "follower_references_into_the_local_conversation": follower_references(),
        "editor_classes_over_500_lines": big_classes,
        "editor_functions_over_100_lines": big_functions,
    }
    return data


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from conversation import write_results

    data = counts()
    write_results("one_door", {"command": "python bench/bench_one_door.py", **data})
    for key, value in data.items():
        print(f"{key}: {len(value) if isinstance(value, list) else value}")
        for item in value if isinstance(value, list) else []:
            print(f"    {item}")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
