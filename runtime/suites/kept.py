"""Kept runs: each case's last passing run and its current one, and what changed in the asset between them.

They are kept in the user's data folder (``kept_runs_folder``), not beside the suite: a run's record
(every prompt, reply and the whole asset it ran on) is output of this computer's model, large and
different on every machine, and beside the suite it would land in the designer's version control.
Each case has one JSON file there (``<suite stem>-<hash of the suite's path>/<case>-<hash>.json``)
holding ``current`` and ``passing``, each with the asset as it was at that run, so the asset edits
between the passing run and a failing one can be listed (``asset_changes``) after the file changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.asset.behaviours import expanded_from_dict, expanded_to_dict
from runtime.asset.model import Asset
from runtime.diagnostics import TurnDiagnostics
from runtime.files.writing import atomic_write_text
from runtime.names import NAMESPACE_SEP
from runtime.prompting.prompt import PromptPart
from runtime.session.record import HoldsRecord, TurnRecord
from runtime.suites.checks import Check
from runtime.suites.report import CaseResult

KEPT_VERSION = 2  # 2: each turn holds its record (TurnRecord.to_json); 1 is read too
# Editor layout (node positions): not behaviour, so never "what changed"
LAYOUT_KEY = "parley_studio"


FOLDER_VARIABLE = "PARLEY_TEST_RUNS"  # another folder for them (tests keep theirs apart)


def kept_runs_folder() -> Path:
    """``$PARLEY_TEST_RUNS``, else ``test-runs`` in the user's data folder."""
    if os.environ.get(FOLDER_VARIABLE):
        return Path(os.environ[FOLDER_VARIABLE])
    import platformdirs

    return platformdirs.user_data_path("parley-studio", appauthor=False) / "test-runs"


@dataclass
class KeptTurn(HoldsRecord):
    """One turn of a kept run: what the Tests dock and the Turn Inspector show of it."""

    number: int  # from 1
    line: str
    passed: bool
    checks: list[Check] = field(default_factory=list)
    error: str = ""
    record: TurnRecord | None = None  # None: the turn failed (``error``)

    @property
    def diagnostics(self) -> TurnDiagnostics | None:
        return self.record.diagnostics if self.record is not None else None

    @property
    def parts(self) -> dict[str, list[PromptPart]]:
        """node id -> its prompt's parts"""
        return {n: p.parts for n, p in self.record.prompts.items()} if self.record is not None else {}

    @property
    def context_sizes(self) -> dict[str, int]:
        return {n: p.context_size for n, p in self.record.prompts.items()} if self.record is not None else {}


@dataclass
class KeptRun:
    suite: str  # the suite file's path
    case: str
    passed: bool
    when: str  # ISO time, UTC
    asset: Asset  # as it was at this run
    turns: list[KeptTurn] = field(default_factory=list)

    def turn(self, number: int) -> KeptTurn | None:
        return next((t for t in self.turns if t.number == number), None)


def kept_run(suite_path: str | Path, result: CaseResult, asset: Asset) -> KeptRun:
    """The record of a finished case on ``asset`` (what it ran on)."""
    turns = [KeptTurn(t.number, t.line, t.passed, list(t.checks), t.error, t.record) for t in result.turns]
    return KeptRun(str(Path(suite_path).resolve()), result.case, result.passed,
                   datetime.now(UTC).isoformat(timespec="seconds"), asset.model_copy(deep=True), turns)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:40] or "case"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


class KeptRuns:
    """Each case's current and last passing run, one JSON file per case under ``folder``."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else kept_runs_folder()

    def file(self, suite_path: str | Path, case: str) -> Path:
        suite = str(Path(suite_path).resolve())
        return self.folder / f"{_slug(Path(suite).name)}-{_hash(suite)}" / f"{_slug(case)}-{_hash(case)}.json"

    def keep(self, run: KeptRun) -> None:
        """Keep ``run`` as the case's current run and, when it passed, as its last passing one.
        Raises ``OSError`` when the folder cannot be written."""
        path = self.file(run.suite, run.case)
        data = self._read(path)
        data.update(version=KEPT_VERSION, suite=run.suite, case=run.case, current=_run_json(run))
        if run.passed:
            data["passing"] = data["current"]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, ensure_ascii=True) + "\n")

    def current(self, suite_path: str | Path, case: str) -> KeptRun | None:
        return self._run(suite_path, case, "current")

    def last_passing(self, suite_path: str | Path, case: str) -> KeptRun | None:
        return self._run(suite_path, case, "passing")

    def _run(self, suite_path: str | Path, case: str, which: str) -> KeptRun | None:
        raw = self._read(self.file(suite_path, case)).get(which)
        if not isinstance(raw, dict):
            return None
        try:
            return _run_from_json(raw)
        except (KeyError, TypeError, ValueError, ValidationError):  # a file of another version, or damaged
            return None

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("version") in (1, KEPT_VERSION) else {}


def _run_json(run: KeptRun) -> dict[str, Any]:
    return {
        "suite": run.suite, "case": run.case, "passed": run.passed, "when": run.when,
        "asset": expanded_to_dict(run.asset),  # the asset the case ran: its behaviours expanded
        "turns": [{"number": t.number, "line": t.line, "passed": t.passed, "error": t.error,
                   "checks": [vars(c) for c in t.checks],
                   "record": t.record.to_json() if t.record is not None else None} for t in run.turns],
    }


def _run_from_json(raw: dict[str, Any]) -> KeptRun:
    turns = [KeptTurn(t["number"], t["line"], t["passed"], [Check(**c) for c in t["checks"]], t.get("error", ""),
                      _record_from_json(t)) for t in raw["turns"]]
    return KeptRun(raw["suite"], raw["case"], raw["passed"], raw["when"], expanded_from_dict(raw["asset"]), turns)


def _record_from_json(turn: dict[str, Any]) -> TurnRecord | None:
    if "record" in turn:
        return TurnRecord.from_json(turn["record"]) if turn["record"] is not None else None
    # version 1 kept the record's fields in the turn, and each prompt's parts and context size apart
    sizes = turn.get("context_sizes", {})
    return TurnRecord.from_json({
        "turn_id": -1, "index": turn["number"] - 1, "line": turn["line"], "reply": turn["reply"], "path": turn["path"],
        "diagnostics": turn.get("diagnostics"),
        "prompts": {n: {"parts": parts, "context_size": sizes.get(n, 0)} for n, parts in turn.get("parts", {}).items()}})


# --- what changed in the asset ------------------------------------------------------------------


@dataclass(frozen=True)
class AssetChange:
    """One edit between two versions of an asset: ``node`` ("" : the asset itself), the field (dotted
    into lists and mappings: ``intents[greet].exit``), and its value before and after (``None``: absent)."""

    node: str
    field: str
    old: Any
    new: Any

    def text(self) -> str:
        where = self.node or "(asset)"
        return f"{where} \u00b7 {self.field}: {_value(self.old)} \u2192 {_value(self.new)}"


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:119] + "\u2026"


def asset_changes(old: Asset, new: Asset) -> list[AssetChange]:
    """The edits that turn ``old`` into ``new``, field by field: nodes in ``new``'s order (then the
    removed ones), the asset's own fields first. Node positions and other editor layout are left out."""
    a, b = old.model_dump(mode="json", by_alias=True), new.model_dump(mode="json", by_alias=True)
    nodes_a = {n["id"]: n for n in a.pop("nodes", [])}
    nodes_b = {n["id"]: n for n in b.pop("nodes", [])}
    # One side as it ran (a behaviour's nodes added under namespaced ids), the other as the file holds
    # it: compared as the file holds both, so the behaviour's nodes are not "added" or "removed".
    expanded_a, expanded_b = (any(NAMESPACE_SEP in i for i in nodes) for nodes in (nodes_a, nodes_b))
    if expanded_a != expanded_b:
        nodes_a, nodes_b = ({i: n for i, n in nodes.items() if NAMESPACE_SEP not in i} for nodes in (nodes_a, nodes_b))
    out = [AssetChange("", f, x, y) for f, x, y in _fields(a, b)]
    for node_id, node in nodes_b.items():
        if node_id not in nodes_a:
            out.append(AssetChange(node_id, "(node)", None, f"added ({node.get('type', '?')})"))
            continue
        out += [AssetChange(node_id, f, x, y) for f, x, y in _fields(nodes_a[node_id], node)]
    for node_id, node in nodes_a.items():
        if node_id not in nodes_b:
            out.append(AssetChange(node_id, "(node)", f"{node.get('type', '?')}", "removed"))
    return out


def _fields(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted field, old, new) for each leaf that differs; lists of equal length go item by item."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in [*a, *(k for k in b if k not in a)]:
            if key == LAYOUT_KEY:
                continue
            out += _fields(a.get(key), b.get(key), f"{prefix}{key}" if not prefix else f"{prefix}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [c for i, (x, y) in enumerate(zip(a, b)) for c in _fields(x, y, f"{prefix}{_item(x, y, i)}")]
    return [(prefix, a, b)]


def _item(a: Any, b: Any, index: int) -> str:
    """A list item as a field names it: by its name when both versions have the same one
    (``intents[greet]``), else by its position (``tools[0]``)."""
    names = [x.get("name") if isinstance(x, dict) else None for x in (a, b)]
    return f"[{names[0]}]" if names[0] is not None and names[0] == names[1] else f"[{index}]"


def blamed_node(checks: list[Check]) -> str:
    """The node a failed turn is about: the first failed check that names one (an exit, the node where
    the path parted), or ""."""
    return next((c.node for c in checks if not c.passed and c.node), "")
