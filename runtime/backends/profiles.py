"""Backend profiles: the inference servers a designer can run agents on, kept in the user's settings.

A profile names a server and how to talk to it. Profiles live in ``backends.json`` in the user's
settings folder (``PARLEY_BACKENDS`` names another file), shared by the editor and the ``parley``
commands, and never in an asset: an asset runs on whatever backend its user picks. An API key is
never saved: a profile names the environment variable that holds it (``api_key_env``).

``--backend`` and the editor's backend picker take a profile's name, a server's address
(``http://HOST:PORT``; ``llama+http://...`` or ``openai+http://...`` to say which kind, else it is
asked), ``embedded`` (this computer, the default) or ``scripted`` (deterministic test replies).

The file::

    {"version": 1, "backends": [
        {"name": "gpu-box", "kind": "llama-server", "url": "http://10.0.0.5:8080"},
        {"name": "vllm", "kind": "openai", "url": "http://10.0.0.6:8000/v1",
         "model": "Qwen/Qwen2.5-7B-Instruct", "api_key_env": "VLLM_KEY"}
    ]}
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from runtime.backends.base import Backend
from runtime.files.located import Place, located_problems
from runtime.problems import BackendError, InputError, Problem

BACKENDS_ENV = "PARLEY_BACKENDS"
APP_NAME = "parley-studio"
EMBEDDED = "embedded"
SCRIPTED = "scripted"
Kind = Literal["llama-server", "openai"]
KIND_LABELS = {"llama-server": "llama.cpp server", "openai": "OpenAI-compatible"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_FILE_BYTES = 1024 * 1024


class BackendProfile(BaseModel):
    """One server. ``model`` and ``context_size`` matter to OpenAI-compatible servers only
    (a llama.cpp server serves the one model it was started with and says its slots' size)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="How the editor and --backend name it: letters, digits, '.', '_' and '-'.")
    kind: Kind = Field(description="llama-server: llama.cpp's server, a slot per node. openai: any "
                                   "OpenAI-compatible server (vLLM, llama.cpp, llama-cpp-python, ...).")
    url: str = Field(description="The server's address, such as http://10.0.0.5:8080.")
    api_key_env: str = Field("", description="The environment variable holding the API key (the key is never saved).")
    model: str = Field("", description="openai: the served model's name; empty takes the only one served.")
    context_size: int = Field(0, ge=0, le=10_000_000, description="openai: the model's context length when the "
                                                                   "server does not say; 0 asks the server.")
    timeout: float = Field(120.0, gt=0, le=3600, description="Seconds to wait for the server's next byte.")
    structured_output: Literal["auto", "json_schema", "json_object", "none"] = "auto"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value) or value in (EMBEDDED, SCRIPTED):
            raise ValueError(f"{value!r} is not a profile name: use letters, digits, '.', '_' and '-' (up to 64), "
                             f"and not {EMBEDDED!r} or {SCRIPTED!r}")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError(f"{value!r} is not a server address; write it as http://HOST:PORT")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not an environment variable's name")
        return value

    @property
    def description(self) -> str:
        return f"{self.name} · {KIND_LABELS[self.kind]} at {self.url}"

    def api_key(self) -> str:
        """The key from ``api_key_env``; an error naming the variable when it is not set."""
        if not self.api_key_env:
            return ""
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise BackendError(f"backend {self.name!r}: the environment variable {self.api_key_env} that holds its "
                               "API key is not set")
        return key


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    backends: list[dict[str, Any]] = Field(default_factory=list)


def profiles_path() -> Path:
    override = os.environ.get(BACKENDS_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    return platformdirs.user_config_path(APP_NAME, appauthor=False) / "backends.json"


def load_profiles(path: Path | None = None) -> list[BackendProfile]:
    """The saved profiles ([] when there is no file). Raises InputError naming the file and the
    profile and field at fault."""
    path = path or profiles_path()
    where = str(path)
    try:
        if not path.exists():
            return []
        if not path.is_file():
            raise InputError([Problem("error", f"{where}: not a regular file")])
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InputError([Problem("error", f"{where}: larger than {MAX_FILE_BYTES // 1024} KB; not a profiles "
                                      "file")])
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem("error", f"{where}: cannot read it ({exc})")]) from None
    except ValueError as exc:
        raise InputError([Problem("error", f"{where}: not valid JSON ({exc})")]) from None
    try:
        listing = _File.model_validate(raw)
    except ValidationError as exc:
        raise InputError([Problem("error", f"{where}: {_first(exc)}")]) from None
    out: list[BackendProfile] = []
    problems: list[Problem] = []
    for i, entry in enumerate(listing.backends):
        label = f"{where}: backends[{i}]" + (f" ({entry.get('name')!r})" if isinstance(entry, dict) and
                                              entry.get("name") else "")
        if isinstance(entry, dict) and ("api_key" in entry or "key" in entry):
            problems.append(Problem("error", f"{label}: API keys are never saved in profiles; put the key in an "
                                    "environment variable and name it in api_key_env"))
            continue
        try:
            profile = BackendProfile.model_validate(entry)
        except ValidationError as exc:
            problems.append(Problem("error", f"{label}: {_first(exc)}"))
            continue
        if any(p.name == profile.name for p in out):
            problems.append(Problem("error", f"{label}: a second profile named {profile.name!r}"))
            continue
        out.append(profile)
    if problems:
        raise InputError(problems)
    return out


def save_profiles(profiles: list[BackendProfile], path: Path | None = None) -> Path:
    """Write ``profiles`` (whole, replacing the file atomically); return the file."""
    from runtime.files.writing import atomic_write_text

    path = path or profiles_path()
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError("two profiles share a name")
    data = {"version": 1, "backends": [p.model_dump(exclude_defaults=True, mode="json") | {"kind": p.kind}
                                       for p in profiles]}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path


def _first(exc: ValidationError) -> str:
    """The first error, after the field it is in (``url: Value error, ...``: pydantic's own words)."""
    return located_problems(exc, "", _dotted_place, lambda err: err["msg"])[0].message


def _dotted_place(err: ErrorDetails) -> Place:
    return Place(words=".".join(str(x) for x in err["loc"]))


# --- picking a backend ------------------------------------------------------------------------


def find_profile(spec: str, profiles: list[BackendProfile] | None = None) -> BackendProfile | None:
    """The profile ``spec`` names (a saved name, or an address made into a profile); None for
    ``embedded``/``scripted``. Raises BackendError for a name no profile has."""
    spec = spec.strip()
    if spec in ("", EMBEDDED, "llama", SCRIPTED):
        return None
    kind: Kind | None = None
    for prefix, named in (("llama+", "llama-server"), ("openai+", "openai")):
        if spec.startswith(prefix):
            spec, kind = spec[len(prefix):], named  # type: ignore[assignment]
    if re.match(r"https?://", spec):
        try:
            return BackendProfile(name="server", kind=kind or _ask_kind(spec), url=spec)
        except ValidationError as exc:
            raise BackendError(f"--backend {spec!r}: {_first(exc)}") from None
    profiles = load_profiles() if profiles is None else profiles
    for profile in profiles:
        if profile.name == spec:
            return profile
    known = ", ".join(p.name for p in profiles) or f"none yet ({profiles_path()})"
    raise BackendError(f"no backend named {spec!r}: write {EMBEDDED}, a server's address (http://HOST:PORT), or a "
                       f"profile's name (saved profiles: {known})")


def _ask_kind(url: str) -> Kind:
    """A llama.cpp server answers ``/props`` with its slots; anything else is taken as OpenAI-compatible."""
    from runtime.backends.http import ServerConnection

    try:
        props = ServerConnection(url, timeout=10).get_json("/props")
    except BackendError as exc:
        if "refused" in str(exc) or "not known" in str(exc) or "no answer" in str(exc):
            raise
        return "openai"
    return "llama-server" if isinstance(props, dict) and "total_slots" in props else "openai"


def make_backend(profile: BackendProfile) -> Backend:
    """A backend for ``profile`` (nothing is contacted until the first call)."""
    if profile.kind == "llama-server":
        from runtime.backends.llama_server import LlamaServerBackend

        return LlamaServerBackend(profile.url, profile.name, api_key=profile.api_key(), timeout=profile.timeout)
    from runtime.backends.openai_server import OpenAIBackend

    return OpenAIBackend(profile.url, profile.name, api_key=profile.api_key(), timeout=profile.timeout,
                         model=profile.model, context_size=profile.context_size,
                         structured_output=profile.structured_output)


def backend_factory(spec: str, asset_dir: str | os.PathLike[str] | None = None,
                    profiles: list[BackendProfile] | None = None) -> Callable[[], Backend]:
    """A maker of backends for ``spec`` (checked now: a bad name fails before anything runs)."""
    spec = spec.strip()
    if spec == SCRIPTED:
        def scripted() -> Backend:
            from runtime.backends.scripted import ScriptedBackend

            return ScriptedBackend()

        return scripted
    profile = find_profile(spec, profiles)
    if profile is None:
        def embedded() -> Backend:
            from runtime.backends.llama import LlamaBackend

            return LlamaBackend(asset_dir)

        return embedded
    profile.api_key()  # a missing key variable is said now, not at the first turn
    return lambda: make_backend(profile)
