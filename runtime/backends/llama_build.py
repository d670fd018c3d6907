"""The installed llama.cpp build on this host: where it may put a model's weights, and a self-check,
in a child process, that it survives a decode of several tokens.

llama-cpp-python compiles llama.cpp for the CPU it is installed on. On a CPU that lists AMX, such a
build puts the weights of most quantized models in llama.cpp's AMX buffer, and on some hosts every
decode of more than one token then dies with SIGSEGV in ``ggml_backend_amx_mul_mat`` (llama.cpp
issue #20824, pull request #26954): the editor, a chat or a game's server vanish without a word.
Two defences, both here:

- **The guard.** Where this build registers an AMX buffer type on this host, models load with
  ``use_extra_bufts = False`` (llama.cpp's ``--no-repack``: no weights in the AMX or repacked
  buffers). Everywhere else the faster repacked buffers stay on. ``PARLEY_LLAMA_EXTRA_BUFFERS``
  (``on``/``off``) overrides it.
- **The self-check.** Before the first model load of a build on a host, a child process loads the
  model and decodes several tokens. A crash there costs nothing and becomes a message that names
  the cause and the fix. A check that crashes with the extra buffers on and survives with them off
  keeps them off on this host. The outcome is kept per build and host in a small JSON file
  (``PARLEY_LLAMA_CHECKS`` moves it), so later starts read one file.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import multiprocessing
import os
import platform
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import platformdirs
from llama_cpp import _internals as internals

from runtime.files.writing import atomic_write_text
from runtime.problems import BackendError

log = logging.getLogger(__name__)

EXTRA_BUFFERS_ENV = "PARLEY_LLAMA_EXTRA_BUFFERS"
CHECKS_ENV = "PARLEY_LLAMA_CHECKS"
AMX_BUFFER = "AMX"
PROBE_TOKENS = 16  # one decode of this many tokens: the multi-token path that the AMX bug crashes
PORTABLE_INSTALL = ('CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall '
                    f"llama-cpp-python=={llama_cpp.__version__}")
_PROBE_TEXT = b"The innkeeper wipes the counter and asks the traveller what brings them to the village today."
_CACHE_VERSION = 1


# --- what this build and this host are ------------------------------------------------------------


def extra_buffer_types() -> list[str]:
    """The names of the weight buffer types llama.cpp's CPU backend offers beyond plain memory on this
    host ("AMX" where the build has AMX code and the kernel grants the tile state, "CPU_REPACK", ...)."""
    from llama_cpp import _ggml

    lib = _ggml.libggml
    lib.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
    lib.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_buft_name.restype = ctypes.c_char_p
    lib.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
    device = lib.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    if not device:
        return []
    address = lib.ggml_backend_reg_get_proc_address(lib.ggml_backend_dev_backend_reg(device),
                                                    b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return []
    listed = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(device)
    names = []
    while listed and listed[len(names)]:
        names.append(lib.ggml_backend_buft_name(listed[len(names)]).decode("utf-8", "replace"))
    return names


def use_extra_buffers(buffer_types: list[str] | None = None, flags: set[str] | None = None,
                      features: list[str] | None = None) -> bool:
    """The guard: False where llama.cpp would put weights in its AMX buffer on this host (the build
    offers one), or could (the CPU lists AMX and the build has AMX code)."""
    wanted = os.environ.get(EXTRA_BUFFERS_ENV, "").strip().lower()
    if wanted in ("on", "off"):
        return wanted == "on"
    if AMX_BUFFER in (extra_buffer_types() if buffer_types is None else buffer_types):
        return False
    amx_cpu = "amx_tile" in (cpu_flags() if flags is None else flags)
    return not (amx_cpu and any(f.startswith("AMX") for f in (compiled_features() if features is None else features)))


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return set()
    found = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return set(found.group(1).split()) if found else set()


def _cpu_name() -> str:
    try:
        found = re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(errors="replace"), re.MULTILINE)
    except OSError:
        found = None
    return found.group(1).strip() if found else platform.processor()


def compiled_features(system_info: str | None = None) -> list[str]:
    """The CPU features compiled into llama.cpp, from ``llama_print_system_info()`` ("AVX2", "AMX_INT8", ...)."""
    if system_info is None:
        system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return [name for name, value in re.findall(r"([A-Z0-9_]+)\s*=\s*(\d+)", system_info) if value != "0"]


def build_key() -> str:
    """This llama.cpp build: its version and its libraries' names, sizes and times (a reinstall changes them)."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    parts = [llama_cpp.__version__]
    try:
        for lib in sorted(folder.iterdir()):
            if lib.is_file() and not lib.is_symlink():
                stat = lib.stat()
                parts.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    except OSError:
        pass
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def host_key() -> str:
    """This host as far as llama.cpp's kernels care: the machine, the CPU and its flags."""
    parts = [platform.machine(), _cpu_name(), " ".join(sorted(cpu_flags()))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# --- the self-check --------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """What the self-check found for a build on a host."""

    ok: bool
    extra_buffers: bool  # the setting models load with (when ok)
    message: str  # why not (when not ok), or a warning about the setting
    model: str  # the file it decoded
    checked_at: float


@dataclass
class _ChildRun:
    """One child process's run: the last stage it reached, and how it ended."""

    stage: str  # "started", "loaded", "decoded", or "failed" (an error, not a crash: its text is in detail)
    detail: str
    exitcode: int | None  # negative: killed by that signal; None: it hung and was killed

    @property
    def signal_name(self) -> str:
        if self.exitcode is None or self.exitcode >= 0:
            return ""
        try:
            number = signal.Signals(-self.exitcode)
        except ValueError:
            return f"signal {-self.exitcode}"
        return f"{number.name}, {signal.strsignal(number) or number.name}"


def probe(model_path: str, extra_buffers: bool, n_threads: int, report: Any) -> None:
    """In the child: load the model and decode ``PROBE_TOKENS`` tokens at once, then one more, saying
    each stage reached through ``report`` (a multiprocessing connection); an error is sent, not raised."""
    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
    try:
        model = internals.LlamaModel(path_model=model_path, params=model_params(extra_buffers), verbose=True)
        report.send(("loaded", ""))
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = context_params.n_batch = context_params.n_ubatch = 64
        context_params.n_threads = context_params.n_threads_batch = n_threads
        context = internals.LlamaContext(model=model, params=context_params, verbose=True)
        tokens = model.tokenize(_PROBE_TEXT, add_bos=True, special=False)[:PROBE_TOKENS]
        batch = internals.LlamaBatch(n_tokens=64, embd=0, n_seq_max=1, verbose=True)
        batch.set_batch(tokens, n_past=0, logits_all=False)
        context.decode(batch)
        batch.set_batch(tokens[-1:], n_past=len(tokens), logits_all=True)  # and one token, as generation reads
        context.decode(batch)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the parent's own load will say it
        report.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    report.send(("decoded", ""))


@llama_cpp.llama_log_callback
def _quiet(_level: int, _text: bytes, _user_data: ctypes.c_void_p) -> None:
    pass


Probe = Callable[[str, bool, int, Any], None]


def _run_in_child(target: Probe, model: Path, extra_buffers: bool, n_threads: int, seconds: float) -> _ChildRun:
    """Run ``target`` in a new process (spawned: nothing of this one's threads or llama.cpp state goes
    with it) and wait for it to finish, die, or run out of time."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=target, args=(str(model), extra_buffers, n_threads, send),
                            name="llama-self-check", daemon=True)
    child.start()
    send.close()  # the child holds the only sending end now: its death ends the pipe
    stage, detail = "started", ""
    deadline = time.monotonic() + seconds
    try:
        while stage not in ("decoded", "failed"):
            if not receive.poll(max(deadline - time.monotonic(), 0)):
                child.kill()
                child.join()
                return _ChildRun(stage, detail, None)
            try:
                stage, detail = receive.recv()
            except EOFError:
                break
    finally:
        receive.close()
    child.join(max(deadline - time.monotonic(), 5))
    if child.exitcode is None:
        child.kill()
        child.join()
    return _ChildRun(stage, detail, child.exitcode)


def check_seconds(model: Path) -> float:
    """How long a check may take: loading the model and reading a few tokens, generously."""
    try:
        size = model.stat().st_size
    except OSError:
        size = 0
    return 120 + 60 * size / 1e9


def checks_file() -> Path:
    named = os.environ.get(CHECKS_ENV, "").strip()
    return Path(named) if named else platformdirs.user_cache_path("parley-studio", appauthor=False) / "llama-checks.json"


def _read_checks(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION or not isinstance(data.get("checks"), dict):
        return {}
    return data["checks"]


def _cached(key: str) -> CheckResult | None:
    entry = _read_checks(checks_file()).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return CheckResult(**entry)
    except TypeError:
        return None


def _remember(key: str, result: CheckResult) -> None:
    file = checks_file()
    checks = _read_checks(file)
    checks[key] = asdict(result)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(file, json.dumps({"version": _CACHE_VERSION, "checks": checks}, indent=1))
    except OSError as exc:  # not kept: the next process checks again, which costs a second
        log.warning("the llama.cpp self-check's result could not be kept in %s: %s", file, exc.strerror or exc)


def _crash_message(run: _ChildRun, model: Path, tried: list[bool]) -> str:
    features = compiled_features()
    amx_code = any(f.startswith("AMX") for f in features)
    settings = " and again with them off" if len(tried) > 1 else ""
    cause = (f"It was compiled for this machine's CPU ({', '.join(features)}), and its AMX code crashes on this "
             "host (llama.cpp issue #20824)." if amx_code or AMX_BUFFER in extra_buffer_types() else
             f"It was compiled with {', '.join(features) or 'no CPU features listed'}.")
    return (f"llama.cpp {_ending(run)} decoding {PROBE_TOKENS} tokens of {model.name} in a self-check run in a child "
            f"process with its extra weight buffers {'on' if tried[0] else 'off'}{settings}, so nothing was lost. "
            f"This build of llama-cpp-python {llama_cpp.__version__} cannot run models on this machine. {cause} "
            f"Reinstall a portable build:\n    {PORTABLE_INSTALL}\n"
            f"(The result is kept for this build and host in {checks_file()}; a new build is checked again.)")


_decided: dict[str, CheckResult] = {}
_deciding = threading.Lock()


def checked_extra_buffers(model: Path, n_threads: int, target: Probe = probe) -> bool:
    """Whether to load ``model`` with llama.cpp's extra weight buffers, once the self-check has shown
    that this build decodes on this host (run on the first call for a build and host, in a child
    process; later calls and later processes read its kept result). Raises BackendError naming the
    cause and the fix when it does not decode, or when the check crashes loading this very file."""
    key = f"{build_key()}/{host_key()}/{use_extra_buffers()}"
    with _deciding:
        result = _decided.get(key)
        if result is None:
            result = _cached(key)
            if result is None:
                result = _self_check(model, n_threads, target)
                if result is None:
                    return use_extra_buffers()  # an error, not a crash: the load itself says it
                _remember(key, result)
            if not result.ok:
                log.error("%s", result.message)  # once a process: a server's log says it beside its clients
            _decided[key] = result
    if not result.ok:
        raise BackendError(result.message)
    return result.extra_buffers


def _self_check(model: Path, n_threads: int, target: Probe) -> CheckResult | None:
    """The check's finding to keep, or None when it found nothing about the build (an error the load
    itself will report). Raises BackendError for what is not the build's doing and not to be kept."""
    tried = [use_extra_buffers()]
    seconds = check_seconds(model)
    log.info("checking that llama.cpp %s decodes on this host (%s, in a child process)", llama_cpp.__version__,
             model.name)
    run = _run_in_child(target, model, tried[0], n_threads, seconds)
    if run.exitcode is None:  # not kept: a very busy machine may pass next time
        raise BackendError(f"{model.name}: llama.cpp's self-check did not finish loading this model and decoding "
                           f"{PROBE_TOKENS} tokens in {seconds:.0f} s (in a child process, which was stopped). "
                           "The machine may be very busy; loading the model again checks again.")
    if run.stage == "failed":
        return None
    if run.stage == "started":  # it died reading this file, before any decode: the file's doing
        raise BackendError(f"{model}: llama.cpp {_ending(run)} loading this model in a self-check run in a child "
                           "process, so nothing was lost. The file may be damaged or of a kind this llama.cpp "
                           "cannot read: download it again, or try another model.")
    if run.stage != "decoded" and tried[0]:
        tried.append(False)
        run = _run_in_child(target, model, False, n_threads, seconds)
        if run.stage == "decoded":
            message = (f"llama.cpp {llama_cpp.__version__} crashes on this host with its extra weight buffers on "
                       "and decodes with them off, so models load without them (slower). A portable build keeps "
                       f"them: {PORTABLE_INSTALL}")
            log.warning("%s", message)
            return CheckResult(True, False, message, model.name, time.time())
    if run.stage == "decoded":
        return CheckResult(True, tried[0], "", model.name, time.time())
    if run.stage == "failed" or run.exitcode is None:
        return None
    return CheckResult(False, tried[-1], _crash_message(run, model, tried), model.name, time.time())


def _ending(run: _ChildRun) -> str:
    return f"crashed ({run.signal_name})" if run.signal_name else f"exited with code {run.exitcode}"


def build_summary() -> str:
    """This build and what this process's self-check decided, in one line (``parley doctor``)."""
    decided = next(iter(_decided.values()), None)
    features = ", ".join(f for f in compiled_features() if f not in ("LLAMAFILE", "OPENMP", "REPACK"))
    head = f"llama-cpp-python {llama_cpp.__version__} ({features or 'no CPU features listed'})"
    if decided is None:
        return f"{head}: not self-checked in this process"
    if not decided.ok:
        return f"{head}: CRASHES on this host (self-check of {decided.model}); {PORTABLE_INSTALL}"
    buffers = "on" if decided.extra_buffers else "off (" + (decided.message or "the AMX guard") + ")"
    return f"{head}: decodes on this host (self-check of {decided.model} in a child process); extra weight " \
           f"buffers {buffers}"


def forget_decisions() -> None:
    """Forget what this process decided (tests, and a caller that changed ``PARLEY_LLAMA_CHECKS``)."""
    with _deciding:
        _decided.clear()


def model_params(extra_buffers: bool) -> Any:
    """llama.cpp's model parameters, at its defaults but for the extra weight buffers."""
    params = internals.LlamaModel.default_params()
    params.use_extra_bufts = extra_buffers
    return params
