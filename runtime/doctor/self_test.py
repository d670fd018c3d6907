"""The self-test's report: which settings are reproducible, and the replay cases on the chosen ones.

On the embedded engine, the layout probes (``numerics``) say for each flash attention mode and KV
type whether a token's numbers hold at another thread count, then the cases (``cases``) run through
an agent on the chosen settings. On llama.cpp's server the cases run twice, with ``cache_prompt`` on
and off; on any other server once. ``SelfTestReport.passed`` is whether the chosen settings' cases all passed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from runtime.backends.base import Backend, Reproducibility
from runtime.backends.llama_build import build_summary
from runtime.backends.llama_server import CACHED_PROMPTS_NOTE, LlamaServerBackend
from runtime.doctor.cases import CASES, Case, ReplayCaseResult, run_cases
from runtime.doctor.numerics import SETTINGS, NumericsProbe, SelfTestCancelled, probe_numerics
from runtime.models.context_settings import FLASH_ATTN, KV_TYPE, FlashAttention, KVType, context_params
from runtime.models.folder import resolve_model
from runtime.nodes.running import TurnCancelled
from runtime.problems import BackendError

if TYPE_CHECKING:
    from runtime.backends.llama import LlamaBackend

Verdict = Literal["yes", "same threads", "no", "not allowed", "not known"]
# How a verdict reads in a table.
VERDICT_TEXT: dict[str, str] = {"yes": "yes", "same threads": "at one thread count", "no": "no",
                                "not allowed": "not allowed", "not known": "not known"}
Progress = Callable[[str], None]

__all__ = ["CaseSet", "SelfTestCancelled", "SelfTestReport", "SettingRow", "embedded_report", "server_report"]


@dataclass(frozen=True)
class SettingRow:
    setting: str
    reproducible: Verdict
    reason: str  # one line
    chosen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "reproducible": self.reproducible, "reason": self.reason,
                "chosen": self.chosen}


@dataclass
class CaseSet:
    """The cases run on one configuration of the backend."""

    configuration: str
    chosen: bool
    cases: list[ReplayCaseResult]
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return any(c.passed for c in self.cases) and all(c.passed is not False for c in self.cases)

    @property
    def failed(self) -> list[ReplayCaseResult]:
        return [c for c in self.cases if c.passed is False]

    def to_dict(self) -> dict[str, Any]:
        return {"configuration": self.configuration, "chosen": self.chosen, "passed": self.passed,
                "seconds": round(self.seconds, 2), "cases": [c.to_dict() for c in self.cases]}


@dataclass
class SelfTestReport:
    backend: str  # the chosen backend's label
    model: str
    promise: Reproducibility  # what the chosen backend says of itself
    settings: list[SettingRow]
    runs: list[CaseSet]
    alternative: str  # the exact alternative to the chosen settings ("" when they are exact)
    seconds: float = 0.0
    numerics: list[NumericsProbe] = field(default_factory=list)
    build: str = ""  # the embedded llama.cpp build and what its self-check found on this host

    @property
    def chosen(self) -> list[CaseSet]:
        return [r for r in self.runs if r.chosen]

    @property
    def passed(self) -> bool:
        """The chosen settings' cases all passed."""
        return bool(self.chosen) and all(r.passed for r in self.chosen)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "model": self.model, "passed": self.passed,
            "promise": {"exact": self.promise.exact, "across_threads": self.promise.across_threads,
                        "note": self.promise.note},
            "settings": [s.to_dict() for s in self.settings],
            "runs": [r.to_dict() for r in self.runs],
            "alternative": self.alternative,
            "numerics": [p.to_dict() for p in self.numerics],
            "build": self.build,
            "seconds": round(self.seconds, 2),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"


def _say(progress: Progress | None, text: str) -> None:
    if progress is not None:
        progress(text)


def _case_said(progress: Progress | None) -> Callable[[ReplayCaseResult], None]:
    """Each case as it ends, never as PASS: a self-test reports a pass only in its table, once every
    case has run (on a CPU where llama.cpp crashed midway, PASS lines printed before the crash read
    as a result the test never reached)."""
    def said(result: ReplayCaseResult) -> None:
        if result.status == "PASS":
            _say(progress, f"checked {result.name}: the same (the verdict comes with the table)")
        else:
            _say(progress, f"{result.status} {result.name}" + (f": {result.detail}" if result.detail else ""))

    return said


def _run(configuration: str, chosen: bool, make: Callable[[], Backend], model: str, cases: Sequence[tuple[str, Case]],
         progress: Progress | None, cancel: threading.Event | None,
         other_threads: tuple[str, Callable[[], Backend]] | None = None) -> CaseSet:
    _say(progress, f"running the replay cases on {configuration}")
    started = time.perf_counter()
    try:
        results = run_cases(make, model, other_threads=other_threads, cases=cases, on_case=_case_said(progress),
                            cancel=cancel)
    except TurnCancelled:
        raise SelfTestCancelled("the self-test was stopped") from None
    return CaseSet(configuration, chosen, results, time.perf_counter() - started)


# --- the embedded engine -----------------------------------------------------------------------------


def embedded_report(model: str, *, asset_dir: str | os.PathLike[str] | None = None, threads: int | None = None,
                    flash_attn: FlashAttention = FLASH_ATTN, kv_type: KVType = KV_TYPE,
                    cases: Sequence[tuple[str, Case]] = CASES, probe: Sequence[tuple[FlashAttention, KVType]] = SETTINGS,
                    progress: Progress | None = None, cancel: threading.Event | None = None) -> SelfTestReport:
    """The self-test of embedded llama.cpp on ``model`` (a path, or a name in the models folder or
    beside ``asset_dir``) at these settings (``threads``: to generate and to read prompts; None: the
    backend's defaults): the settings in ``probe`` and the chosen one are probed, then ``cases`` run.
    Raises BackendError for a model that cannot be found or settings that are refused, before
    anything runs; ``SelfTestCancelled`` once ``cancel`` is set."""
    started = time.perf_counter()
    try:
        context_params(1, kv_type=kv_type, flash_attn=flash_attn)
    except ValueError as exc:
        raise BackendError(str(exc)) from None
    if threads is not None and threads < 1:
        raise BackendError(f"the thread count must be 1 or more, not {threads}")
    path = resolve_model(model, asset_dir)

    def make(generating: int | None = threads, reading: int | None = threads) -> LlamaBackend:
        # Imported here: the editor's window imports this module as it starts, and llama.cpp's
        # bindings take 0.1 s (editor.session.local.preload_llama loads them once it is up).
        from runtime.backends.llama import LlamaBackend

        return LlamaBackend(n_threads=generating, n_threads_batch=reading, flash_attn=flash_attn, kv_type=kv_type)

    first = make()
    try:
        label, promise = first.label, first.reproducibility()
        counts = (first.n_threads, first.n_threads_batch)
    finally:
        first.close()
    # The other run changes both counts: swapped when they differ, else 1 against more.
    other = counts[::-1] if counts[0] != counts[1] else (1, 1) if counts[0] > 1 else (2, 2)
    configuration = f"flash attention {flash_attn}, {kv_type} KV cache, {_threads(*counts)}"

    settings = list(probe)
    if (flash_attn, kv_type) not in settings:
        settings.append((flash_attn, kv_type))
    _say(progress, f"probing the numbers of {len(settings)} settings on {path.name}")
    probes = probe_numerics(path, settings, cancel)
    rows = [SettingRow(p.name, p.verdict, p.reason, chosen=(p.flash_attn, p.kv_type) == (flash_attn, kv_type))
            for p in probes]
    run = _run(configuration, True, make, str(path), cases, progress, cancel,
               other_threads=(_threads(*other), lambda: make(*other)))

    chosen = next(r for r in rows if r.chosen)
    alternative = ""
    if chosen.reproducible != "yes":
        exact = next((p for p in probes if p.verdict == "yes"), None)
        alternative = (f"exact at any thread count: {exact.name} (--flash-attn {exact.flash_attn} "
                       f"--kv-type {exact.kv_type})" if exact is not None else
                       "none of the settings probed gives the same numbers at another thread count")
    return SelfTestReport(label, path.name, promise, rows, [run], alternative, time.perf_counter() - started, probes,
                          build_summary())


def _threads(generating: int, reading: int) -> str:
    if generating == reading:
        return f"{generating} thread{'s' if generating > 1 else ''}"
    return f"{generating} thread{'s' if generating > 1 else ''} generating, {reading} reading prompts"


# --- servers -------------------------------------------------------------------------------------------


def server_report(make_backend: Callable[[], Backend], *, cache_prompt: bool | None = None,
                  cases: Sequence[tuple[str, Case]] = CASES, progress: Progress | None = None,
                  cancel: threading.Event | None = None) -> SelfTestReport:
    """The self-test of a server backend. On llama.cpp's server the cases run with ``cache_prompt`` on
    and off; ``cache_prompt`` says which one is chosen (None: the backend's own). On any other server
    they run once. Raises BackendError when the server cannot be reached."""
    started = time.perf_counter()
    probe = make_backend()
    try:
        probe.load_model("")  # reachable, and what it is
        label = probe.label
        # What the agent names as its model: the served one (a server answers with it whatever the name)
        served = str(getattr(probe, "served_model", "") or "the served model")
        llama = isinstance(probe, LlamaServerBackend)
        own = probe.cache_prompt if isinstance(probe, LlamaServerBackend) else True
        promise = probe.reproducibility()
    finally:
        probe.close()
    if not llama:
        run = _run("the server as it is configured", True, make_backend, served, cases, progress, cancel)
        measured = _measured(run)
        row = SettingRow("the server's own prompt caching", "not known", f"{promise.note}; {measured}", chosen=True)
        alternative = ("none to offer: an OpenAI-compatible server has no request option that makes a replay exact "
                       "(a batch-invariant mode, where a server has one, is a setting of the server itself)")
        return SelfTestReport(label, served, promise, [row], [run], alternative, time.perf_counter() - started)

    wanted = own if cache_prompt is None else cache_prompt
    runs = []
    for on in (True, False):
        def make(on: bool = on) -> Backend:
            backend = make_backend()
            assert isinstance(backend, LlamaServerBackend)
            backend.cache_prompt = on
            return backend

        runs.append(_run(f"cache_prompt {'on' if on else 'off'}", on == wanted, make, served, cases, progress, cancel))
    cached, whole = runs
    rows = [
        SettingRow("cache_prompt on", "no", f"{_short(CACHED_PROMPTS_NOTE)}; {_measured(cached)}", chosen=wanted),
        SettingRow("cache_prompt off", "same threads" if whole.passed else "no",
                   ("every request re-reads its prompt from position 0 in the server's own batches, so a replay "
                    "reads the same way, at the server's thread count; " if whole.passed else
                    "every request re-reads its prompt from position 0, and still ") + _measured(whole),
                   chosen=not wanted),
    ]
    chosen_promise = promise if wanted == own else _promise(make_backend, wanted)
    alternative = ""
    if wanted:
        alternative = ("cache_prompt off (every call reads its whole prompt again: the cases took "
                       f"{whole.seconds:.1f} s against {cached.seconds:.1f} s with it on)" if whole.passed else
                       "none: even without cache_prompt this server did not repeat itself")
    return SelfTestReport(label, served, chosen_promise, rows, runs, alternative, time.perf_counter() - started)


def _promise(make_backend: Callable[[], Backend], cache_prompt: bool) -> Reproducibility:
    backend = make_backend()
    try:
        assert isinstance(backend, LlamaServerBackend)
        backend.cache_prompt = cache_prompt
        return backend.reproducibility()
    finally:
        backend.close()


def _measured(run: CaseSet) -> str:
    ran = [c for c in run.cases if c.passed is not None]
    failed = run.failed
    if not failed:
        return f"measured: all {len(ran)} cases the same"
    return f"measured: {len(failed)} of {len(ran)} cases differed ({failed[0].name}: {failed[0].detail})"


def _short(note: str) -> str:
    return note.split(": a replayed reply")[0]
