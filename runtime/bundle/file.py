"""The repro bundle file format (``parley-bundle``, version 2): one JSON file that holds everything a
conversation's numbers depend on, so ``parley replay`` can repeat it in a cold process or on another
machine and say, byte for byte, whether it did.

It holds the asset (as its file holds it, with the SHA-256 of the text Parley saves it as), every
behaviour file its Subgraph nodes run (nested ones too, by path relative to the asset's folder, each
with its SHA-256), each model file the asset uses (its name in the asset, file name, size and SHA-256), the llama.cpp build
(llama-cpp-python's version and llama.cpp's system info: the CPU features it was compiled for), the
engine settings that decide the numbers (threads, batch size, KV cache type, flash attention, the seed
salt and each node's seed), each model-backed node's context parameters, what the backend promised
(``Reproducibility``) and the whole conversation tree as a dialog file (version 4), whose turn states
carry each node's decode journal: which tokens were read at which positions, in which chunks.

Reading checks every part and how the parts fit (the asset and its behaviours against their hashes,
the seeds against the asset, the conversation against the nodes of the graph the asset runs, its
behaviours expanded from the bundle's own files, never from the disk), and names the field of each
problem. A behaviour's path that is absolute, goes up out of the bundle's folder (``..``), is not a
plain relative path or is listed twice is refused. Version 1 (before behaviours) reads as version 2
holding no behaviour files.

``unpack_bundle`` writes the asset, its behaviours and the conversation into a folder the user chose,
and nowhere else.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import posixpath
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from runtime.asset.behaviours import problems as behaviour_problems
from runtime.asset.file import asset_from_dict, asset_to_dict, dumps_asset, load_asset
from runtime.asset.model import Asset, SamplingParams
from runtime.backends.base import Reproducibility
from runtime.dialogue.dialog_file import (
    HistoryError,
    dumps_history,
    history_from_dict,
    unknown_node_problems,
)
from runtime.dialogue.history import SavedDialog
from runtime.files.located import MISSING_FIELD, UNKNOWN_KEY, Place, Wording, error_message, located_problems
from runtime.files.reading import MAX_INPUT_BYTES, parse_input_json, read_input_text
from runtime.files.writing import atomic_write_text
from runtime.models.context_settings import FLASH_ATTN_MODES, KV_TYPES, ContextParams, context_params
from runtime.models.folder import APP_NAME, ModelFileError, file_sha256, resolve_model
from runtime.models.gguf import GGUFError, read_gguf
from runtime.names import NAMESPACE_SEP, NODE_PATH_PATTERN, lone_surrogates, shown_name
from runtime.nodes.subgraph import Subgraph
from runtime.problems import AssetError, InputError, Problem
from runtime.session.session import graph_of

BUNDLE_FORMAT = "parley-bundle"
BUNDLE_VERSION = 2  # 2: the asset's behaviour files (``asset.behaviours``, ``asset.folder``)
BUNDLE_SUFFIX = ".parley-bundle"
# A bundle is read whole, like a history (which is most of it): no larger than any input file.
MAX_BUNDLE_BYTES = MAX_INPUT_BYTES
MAX_REPORTED_PROBLEMS = 20
# Model hashes remembered on disk (path, size and modification time -> SHA-256), the newest kept.
MAX_CACHED_HASHES = 200
MAX_HASH_CACHE_BYTES = 1 << 20


class BundleError(InputError):
    """A repro bundle that cannot be written or read; every problem names the file and field."""


# --- what a bundle holds ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFile:
    """One model file the asset uses: ``name`` as the asset names it, the file's name, size and hash."""

    name: str
    file: str
    size: int
    sha256: str


@dataclass(frozen=True)
class LlamaBuild:
    """The llama.cpp a conversation ran on: llama-cpp-python's version and llama.cpp's system info
    (the CPU features it was compiled for, which change a token's numbers)."""

    version: str
    system_info: str

    @classmethod
    def here(cls) -> LlamaBuild:
        import llama_cpp

        info = llama_cpp.llama_print_system_info()
        text = info.decode("utf-8", errors="replace") if isinstance(info, bytes) else str(info)
        return cls(str(llama_cpp.__version__), text.strip())


@dataclass(frozen=True)
class EngineSettings:
    """The embedded engine's settings that decide the numbers (``LlamaBackend``'s)."""

    n_threads: int
    n_threads_batch: int
    n_batch: int
    kv_type: str
    flash_attn: str

    @classmethod
    def of(cls, backend: Any) -> EngineSettings:
        """The settings of a ``LlamaBackend`` (read from its attributes; nothing is loaded)."""
        return cls(int(backend.n_threads), int(backend.n_threads_batch), int(backend.n_batch),
                   str(backend.kv_type), str(backend.flash_attn))

    def backend_arguments(self) -> dict[str, Any]:
        """``LlamaBackend``'s keyword arguments for these settings."""
        return asdict(self)

    def context(self, n_ctx: int) -> ContextParams:
        """The parameters a node context of ``n_ctx`` tokens is created with under these settings."""
        return context_params(n_ctx, self.n_batch, kv_type=self.kv_type,  # type: ignore[arg-type]
                              flash_attn=self.flash_attn)  # type: ignore[arg-type]

    @property
    def text(self) -> str:
        return (f"{self.n_threads}/{self.n_threads_batch} threads, batch {self.n_batch}, {self.kv_type} KV cache, "
                f"flash attention {self.flash_attn}")


@dataclass(frozen=True)
class NodeContext:
    """A model-backed node's context: its model (as the asset names it) and llama.cpp's parameters."""

    model: str
    params: ContextParams


@dataclass(frozen=True)
class Bundle:
    asset: Asset
    asset_sha256: str  # of ``dumps_asset(asset)`` as UTF-8: the text Parley saves the asset as
    models: tuple[ModelFile, ...]
    llama: LlamaBuild
    settings: EngineSettings
    seed_salt: int  # added to every fixed seed (re-rolled seeds)
    seeds: Mapping[str, int]  # node id -> its seed in the asset (-1: random)
    contexts: Mapping[str, NodeContext]  # node id -> its context
    reproducibility: Reproducibility  # what the backend promised when the bundle was written
    conversation: SavedDialog
    asset_source: str = ""  # the asset file's name when the bundle was written
    created_by: str = ""
    # Every behaviour file the asset's Subgraph nodes run (nested ones too): its path relative to the
    # asset's folder (``/`` between folders, ``..`` where it lies above) -> the behaviour.
    behaviours: Mapping[str, Asset] = field(default_factory=dict)
    # The asset's folder within the bundle's files: its last folders, as many as its behaviours' paths
    # go up (``..``); '' when none does.
    folder: str = ""
    # The graph the asset runs: its behaviours expanded from ``behaviours`` (None: the asset as it is).
    graph: Asset | None = field(default=None, compare=False)
    source: str = field(default="<bundle>", compare=False)  # the file it was read from

    def model_named(self, name: str) -> ModelFile | None:
        return next((m for m in self.models if m.name == name), None)

    @property
    def runs(self) -> Asset:
        """The graph an agent of the bundle runs: the asset with its behaviours expanded."""
        return self.graph if self.graph is not None else self.asset


def asset_sha256(asset: Asset) -> str:
    """The SHA-256 of the asset's text as Parley saves it (a file Parley saved hashes the same)."""
    return hashlib.sha256(dumps_asset(asset).encode("utf-8")).hexdigest()


def model_uses(asset: Asset) -> dict[str, tuple[str, int, str]]:
    """Node id -> (the model it uses as the asset names it, its context size (0: the model's own),
    the field that names the model), for every node that keeps a context on a model."""
    out: dict[str, tuple[str, int, str]] = {}
    for node in asset.nodes:
        uses = node.model_uses()
        if uses:  # a node's session is its first use (``NodeRun.generate``)
            name, where = asset.model_source(uses[0].model_name, uses[0].field)
            out[node.id] = (name, uses[0].context_size, where)
    return out


def node_seeds(asset: Asset) -> dict[str, int]:
    return {node.id: node.seed for node in asset.nodes if isinstance(node, SamplingParams)}


def created_by() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"Parley Studio {version('parley-studio')}"
    except PackageNotFoundError:
        return "Parley Studio"


def make_bundle(asset: Asset, conversation: SavedDialog, backend: Any = None,
                asset_dir: str | os.PathLike[str] | None = None, asset_source: str = "") -> Bundle:
    """The bundle of ``conversation`` on ``asset`` with the settings of ``backend`` (a ``LlamaBackend``;
    None: one with the default settings, as ``parley chat`` and the editor make it). Hashes each model
    file (once per file: ``model_sha256``). Raises ``BundleError`` naming the node and field of a model
    that cannot be found or read, a behaviour that cannot be read (as validation names it), and a
    history that names nodes the graph lacks. The asset is as its file holds it (a Subgraph node's
    behaviour is read from ``asset_dir``); every behaviour it runs goes into the bundle."""
    where = asset_source or "<asset>"
    if any(NAMESPACE_SEP in node.id for node in asset.nodes):
        raise BundleError([Problem("error", "this is an expanded graph (its ids hold '/'): bundle the asset as its "
                                   "file holds it, with its Subgraph nodes", where)])
    files = behaviour_files(asset, asset_dir, asset_source)
    folder = ""
    if files:
        ups = max(_ups(key) for key in files)
        parts = Path(os.path.abspath(asset_dir or ".")).parts[1:]
        if ups > len(parts):
            raise BundleError([Problem("error", "a behaviour lies above the file system's root", where)])
        folder = "/".join(parts[len(parts) - ups:])
        unfit = _unbundlable(files, ups, Path(asset_source).name if asset_source else "")
        if folder and (why := bundle_path_problem(folder)):
            unfit.append(f"the asset's folder {folder} (its behaviours lie above it): {why}; rename it to bundle it")
        if unfit:
            raise BundleError([Problem("error", message, where) for message in unfit])
    try:
        graph = _expanded(asset, files, Path(os.path.abspath(asset_dir or ".")), where)
    except AssetError as exc:
        raise BundleError(exc.problems) from None
    asset_source = Path(asset_source).name if asset_source else ""
    problems = unknown_node_problems(conversation, set(graph.node_ids()), "<history>")
    if problems:
        raise BundleError(problems)
    owned = backend is None
    if owned:
        from runtime.backends.llama import LlamaBackend

        backend = LlamaBackend(asset_dir)
    try:
        settings = EngineSettings.of(backend)
        promise = backend.reproducibility()
    finally:
        if owned:
            backend.close()
    models: dict[str, ModelFile] = {}
    contexts: dict[str, NodeContext] = {}
    for node_id, (name, context_size, model_field) in model_uses(graph).items():
        try:
            path = resolve_model(name, asset_dir)
            if name not in models:
                models[name] = ModelFile(name, path.name, path.stat().st_size, model_sha256(path))
            n_ctx = context_size or read_gguf(path).context_length
            contexts[node_id] = NodeContext(name, settings.context(n_ctx))
        except (ModelFileError, GGUFError) as exc:
            raise BundleError([Problem("error", _first_line(exc), where, node_id=node_id, field=model_field)]) from None
        except (OSError, ValueError) as exc:
            raise BundleError([Problem("error", f"cannot read the model file {name!r}: "
                                       f"{getattr(exc, 'strerror', None) or exc}", where, node_id=node_id,
                                       field=model_field)]) from None
    return Bundle(asset, asset_sha256(asset), tuple(models.values()), LlamaBuild.here(), settings,
                  conversation.seed_salt, node_seeds(graph), contexts, promise, conversation,
                  asset_source=asset_source, created_by=created_by(), behaviours=files, folder=folder,
                  graph=graph)


# --- behaviour files ----------------------------------------------------------------------------


def _ups(key: str) -> int:
    """How many folders a behaviour's path goes up (its leading ``..``)."""
    parts = key.split("/")
    return next((i for i, part in enumerate(parts) if part != ".."), len(parts))


def _walk(asset: Asset, read: Callable[[str], Asset | None],
          missing: Callable[[str, str, str], None] | None = None) -> dict[str, Asset]:
    """Every behaviour ``asset``'s Subgraph nodes run, nested ones too, by path relative to the asset's
    folder, as ``read`` gives it (None: there is none; ``missing(where, node id, path)`` is told,
    ``where`` being '' for the asset itself, else the path of the behaviour holding the node). Each
    file is read once, so a cycle of files ends (``expand`` names it)."""
    found: dict[str, Asset] = {}
    said: set[str] = set()

    def walk(holder: Asset, where: str) -> None:
        for node in holder.nodes:
            if not isinstance(node, Subgraph) or node.expanded or not node.behaviour.strip():
                continue
            rel = node.behaviour.replace("\\", "/")
            if rel.startswith("/") or PureWindowsPath(rel).drive:
                continue  # an absolute path: validation's problem, never a file of the bundle
            key = posixpath.normpath(posixpath.join(posixpath.dirname(where), rel))
            if key in found or key in said:
                continue
            behaviour = read(key)
            if behaviour is None:
                said.add(key)
                if missing is not None:
                    missing(where, node.id, key)
                continue
            found[key] = behaviour
            walk(behaviour, key)

    walk(asset, "")
    return found


def behaviour_files(asset: Asset, asset_dir: str | os.PathLike[str] | None, source: str = "") -> dict[str, Asset]:
    """Every behaviour file ``asset``'s Subgraph nodes run (nested ones too), read now from
    ``asset_dir``, by path relative to it (``/`` between folders, ``..`` where one lies above it).
    Raises ``BundleError`` with validation's errors at the nodes' ``behaviour`` fields (a missing or
    unreadable file, a cycle, no folder)."""
    if not any(isinstance(node, Subgraph) for node in asset.nodes):
        return {}
    where = source or "<asset>"
    errors = [_at(p, where) for p in behaviour_problems(asset, asset_dir, source)
              if p.severity == "error" and p.field == "behaviour"]
    errors += [Problem("error", "no behaviour: choose the asset file this node runs", where, node.id, "behaviour")
               for node in asset.nodes if isinstance(node, Subgraph) and not node.behaviour.strip()]
    if errors:
        raise BundleError(errors)
    base = Path(asset_dir or ".")

    def read(key: str) -> Asset | None:
        path = base / key
        return load_asset(path) if path.is_file() else None

    try:
        return _walk(asset, read)
    except AssetError as exc:  # changed on disk since it was checked a moment ago
        raise BundleError(exc.problems) from None


def _unbundlable(files: Mapping[str, Asset], ups: int, name: str) -> list[str]:
    """Why these behaviour paths would make a bundle that reading refuses (a name not every system
    can hold, two paths one file where capitals are not told apart): said when it is written."""
    out = []
    seen = {name.casefold(): "the asset's own file"} if name else {}
    for key in files:
        why = bundle_path_problem(key, ups)
        if why:
            out.append(f"the behaviour {key}: {why}; rename it to bundle it")
        elif key.casefold() in seen:
            out.append(f"the behaviour {key} is the same file as {seen[key.casefold()]} where capitals are not "
                       "told apart (Windows, macOS): name it one way everywhere to bundle it")
        seen.setdefault(key.casefold(), repr(key))
    return out


def _at(problem: Problem, where: str) -> Problem:
    return Problem(problem.severity, problem.message, problem.file or where, problem.node_id, problem.field)


def _expanded(asset: Asset, files: Mapping[str, Asset], asset_dir: Path, source: str) -> Asset:
    """The graph ``asset`` runs, its behaviours read from ``files`` only (paths relative to
    ``asset_dir``, which is where their nodes' relative paths are read from). Raises ``AssetError``."""
    given = {os.path.normpath(asset_dir / key): behaviour for key, behaviour in files.items()}
    return graph_of(asset, asset_dir, source, files=given)


def _first_line(exc: Exception) -> str:
    if isinstance(exc, InputError) and exc.problems:
        return exc.problems[0].message
    return str(exc)


# --- model hashes -------------------------------------------------------------------------------

_hashes: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


def hash_cache_file() -> Path:
    """Where model hashes are remembered between processes (so a second export is instant)."""
    return platformdirs.user_cache_path(APP_NAME, appauthor=False) / "model-sha256.json"


def model_sha256(path: str | os.PathLike[str]) -> str:
    """The file's SHA-256, read in blocks; remembered by path, size and modification time, in this
    process and in ``hash_cache_file()``, so the same unchanged file is hashed once."""
    resolved = Path(path).resolve()
    info = os.stat(resolved)
    key = (str(resolved), info.st_size, info.st_mtime_ns)
    with _hash_lock:
        known = _hashes.get(key)
    if known is not None:
        return known
    cache = _read_hash_cache()
    entry = cache.get(key[0])
    if entry is not None and (entry.get("size"), entry.get("mtime_ns")) == key[1:]:
        digest = str(entry["sha256"])
    else:
        digest = file_sha256(resolved)
        cache.pop(key[0], None)
        cache[key[0]] = {"size": key[1], "mtime_ns": key[2], "sha256": digest}
        _write_hash_cache(dict(list(cache.items())[-MAX_CACHED_HASHES:]))
    with _hash_lock:
        _hashes[key] = digest
    return digest


def _read_hash_cache() -> dict[str, dict[str, Any]]:
    """The hashes remembered on disk; a cache that is missing, damaged or odd is simply empty."""
    try:
        raw = json.loads(read_input_text(hash_cache_file(), InputError, MAX_HASH_CACHE_BYTES))
    except (InputError, ValueError, RecursionError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(v, dict) and isinstance(v.get("sha256"), str)
            and len(v["sha256"]) == 64 and isinstance(v.get("size"), int) and isinstance(v.get("mtime_ns"), int)}


def _write_hash_cache(cache: dict[str, dict[str, Any]]) -> None:
    target = hash_cache_file()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, json.dumps(cache, indent=1) + "\n")
    except OSError:
        pass  # a cache that cannot be written costs a hash next time, nothing more


# --- writing ----------------------------------------------------------------------------------


def bundle_to_parts(bundle: Bundle) -> dict[str, Any]:
    """Every part of the file but the conversation, as JSON values, in the order written."""
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "created_by": bundle.created_by,
        "asset": _asset_part(bundle),
        "models": [asdict(m) for m in bundle.models],
        "llama_cpp": asdict(bundle.llama),
        "settings": {**asdict(bundle.settings), "seed_salt": bundle.seed_salt, "seeds": dict(bundle.seeds)},
        "contexts": {node: {"model": c.model, **asdict(c.params)} for node, c in bundle.contexts.items()},
        "reproducibility": asdict(bundle.reproducibility),
    }


def _asset_part(bundle: Bundle) -> dict[str, Any]:
    part: dict[str, Any] = {"source": bundle.asset_source, "sha256": bundle.asset_sha256,
                            "file": asset_to_dict(bundle.asset)}
    if bundle.folder:
        part["folder"] = bundle.folder
    if bundle.behaviours:
        part["behaviours"] = {key: {"sha256": asset_sha256(behaviour), "file": asset_to_dict(behaviour)}
                              for key, behaviour in bundle.behaviours.items()}
    return part


def dumps_bundle(bundle: Bundle) -> str:
    """The file's text: one part per line, then the conversation as its dialog file writes it (a turn
    per line)."""
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    head = ",\n".join(f"{encode(key)}:{encode(value)}" for key, value in bundle_to_parts(bundle).items())
    return "{" + head + ',\n"conversation":' + dumps_history(bundle.conversation).rstrip("\n") + "}\n"


def write_bundle(bundle: Bundle, path: str | os.PathLike[str]) -> int:
    """Write ``bundle`` to ``path`` atomically; returns its size in bytes. Raises ``BundleError``
    (writing nothing) when it would be too large to read back, and OSError when it cannot be written."""
    text = dumps_bundle(bundle)
    data = text.encode("utf-8")
    if len(data) > MAX_BUNDLE_BYTES:
        raise BundleError([Problem(
            "error", f"not written: the bundle would be {len(data) / 2**20:,.1f} MB, and a bundle over "
            f"{MAX_BUNDLE_BYTES / 2**20:,.0f} MB cannot be read back. Rewind, or bundle a shorter conversation",
            str(path))])
    atomic_write_text(path, text)
    return len(data)


def unpack_bundle(bundle: Bundle, folder: str | os.PathLike[str]) -> list[Path]:
    """Write the bundle's asset (under its file's name), its behaviour files (at their paths) and its
    conversation (``<asset>.dialog.json``, a dialog history) into ``folder``, which must exist, so
    the editor or ``parley chat`` opens them as they were. Returns the files written. Nothing is
    written outside ``folder`` (each path is checked after following links) and nothing is
    overwritten: a file there already is left as it is when it holds the same text, else the whole
    unpacking is refused before anything is written. Raises ``BundleError`` naming the path."""
    root = Path(folder)
    if not root.is_dir():
        raise BundleError([Problem("error", "no such folder: give a folder that exists", str(folder))])
    root = root.resolve()
    base = root.joinpath(*bundle.folder.split("/")) if bundle.folder else root
    name = bundle.asset_source or f"{Path(bundle.source).stem or 'asset'}.json"
    texts: dict[str, tuple[str, str]] = {name: (dumps_asset(bundle.asset), "asset.source")}
    for key, behaviour in bundle.behaviours.items():
        texts[key] = (dumps_asset(behaviour), f"asset.behaviours.{shown_name(key)}")
    dialog = f"{Path(name).stem}.dialog.json"
    if dialog.casefold() in {key.casefold() for key in texts}:
        raise BundleError([Problem("error", f"a behaviour is called {dialog}, the name its conversation is "
                                   "unpacked as", bundle.source, field="conversation")])
    texts[dialog] = (dumps_history(bundle.conversation), "conversation")
    depth = len(bundle.folder.split("/")) if bundle.folder else 0
    plan: list[tuple[Path, str]] = []
    problems: list[Problem] = []
    for key, (text, where) in texts.items():
        why = bundle_path_problem(key, depth)
        target = Path(os.path.normpath(base / key))
        if why is None:
            # Links already in the folder are followed: the file must still land inside it.
            real = target.parent.resolve() / target.name
            if not real.is_relative_to(root) or target.is_symlink():
                why = f"would be written outside {root} (through a link)"
            elif target.exists() and (not target.is_file() or target.read_bytes() != text.encode("utf-8")):
                why = f"{target} is there already and holds something else: unpack into an empty folder"
        if why:
            problems.append(Problem("error", f"{key!r}: {why}", bundle.source, field=where))
        else:
            plan.append((target, text))
    if problems:
        raise BundleError(problems)
    written: list[Path] = []
    created: list[Path] = []  # files and folders this unpacking made: taken back if a write fails
    try:
        for target, text in plan:
            if not target.exists():
                missing = [d for d in reversed(target.parents) if d.is_relative_to(root) and not d.exists()]
                for d in missing:
                    d.mkdir()
                    created.append(d)
                atomic_write_text(target, text)
                created.append(target)
            written.append(target)
    except OSError as exc:
        for path in reversed(created):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
        raise BundleError([Problem("error", f"could not write {target}: {exc.strerror or exc}; nothing this "
                                   "unpacking wrote is left", bundle.source)]) from None
    return written


# --- the file's schema --------------------------------------------------------------------------


class _BundlePart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
NodeKey = Annotated[str, Field(pattern=NODE_PATH_PATTERN)]  # a behaviour's nodes: guard/classify
Count = Annotated[int, Field(ge=1, le=1 << 24)]
KVTypeInFile = Literal[KV_TYPES]  # type: ignore[valid-type]
FlashAttnInFile = Literal[FLASH_ATTN_MODES]  # type: ignore[valid-type]


class BehaviourInFile(_BundlePart):
    sha256: Sha256 = Field(description="SHA-256 of the behaviour's text as Parley saves it, in UTF-8.")
    file: dict[str, Any] = Field(description="The behaviour, as its file holds it.")


class AssetInFile(_BundlePart):
    source: str = Field("", description="The asset file's name when the bundle was written.")
    sha256: Sha256 = Field(description="SHA-256 of the asset's text as Parley saves it, in UTF-8.")
    file: dict[str, Any] = Field(description="The asset, as its file holds it.")
    folder: str = Field("", description="The asset's folder within the bundle's files: its last folders, as many "
                        "as its behaviours' paths go up (..).")
    behaviours: dict[str, BehaviourInFile] = Field(default_factory=dict, description=(
        "Every behaviour file the asset's Subgraph nodes run, nested ones too, by path relative to the asset's "
        "folder (/ between folders)."))


class ModelInFile(_BundlePart):
    name: str = Field(min_length=1, description="The model as the asset names it (a file name or a path).")
    file: str = Field(min_length=1, description="The model file's name.")
    size: int = Field(ge=0)
    sha256: Sha256


class LlamaInFile(_BundlePart):
    version: str = Field(description="llama-cpp-python's version.")
    system_info: str = Field(description="llama_print_system_info(): the CPU features llama.cpp was built for.")


class SettingsInFile(_BundlePart):
    n_threads: Count
    n_threads_batch: Count
    n_batch: Count
    kv_type: KVTypeInFile
    flash_attn: FlashAttnInFile
    seed_salt: int = Field(ge=0, lt=2**31, description="Added to every fixed seed.")
    seeds: dict[NodeKey, Annotated[int, Field(ge=-1)]] = Field(description="Each sampling node's seed in the asset.")


class ContextInFile(_BundlePart):
    model: str = Field(min_length=1)
    n_ctx: Count
    n_batch: Count
    n_ubatch: Count
    n_seq_max: Count
    n_outputs_max: Count
    kv_type: KVTypeInFile
    flash_attn: FlashAttnInFile


class ReproducibilityInFile(_BundlePart):
    exact: bool
    across_threads: bool
    note: str


class BundleFile(_BundlePart):
    format: Literal["parley-bundle"]
    version: Literal[2]
    created_by: str = ""
    asset: AssetInFile
    models: list[ModelInFile]
    llama_cpp: LlamaInFile
    settings: SettingsInFile
    contexts: dict[NodeKey, ContextInFile]
    reproducibility: ReproducibilityInFile
    conversation: dict[str, Any] = Field(description="The conversation tree, as a dialog file (version 4).")


# --- reading ----------------------------------------------------------------------------------


class _Repeated(dict):
    """A JSON object that named a key more than once (``repeated``: those keys; the last value kept)."""

    repeated: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    marked = _Repeated(out)
    marked.repeated = tuple(key for key, n in Counter(key for key, _ in pairs).items() if n > 1)
    return marked


def load_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read and check a bundle file. Raises ``BundleError`` naming the file and each field at fault."""
    source = str(path)
    text = read_input_text(path, BundleError, MAX_BUNDLE_BYTES)
    try:
        raw = json.loads(text, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):
        raw = parse_input_json(text, source, BundleError)  # raises, naming the line and column
    return bundle_from_dict(raw, source)


def _migrated(raw: dict[str, Any]) -> dict[str, Any]:
    """A bundle of an older version as the current one: version 1 is version 2 holding no behaviours."""
    if raw.get("version") == 1:
        return {**raw, "version": 2}
    return raw


def bundle_from_dict(raw: Any, source: str = "<bundle>") -> Bundle:
    """Check and convert a parsed bundle. Raises ``BundleError`` naming every problem found."""
    if not isinstance(raw, dict):
        raise BundleError([Problem("error", f"a repro bundle is a JSON object, not {_json_type(raw)}", source)])
    version = raw.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > BUNDLE_VERSION:
        raise BundleError([Problem("error", f"this bundle is version {version}; this Parley Studio reads version "
                                   f"{BUNDLE_VERSION}. Update Parley Studio", source, field="version")])
    written_version = version
    if version == 1 and isinstance(raw.get("asset"), dict) and "behaviours" in raw["asset"]:
        raise BundleError([Problem("error", "a version 1 bundle holds no behaviour files (they came with version 2), "
                                   "but this one has them: it was changed or written wrongly. Write it again with "
                                   "parley bundle", source, field="asset.behaviours")])
    raw = _migrated(raw)
    try:
        record = BundleFile.model_validate(raw)
    except ValidationError as exc:
        raise BundleError(located_problems(exc, source, _place, _message)[:MAX_REPORTED_PROBLEMS]) from None
    except RecursionError:
        raise BundleError([Problem("error", "nested too deeply", source)]) from None

    # Lone surrogates are not text (the conversation's reader refuses them itself); the asset's hash,
    # taken of the text as saved (with U+FFFD for them), would not tell.
    problems = [Problem("error", lone.message("key"), source, field=".".join(
        shown_name(part) for part in ("asset", "file", *lone.path)))
        for lone in itertools.islice(lone_surrogates(raw["asset"]["file"]), MAX_REPORTED_PROBLEMS)]
    asset: Asset | None = None
    try:
        asset = asset_from_dict(raw["asset"]["file"], source)
    except AssetError as exc:
        problems += _within(exc.problems, "asset.file", source)
    behaviours, path_problems = _behaviours_read(raw, record, source)
    problems += path_problems
    graph: Asset | None = None
    if asset is not None and not path_problems:
        graph, found = _graph_of(asset, behaviours, record, source, written_version)
        problems += found
    conversation: SavedDialog | None = None
    try:
        conversation = history_from_dict(raw["conversation"], source)
    except HistoryError as exc:
        problems += _within(exc.problems, "conversation", source)
    if asset is not None:
        problems += _asset_problems(record, asset, graph, source)
    if graph is not None and conversation is not None:
        problems += _within(unknown_node_problems(conversation, set(graph.node_ids()), source), "conversation", source)
        if conversation.seed_salt != record.settings.seed_salt:
            problems.append(Problem("error", f"the seed salt is {record.settings.seed_salt}, but the conversation's is "
                                    f"{conversation.seed_salt}; a bundle holds the one its conversation was "
                                    "written with", source, field="settings.seed_salt"))
    if problems or asset is None or conversation is None:
        raise BundleError(problems[:MAX_REPORTED_PROBLEMS])

    s = record.settings
    return Bundle(
        asset=asset, asset_sha256=record.asset.sha256,
        models=tuple(ModelFile(m.name, m.file, m.size, m.sha256) for m in record.models),
        llama=LlamaBuild(record.llama_cpp.version, record.llama_cpp.system_info),
        settings=EngineSettings(s.n_threads, s.n_threads_batch, s.n_batch, s.kv_type, s.flash_attn),
        seed_salt=s.seed_salt, seeds=dict(s.seeds),
        contexts={node: NodeContext(c.model, ContextParams(c.n_ctx, c.n_batch, c.n_ubatch, c.n_seq_max,
                                                           c.n_outputs_max, c.kv_type, c.flash_attn))
                  for node, c in record.contexts.items()},
        reproducibility=Reproducibility(record.reproducibility.exact, record.reproducibility.across_threads,
                                        record.reproducibility.note),
        conversation=conversation, asset_source=record.asset.source, created_by=record.created_by,
        behaviours=behaviours, folder=record.asset.folder, graph=graph, source=source,
    )


_WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def bundle_path_problem(path: str, ups: int = 0) -> str | None:
    """Why ``path`` cannot be a file of a bundle (None: it can): it must be a plain relative path with
    ``/`` between folders, going up (leading ``..``) at most ``ups`` folders, each name one that every
    system can hold. Hostile paths (absolute, escaping with ``..``) are refused so that unpacking a
    bundle writes only inside the folder chosen for it."""
    if not path:
        return "an empty path"
    if "\\" in path:
        return "holds a backslash: a bundle's paths have / between folders"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "holds a control character"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in path):
        return "holds a lone surrogate, which is no text"
    if path.startswith("/") or PureWindowsPath(path).drive or PureWindowsPath(path).is_absolute():
        return "an absolute path: a bundle's paths are relative to the asset's folder"
    parts = path.split("/")
    rest = parts[_ups(path):]
    if not rest or any(part in ("", ".", "..") for part in rest):
        return "not a plain relative path (an empty, . or .. name after the first folder)"
    if _ups(path) > ups:
        return (f"goes up {_ups(path)} folder{'s' if _ups(path) != 1 else ''} (..), out of the bundle's folder"
                + (f" (the asset's folder within it is {ups} deep)" if ups else ""))
    for part in rest:
        if any(c in '<>:"|?*' for c in part) or part.endswith((" ", ".")) or \
                part.split(".")[0].lower() in _WINDOWS_DEVICES:
            return f"{part!r} cannot be a file's or folder's name on every system"
    return None


def _behaviours_read(raw: dict[str, Any], record: BundleFile, source: str) -> tuple[dict[str, Asset], list[Problem]]:
    """The bundle's behaviour files, read, and every problem of their paths and contents (located at
    ``asset.behaviours.<path>``). Any problem of a path means no behaviour is used."""
    problems: list[Problem] = []
    folder = record.asset.folder
    if folder and (why := bundle_path_problem(folder)):
        problems.append(Problem("error", f"{folder!r}: {why}", source, field="asset.folder"))
    name = record.asset.source
    if name and (name in (".", "..") or "/" in name or "\\" in name or bundle_path_problem(name)):
        problems.append(Problem("error", f"{name!r} is not a file name", source, field="asset.source"))
    part = raw["asset"].get("behaviours", {})
    for key in (part.repeated if isinstance(part, _Repeated) else ()):
        problems.append(Problem("error", "listed twice: a bundle holds one file for each path", source,
                                field=f"asset.behaviours.{shown_name(key)}"))
    depth = len(folder.split("/")) if folder else 0
    seen: dict[str, str] = {name.casefold(): "the asset's own file"} if name else {}
    for key in record.asset.behaviours:
        where = f"asset.behaviours.{shown_name(key)}"
        why = bundle_path_problem(key, depth)
        if why:
            problems.append(Problem("error", f"{key!r}: {why}", source, field=where))
            continue
        folded = key.casefold()
        if folded in seen:
            problems.append(Problem("error", f"{key!r} is the same file as {seen[folded]} on systems that do not "
                                    "tell capitals from small letters", source, field=where))
        seen.setdefault(folded, repr(key))
    behaviours: dict[str, Asset] = {}
    for key, entry in record.asset.behaviours.items():
        where = f"asset.behaviours.{shown_name(key)}"
        lone = next(iter(lone_surrogates(raw["asset"]["behaviours"][key]["file"])), None)
        if lone is not None:
            problems.append(Problem("error", lone.message("key"), source,
                                    field=".".join([where, "file", *(shown_name(p) for p in lone.path)])))
            continue
        try:
            behaviour = asset_from_dict(entry.file, source)
        except AssetError as exc:
            problems += _within(exc.problems, f"{where}.file", source)
            continue
        digest = asset_sha256(behaviour)
        if digest != entry.sha256:
            problems.append(Problem("error", f"the behaviour hashes to {digest}, not to the {entry.sha256} recorded: "
                                    "it was changed after the bundle was written; write the bundle again", source,
                                    field=f"{where}.sha256"))
        behaviours[key] = behaviour
    return behaviours, problems


def _graph_of(asset: Asset, behaviours: dict[str, Asset], record: BundleFile, source: str,
              version: Any) -> tuple[Asset | None, list[Problem]]:
    """The graph ``asset`` runs, expanded from the bundle's behaviour files alone, and the problems:
    a behaviour a node runs that the bundle lacks, one no node runs, one that cannot be expanded."""
    problems: list[Problem] = []

    def missing(where: str, node_id: str, key: str) -> None:
        place = (f"asset.behaviours.{shown_name(where)}.file.{shown_name(node_id)}.behaviour" if where
                 else f"asset.file.{shown_name(node_id)}.behaviour")
        why = (" (a bundle of version 1 holds no behaviour files: write the bundle again with this Parley Studio)"
               if version == 1 else "")
        problems.append(Problem("error", f"runs the behaviour {key}, which the bundle does not hold{why}", source,
                                field=place))

    used = _walk(asset, behaviours.get, missing)
    for key in behaviours.keys() - used.keys():
        problems.append(Problem("error", "no Subgraph node of the asset runs this behaviour", source,
                                field=f"asset.behaviours.{shown_name(key)}"))
    if problems:
        return None, problems
    root = Path(os.path.abspath(os.path.dirname(source) if os.path.isfile(source) else "."))
    try:
        return _expanded(asset, behaviours, root.joinpath(*record.asset.folder.split("/")) if record.asset.folder
                         else root, source), []
    except AssetError as exc:
        return None, _within(exc.problems, "asset.file", source)


def _asset_problems(record: BundleFile, asset: Asset, graph: Asset | None, source: str) -> list[Problem]:
    """How the other parts disagree with the asset: its hash, and the graph it runs (``graph``, its
    behaviours expanded; None when they cannot be, and that is what is said): its models, its seeds,
    its nodes."""
    problems: list[Problem] = []
    digest = asset_sha256(asset)
    if digest != record.asset.sha256:
        problems.append(Problem("error", f"the asset hashes to {digest}, not to the {record.asset.sha256} recorded: it "
                                "was changed after the bundle was written; write the bundle again", source,
                                field="asset.sha256"))
    if graph is None:
        return problems
    names: dict[str, int] = {}
    for i, m in enumerate(record.models):
        if m.name in names:
            problems.append(Problem("error", f"{m.name!r} is listed twice (models.{names[m.name]} names it too)",
                                    source, field=f"models.{i}.name"))
        names.setdefault(m.name, i)
    uses = model_uses(graph)
    for node_id, (name, _size, _field) in uses.items():
        if name not in names:
            problems.append(Problem("error", f"node {shown_name(node_id)} uses the model {name!r}, which no entry "
                                    "names", source, field="models"))
        if node_id not in record.contexts:
            problems.append(Problem("error", f"node {shown_name(node_id)} uses a model, and has no context here",
                                    source, field="contexts"))
        elif record.contexts[node_id].model != name:
            problems.append(Problem("error", f"the context is on {record.contexts[node_id].model!r}, but the node "
                                    f"uses {name!r}", source, field=f"contexts.{shown_name(node_id)}.model"))
    for node_id in record.contexts:
        if node_id not in uses:
            problems.append(Problem("error", "not a node of the asset that uses a model", source,
                                    field=f"contexts.{shown_name(node_id)}"))
    seeds = node_seeds(graph)
    for node_id, seed in record.settings.seeds.items():
        if node_id not in seeds:
            problems.append(Problem("error", "not a node of the asset that samples with a seed", source,
                                    field=f"settings.seeds.{shown_name(node_id)}"))
        elif seeds[node_id] != seed:
            problems.append(Problem("error", f"the seed is {seed}, but the asset's node has seed {seeds[node_id]}",
                                    source, field=f"settings.seeds.{shown_name(node_id)}"))
    for node_id in seeds.keys() - record.settings.seeds.keys():
        problems.append(Problem("error", f"node {shown_name(node_id)}'s seed is missing", source,
                                field="settings.seeds"))
    return problems


def _within(problems: list[Problem], prefix: str, source: str) -> list[Problem]:
    """A part's problems (an asset's, a history's) as places in the bundle: ``prefix`` before their fields."""
    out = []
    for p in problems:
        place = ".".join(part for part in (prefix, p.node_id, p.field) if part)
        out.append(Problem(p.severity, p.message, source, field=place))
    return out


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "true/false", type(None): "null"}.get(type(value), "a number")


def _loc(err: ErrorDetails) -> tuple[list[Any], bool]:
    loc = list(err["loc"])
    bad_key = bool(loc) and loc[-1] == "[key]"
    return (loc[:-1] if bad_key else loc), bad_key


def _place(err: ErrorDetails) -> Place:
    return Place(field=".".join(shown_name(part) for part in _loc(err)[0]))


_WORDING: Wording = {
    "extra_forbidden": UNKNOWN_KEY,
    "missing": MISSING_FIELD,
    "literal_error": lambda err: (f"not a Parley repro bundle (format must be {BUNDLE_FORMAT!r})"
                                  if _loc(err)[0] == ["format"]
                                  else f"a bundle's version is 1 to {BUNDLE_VERSION}" if _loc(err)[0] == ["version"]
                                  else err["msg"]),
    "string_pattern_mismatch": lambda err: ("a SHA-256 is 64 lowercase hex digits" if _loc(err)[0][-1:] == ["sha256"]
                                            else err["msg"]),
}


def _message(err: ErrorDetails) -> str:
    loc, bad_key = _loc(err)
    if bad_key:
        return f"{shown_name(loc[-1]) if loc else 'this key'} is not a node id: a letter or _, then letters, digits, _ or -"
    return error_message(err, _WORDING)
