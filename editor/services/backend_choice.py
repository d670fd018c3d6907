"""Which backend the window's agent runs on: the embedded runtime, the scripted one, or a saved server profile.

``BackendChoice`` lives on the UI thread, one per window, and is passed to whatever needs it (the
test conversation, the test runs, the Conversation and VRAM docks, the Backend menu). The choice
is remembered in the editor's settings (never in the asset, which stays portable); the profiles
themselves live in ``backends.json`` (``runtime.backends.profiles``), shared with ``parley``.

The scripted backend (``runtime.backends.scripted``, ``parley test --backend scripted``) needs no model and
no profile: each node answers at once with a canned line, the same every time, so a designer checks the
wiring (paths, exits, tests) in seconds, never what a model would say.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from editor.settings import app_settings
from runtime.backends.base import Backend
from runtime.backends.profiles import (
    EMBEDDED,
    KIND_LABELS,
    SCRIPTED,
    BackendProfile,
    backend_factory,
    load_profiles,
)
from runtime.backends.scripted import ScriptedBackend
from runtime.problems import BackendError, InputError

SETTINGS_KEY = "backend/choice"
EMBEDDED_TITLE = "Embedded (this computer)"
EMBEDDED_LABEL: str = Backend.label  # "embedded (llama.cpp on this computer)"
SCRIPTED_TITLE = "Scripted (instant, no model: checks wiring)"
SCRIPTED_LABEL: str = ScriptedBackend.label  # what a turn or a test case that ran on it names
SCRIPTED_DESCRIPTION = ("canned replies, instant, no model: each node answers with a made-up line (one of the "
                        "choices it was given, JSON its schema allows, else \u201cnode heard: \u2026\u201d), the same "
                        "every time. It checks the wiring (paths, exits, tests), not what a model would say.")
# The choices that need no profile, as pickers list them: (title, spec, what it is)
BUILT_IN: tuple[tuple[str, str, str], ...] = (
    (EMBEDDED_TITLE, EMBEDDED, "Run the agent on this computer (llama.cpp)"),
    (SCRIPTED_TITLE, SCRIPTED, "Scripted: " + SCRIPTED_DESCRIPTION),
)

BackendMaker = Callable[[], Backend]


class BackendChoice(QObject):
    """The chosen backend (``spec``: ``embedded``, ``scripted`` or a profile's name) and the saved profiles."""

    changed = Signal()  # the choice changed, or the chosen profile was edited: the next turn uses it
    profiles_changed = Signal()  # the saved profiles were (re)read

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.profiles: list[BackendProfile] = []
        self.load_error = ""  # why backends.json could not be read ("" when it could)
        self.spec = EMBEDDED
        self.note = ""  # why the remembered choice was not taken at start ("" when it was)
        self._read_profiles()
        remembered = str(app_settings().value(SETTINGS_KEY, EMBEDDED) or EMBEDDED)
        if remembered != EMBEDDED:
            problem = self._check(remembered)
            if problem:
                self.note = (f"The backend chosen last time, {remembered!r}, cannot be used ({problem}); "
                             f"the agent runs on this computer until you choose another.")
            else:
                self.spec = remembered

    # --- the profiles ---------------------------------------------------------------------------

    def _read_profiles(self) -> None:
        try:
            self.profiles = load_profiles()
            self.load_error = ""
        except InputError as exc:
            self.profiles = []
            self.load_error = problems_text(exc)

    def reload(self) -> None:
        """Read ``backends.json`` again (after the Backends dialog saved it). A chosen profile that is
        gone falls back to embedded; one that was edited is made again for the next turn."""
        before = self.profile
        self._read_profiles()
        self.profiles_changed.emit()
        if not self.remote:
            return
        after = next((p for p in self.profiles if p.name == self.spec), None)
        if after is None or self._check(self.spec):
            self.note = f"The backend {self.spec!r} is no longer usable; the agent runs on this computer."
            self.spec = EMBEDDED
            self._remember()
            self.changed.emit()
        elif after != before:
            self.changed.emit()

    def _check(self, spec: str) -> str:
        """Why ``spec`` cannot be used now ("" when it can): no such profile, its key variable unset."""
        if spec in (EMBEDDED, SCRIPTED):
            return ""
        if not any(p.name == spec for p in self.profiles):
            return self.load_error or f"no saved profile is named {spec!r}"
        try:
            backend_factory(spec, profiles=self.profiles)
        except BackendError as exc:
            return str(exc)
        return ""

    # --- choosing -------------------------------------------------------------------------------

    def choose(self, spec: str) -> str:
        """Run the agent on ``spec`` from the next turn on, and remember it. Returns why it cannot be
        chosen ("" when it was)."""
        spec = spec.strip() or EMBEDDED
        problem = self._check(spec)
        if problem:
            return problem
        self.note = ""
        if spec != self.spec:
            self.spec = spec
            self._remember()
            self.changed.emit()
        return ""

    def _remember(self) -> None:
        store = app_settings()
        store.setValue(SETTINGS_KEY, self.spec)
        store.sync()

    # --- what it is -----------------------------------------------------------------------------

    @property
    def profile(self) -> BackendProfile | None:
        return next((p for p in self.profiles if p.name == self.spec), None) if self.remote else None

    @property
    def remote(self) -> bool:
        """Whether the agent runs on a server (a saved profile)."""
        return self.spec not in (EMBEDDED, SCRIPTED)

    @property
    def scripted(self) -> bool:
        """Whether the agent gets canned replies (no model at all)."""
        return self.spec == SCRIPTED

    @property
    def title(self) -> str:
        """How the picker names the choice."""
        return spec_title(self.spec)

    @property
    def description(self) -> str:
        """What the choice is, before any turn has run on it (a turn's label also names the model)."""
        if self.scripted:
            return f"{SCRIPTED_LABEL}: {SCRIPTED_DESCRIPTION}"
        profile = self.profile
        if profile is None:
            return EMBEDDED_LABEL
        return f"{profile.name} ({profile.shown_url}) \u00b7 {KIND_LABELS[profile.kind]}"

    def ran_on_choice(self, label: str) -> bool:
        """Whether a turn's (or a test case's) backend label is the chosen backend's."""
        if not label:
            return False
        if self.spec in (EMBEDDED, SCRIPTED):
            return label == (SCRIPTED_LABEL if self.scripted else EMBEDDED_LABEL)
        profile = self.profile
        return profile is not None and label.startswith((f"{profile.name} (", f"{profile.name} \u00b7"))

    def maker(self) -> BackendMaker | None:
        """What the test conversation makes its backend with: None for the embedded runtime (the
        worker's own default)."""
        if self.spec == EMBEDDED:
            return None
        return backend_factory(self.spec, profiles=self.profiles)

    def factory(self, asset_dir: str = "") -> BackendMaker:
        """A maker of backends for a test run (one per job). A choice that cannot be made any more
        (its key variable is gone) gives a maker that fails each case with the reason."""
        try:
            return backend_factory(self.spec, asset_dir or None, profiles=self.profiles)
        except BackendError as exc:
            error = BackendError(str(exc))

            def failing() -> Backend:
                raise error

            return failing


def problems_text(exc: InputError) -> str:
    """An InputError's problems one a line, each naming the file and the entry at fault."""
    return "\n".join(p.message if not p.where.strip(":") else str(p) for p in exc.problems)


def spec_title(spec: str) -> str:
    return next((title for title, built_in, _tip in BUILT_IN if built_in == spec), spec)


def is_scripted_label(label: str) -> bool:
    """Whether a backend's label (a turn's, a test case's) is the scripted backend's: canned replies."""
    return label == SCRIPTED_LABEL
