"""Backend profiles: the inference servers a designer can run agents on, kept in the user's settings.

A profile names a server and how to talk to it. Profiles live in ``backends.json`` in the user's
settings folder (``PARLEY_BACKENDS`` names another file), shared by the editor and the ``parley``
commands, and never in an asset: an asset runs on whatever backend its user picks. An API key is
never saved: a profile names the environment variable that holds it (``api_key_env``).

``--backend`` and the editor's backend picker take a profile's name, a server's address
(``http://HOST:PORT``; ``llama+http://...`` or ``openai+http://...`` to say which kind, else it is
asked), ``embedded`` or ``llama`` (this computer, the default) or ``scripted`` (deterministic test
replies). Those words are read before any profile, so no profile may be named one of them
(``RESERVED_NAMES``). A URL's ``user:password@`` is never shown (``http.display_url``).

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
from urllib.parse import urlsplit

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from runtime.backends.base import Backend
from runtime.backends.http import display_url
from runtime.files.located import Place, located_problems
from runtime.files.reading import parse_input_json, read_input_text
from runtime.problems import BackendError, InputError, Problem

BACKENDS_ENV = "PARLEY_BACKENDS"
APP_NAME = "parley-studio"
EMBEDDED = "embedded"
EMBEDDED_ALIAS = "llama"  # --backend llama is the embedded llama.cpp too
SCRIPTED = "scripted"
# Words --backend reads before it looks for a profile: a profile named one would never be used.
RESERVED_NAMES = (EMBEDDED, EMBEDDED_ALIAS, SCRIPTED)
Kind = Literal["llama-server", "openai"]
KIND_LABELS = {"llama-server": "llama.cpp server", "openai": "OpenAI-compatible"}
MAX_NAME_CHARS = 64  # a profile's name: a word for a menu and a command line
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME_CHARS - 1}}}")
MAX_URL_CHARS = 2048  # a server's address (browsers and servers refuse longer ones)
MAX_MODEL_CHARS = 512  # a served model's name (Hugging Face ids are far shorter)
MAX_ENV_NAME_CHARS = 256  # the name of the variable holding the key
MAX_CONTEXT_SIZE = 10_000_000  # tokens: far above any model's context
MAX_TIMEOUT_S = 3600.0  # the longest wait for a server's next byte that a profile may set
MAX_FILE_BYTES = 1024 * 1024  # backends.json: thousands of profiles; anything bigger is not one
MAX_SHOWN_NAME_CHARS = 64  # of a bad entry's "name", quoted in its problem


def url_problem(url: str) -> str:
    """Why ``url`` is not a server's address ("" when it is): an http or https URL with a host and,
    if it names one, a port from 1 to 65535. The problem never quotes the URL's credentials."""
    shown = display_url(url)
    if len(url) > MAX_URL_CHARS:
        return f"a server address is at most {MAX_URL_CHARS} characters; this one has {len(url)}"
    example = "write it as http://HOST:PORT"
    if any(c.isspace() for c in url):
        return f"{shown!r} is not a server address: it has a space in it; {example}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"{shown!r} is not a server address ({str(exc).replace(url, shown)}); {example}"
    if parts.scheme not in ("http", "https"):
        return f"{shown!r} is not a server address: it must start with http:// or https://; {example}"
    if not parts.hostname:
        return f"{shown!r} is not a server address: it names no host; {example}"
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        return f"{shown!r} is not a server address: the port must be a number from 1 to 65535; {example}"
    return ""


class BackendProfile(BaseModel):
    """One server. ``model`` and ``context_size`` matter to OpenAI-compatible servers only
    (a llama.cpp server serves the one model it was started with and says its slots' size)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="How the editor and --backend name it: letters, digits, '.', '_' and '-' "
                                  f"(not {', '.join(RESERVED_NAMES)}).")
    kind: Kind = Field(description="llama-server: llama.cpp's server, a slot per node. openai: any "
                                   "OpenAI-compatible server (vLLM, llama.cpp, llama-cpp-python, ...).")
    url: str = Field(description="The server's address, such as http://10.0.0.5:8080.")
    api_key_env: str = Field("", max_length=MAX_ENV_NAME_CHARS,
                             description="The environment variable holding the API key (the key is never saved).")
    model: str = Field("", max_length=MAX_MODEL_CHARS,
                       description="openai: the served model's name; empty takes the only one served.")
    context_size: int = Field(0, ge=0, le=MAX_CONTEXT_SIZE, description="openai: the model's context length when "
                                                                        "the server does not say; 0 asks the server.")
    timeout: float = Field(120.0, gt=0, le=MAX_TIMEOUT_S, description="Seconds to wait for the server's next byte.")
    structured_output: Literal["auto", "json_schema", "json_object", "none"] = "auto"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value.lower() in RESERVED_NAMES:
            raise ValueError(f"{value!r} is reserved, so it is not a profile name: --backend and the backend picker "
                             f"read {EMBEDDED} and {EMBEDDED_ALIAS} as this computer and {SCRIPTED} as the test "
                             "replies, before any profile; give the profile another name")
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value[:MAX_SHOWN_NAME_CHARS]!r} is not a profile name: use letters, digits, '.', '_' "
                             f"and '-' (up to {MAX_NAME_CHARS}), starting with a letter or digit")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        value = value.strip()
        problem = url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, value: str) -> str:
        if value and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not an environment variable's name")
        return value

    @property
    def shown_url(self) -> str:
        """The address as menus, lists and errors show it: without a ``user:password@``."""
        return display_url(self.url)

    @property
    def description(self) -> str:
        return f"{self.name} · {KIND_LABELS[self.kind]} at {self.shown_url}"

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
    backends: list[Any] = Field(default_factory=list)  # each entry is checked on its own


def profiles_path() -> Path:
    override = os.environ.get(BACKENDS_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    return platformdirs.user_config_path(APP_NAME, appauthor=False) / "backends.json"


def load_profiles(path: Path | None = None) -> list[BackendProfile]:
    """The saved profiles ([] when there is no file). Raises InputError whose problems name the
    file, and the entry (``backends[2] ('gpu')``) and field at fault."""
    path = path or profiles_path()
    where = str(path)
    if not os.path.lexists(path):
        return []
    try:
        raw = parse_input_json(read_input_text(path, InputError, MAX_FILE_BYTES), where, InputError)
        return _profiles_from(raw, where)
    except RecursionError:  # a file nested too deeply for one of the steps that walk it
        raise InputError([Problem("error", "not a profiles file: nested too deeply", where)]) from None


def _profiles_from(raw: Any, where: str) -> list[BackendProfile]:
    try:
        listing = _File.model_validate(raw)
    except ValidationError as exc:
        raise InputError(located_problems(exc, where, _file_place)) from None
    out: list[BackendProfile] = []
    problems: list[Problem] = []
    for i, entry in enumerate(listing.backends):
        if not isinstance(entry, dict):
            problems.append(Problem("error", f"a profile is an object ({{\"name\": ..., \"kind\": ..., \"url\": ...}}), "
                                    f"not {_json_kind(entry)}", where, f"backends[{i}]"))
            continue
        name = entry.get("name")
        label = f"backends[{i}]" + (f" ({name[:MAX_SHOWN_NAME_CHARS]!r})" if isinstance(name, str) and name else "")
        secret = next((key for key in ("api_key", "key") if key in entry), "")
        if secret:
            problems.append(Problem("error", "API keys are never saved in profiles; put the key in an environment "
                                    "variable and name it in api_key_env", where, label, secret))
            continue
        try:
            profile = BackendProfile.model_validate(entry)
        except ValidationError as exc:
            problems += located_problems(exc, where, lambda err, label=label: _entry_place(err, label))
            continue
        if any(p.name == profile.name for p in out):
            problems.append(Problem("error", f"a second profile named {profile.name!r}; each needs a name of its own",
                                    where, label, "name"))
            continue
        out.append(profile)
    if problems:
        raise InputError(problems)
    return out


def save_profiles(profiles: list[BackendProfile], path: Path | None = None) -> Path:
    """Write ``profiles`` (whole, replacing the file atomically); return the file. Each is checked
    again first (a value made without validation is refused), so what is saved loads."""
    from runtime.files.writing import atomic_write_text

    path = path or profiles_path()
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError("two profiles share a name")
    entries = [BackendProfile.model_validate(p.model_dump()).model_dump(exclude_defaults=True, mode="json")
               | {"kind": p.kind} for p in profiles]
    data = {"version": 1, "backends": entries}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path


def _first(exc: ValidationError) -> str:
    """The first error, after the field it is in (``url: ...``)."""
    return located_problems(exc, "", _dotted_place)[0].message


def _dotted_place(err: ErrorDetails) -> Place:
    return Place(words=".".join(str(x) for x in err["loc"]))


def _file_place(err: ErrorDetails) -> Place:
    return Place(field=".".join(str(x) for x in err["loc"]))


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "true or false" if isinstance(value, bool) else "a number"


def _entry_place(err: ErrorDetails, label: str) -> Place:
    return Place(node_id=label, field=".".join(str(x) for x in err["loc"]))


# --- picking a backend ------------------------------------------------------------------------


def find_profile(spec: str, profiles: list[BackendProfile] | None = None) -> BackendProfile | None:
    """The profile ``spec`` names (a saved name, or an address made into a profile); None for
    ``embedded``/``scripted``. Raises BackendError for a name no profile has."""
    spec = spec.strip()
    if spec == "" or spec in RESERVED_NAMES:
        return None
    kind: Kind | None = None
    for prefix, named in (("llama+", "llama-server"), ("openai+", "openai")):
        if spec.startswith(prefix):
            spec, kind = spec[len(prefix):], named  # type: ignore[assignment]
    if re.match(r"https?://", spec):
        problem = url_problem(spec)
        if problem:  # said before the server is asked its kind
            raise BackendError(f"--backend: {problem}")
        try:
            return BackendProfile(name="server", kind=kind or _ask_kind(spec), url=spec)
        except ValidationError as exc:
            raise BackendError(f"--backend {display_url(spec)!r}: {_first(exc)}") from None
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
