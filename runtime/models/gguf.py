"""What a GGUF model file says about itself: metadata and tensor layout.

This is the one place that reads GGUF files. Everything else (the estimator, the
model list, the llama backend) calls :func:`read_gguf` and gets a
:class:`GGUFInfo`.

The header is walked directly with the ``gguf`` package's definitions (value
types, tensor types and their block sizes, file types). ``gguf.GGUFReader``
parses every element of the tokenizer's string arrays one numpy view at a time,
which takes ~3 s for a 49k-token vocabulary and ~10 s for a 128k one; walking the
header with ``struct`` takes a few tens of milliseconds, and tests check that
both agree. Arrays longer than :data:`MAX_ARRAY_KEPT` elements (vocabularies,
merges) are skipped, and only their lengths are kept in ``array_lengths``.

Results are cached by (path, modification time, size). The ``gguf`` package's definitions are read
at the first read, not with this module, and from its ``constants`` module alone: the package imports
numpy (0.09 s of the editor's start, and of an open's VRAM estimate).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import mmap
import os
import re
import struct
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runtime.problems import InputError, Problem

log = logging.getLogger("parley.runtime")

MAX_ARRAY_KEPT = 4096  # per-layer arrays are kept; vocabularies and merges are not
# Bounds a crafted header cannot pass: every real model is far inside them. Declared lengths are
# also checked against the bytes left in the file before anything is read or made.
MAX_ARRAY_DEPTH = 8  # arrays of arrays; real files nest at most once
MAX_KEPT_ELEMENTS = 1_000_000  # elements of kept arrays, all keys together
MAX_KEYS = 65_536  # metadata keys (real models have a few dozen)
MAX_TENSORS = 1_000_000
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_LAYERS = 4096  # block_count; the largest models have a few hundred
MAX_ALIGNMENT = 1 << 20
_CACHE_SIZE = 32
DEFAULT_ALIGNMENT = 32  # gguf.GGUF_DEFAULT_ALIGNMENT (tests check they agree)


def _gguf_constants() -> Any:
    """The gguf package's ``constants`` module (plain enums and tables), without the package: the
    package's ``__init__`` imports numpy (0.09 s, 0.4 s under load), which opening an asset paid for
    its VRAM estimate. The package itself when it is imported already, or when its module cannot be
    read as a file (a frozen app)."""
    loaded = sys.modules.get("gguf")
    if loaded is not None:
        return loaded
    try:
        spec = importlib.util.find_spec("gguf")  # finds the package without running it
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        source = Path(folders[0]) / "constants.py" if folders else None
        if source is not None and source.is_file():
            own = importlib.util.spec_from_file_location("runtime.models._gguf_constants", source)
            if own is not None and own.loader is not None:
                module = importlib.util.module_from_spec(own)
                own.loader.exec_module(module)
                return module
    except Exception as exc:  # noqa: BLE001 - any trouble reading it alone: import the package as usual
        log.debug("reading gguf.constants alone failed (%s); importing the gguf package", exc)
    import gguf

    return gguf


@cache
def _gguf() -> SimpleNamespace:
    """The ``gguf`` package's definitions this module reads files with (read once, when first needed)."""
    constants = _gguf_constants()
    GGML_QUANT_SIZES = constants.GGML_QUANT_SIZES
    GGUF_DEFAULT_ALIGNMENT = constants.GGUF_DEFAULT_ALIGNMENT
    GGUF_MAGIC = constants.GGUF_MAGIC
    GGMLQuantizationType = constants.GGMLQuantizationType
    GGUFValueType = constants.GGUFValueType
    LlamaFileType = constants.LlamaFileType

    value = GGUFValueType
    scalars: dict[int, str] = {
        value.UINT8: "<B", value.INT8: "<b", value.UINT16: "<H", value.INT16: "<h", value.UINT32: "<I",
        value.INT32: "<i", value.FLOAT32: "<f", value.BOOL: "<?", value.UINT64: "<Q", value.INT64: "<q",
        value.FLOAT64: "<d",
    }
    return SimpleNamespace(GGML_QUANT_SIZES=GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT=GGUF_DEFAULT_ALIGNMENT,
                           GGUF_MAGIC=GGUF_MAGIC, GGMLQuantizationType=GGMLQuantizationType,
                           GGUFValueType=GGUFValueType, LlamaFileType=LlamaFileType, SCALARS=scalars,
                           STRING=int(value.STRING), ARRAY=int(value.ARRAY))


_LAYER = re.compile(r"^blk\.(\d+)\.")


class GGUFError(InputError):
    """A model file that is missing, unreadable or not a GGUF file; names the file."""

    def __init__(self, path: str | os.PathLike[str], message: str) -> None:
        self.path = str(path)
        super().__init__([Problem("error", message, file=self.path)])


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the file: shape in ggml order (ne0 first), type and size."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    n_bytes: int
    offset: int  # absolute position of the tensor's data in the file

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def layer(self) -> int | None:
        """The repeating layer (``blk.N.``) this tensor belongs to, or None."""
        m = _LAYER.match(self.name)
        return int(m.group(1)) if m else None


@dataclass(frozen=True, eq=False)  # hashed by identity: read_gguf returns one object per file version
class GGUFInfo:
    """A model file's metadata, interpreted the way llama.cpp loads hyperparameters.

    Per-layer values (head counts) are tuples with one entry per block, whether the
    file stores a scalar or an array. ``metadata`` holds every key, except arrays
    longer than ``MAX_ARRAY_KEPT``, whose lengths are in ``array_lengths``.
    """

    path: Path
    file_size: int
    version: int
    architecture: str
    name: str
    parameters: int
    quantization: str
    context_length: int
    block_count: int
    embedding_length: int
    head_count: tuple[int, ...]
    head_count_kv: tuple[int, ...]
    key_length: int
    value_length: int
    key_length_swa: int
    value_length_swa: int
    sliding_window: int
    sliding_window_pattern: int | tuple[bool, ...] | None
    vocab_size: int
    metadata: dict[str, Any] = field(repr=False)
    array_lengths: dict[str, int] = field(repr=False)
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    data_offset: int = 0
    alignment: int = DEFAULT_ALIGNMENT

    def arch_key(self, suffix: str, default: Any = None) -> Any:
        """``metadata["<architecture>.<suffix>"]``, or ``default``."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    @property
    def weights_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def chat_template(self) -> str:
        return str(self.metadata.get("tokenizer.chat_template", ""))

    def tensor(self, name: str) -> TensorInfo | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None


_cache: OrderedDict[tuple[str, int, int], GGUFInfo] = OrderedDict()
_cache_lock = threading.Lock()


def read_gguf(path: str | os.PathLike[str]) -> GGUFInfo:
    """Read a GGUF file's header; cached by (path, mtime, size). Raises GGUFError."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise GGUFError(p, "model file not found; check the path or put the file in the models folder") from None
    except OSError as e:
        raise GGUFError(p, f"cannot read the model file: {e.strerror or e}") from None
    except ValueError:  # a NUL in the name
        raise GGUFError(p, "not a usable file name (it holds a NUL character)") from None
    if not p.is_file():
        raise GGUFError(p, "not a file; a model is a single .gguf file")
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    info = _read_uncached(p, st.st_size)
    with _cache_lock:
        _cache[key] = info
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return info


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _read_uncached(p: Path, size: int) -> GGUFInfo:
    if size < 24:
        raise GGUFError(p, f"not a GGUF model file (only {size} bytes)")
    try:
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            magic, version = struct.unpack_from("<II", buf, 0)
            if magic != _gguf().GGUF_MAGIC:
                raise GGUFError(p, f"not a GGUF model file (it starts with {bytes(buf[:4])!r}, not b'GGUF')")
            if version < 2:
                raise GGUFError(p, f"GGUF version {version} is too old; convert the model again with a current llama.cpp")
            header = _Header(buf, p)
            return header.parse(version, size)
    except GGUFError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise GGUFError(p, f"the GGUF header is damaged or the file is cut short ({e})") from None
    except OSError as e:
        raise GGUFError(p, f"cannot read the model file: {e.strerror or e}") from None


class _Header:
    """Walks the header of an open GGUF file. Every length the file declares is checked against
    the bytes left before it is used, so a crafted header fails fast with the key named."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf = buf
        self.path = path
        self.pos = 8
        self.array_lengths: dict[str, int] = {}
        self.kept_budget = MAX_KEPT_ELEMENTS

    def _fail(self, message: str) -> GGUFError:
        return GGUFError(self.path, f"{message}; the file is damaged, or it is not a model")

    def _left(self) -> int:
        return len(self.buf) - self.pos

    def _need(self, count: int, each: int, what: str) -> None:
        """``count`` items of at least ``each`` bytes must fit in what is left of the file."""
        left = self._left()
        if count * each > left:
            raise self._fail(f"{what} declares {count:,} entries of at least {each} bytes, but only "
                             f"{max(left, 0):,} bytes are left in the file")

    def _u32(self) -> int:
        (v,) = struct.unpack_from("<I", self.buf, self.pos)
        self.pos += 4
        return v

    def _u64(self) -> int:
        (v,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        return v

    def _str(self, what: str) -> str:
        n = self._u64()
        if n > self._left():
            raise self._fail(f"{what}: a string of {n:,} bytes runs past the end of the file")
        s = self.buf[self.pos : self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _skip_str(self, what: str) -> None:
        (n,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        if n > self._left():
            raise self._fail(f"{what}: a string of {n:,} bytes runs past the end of the file")
        self.pos += n

    def _skip_strs(self, n: int, what: str) -> None:
        """Walk past ``n`` strings (a vocabulary, its merges): ``_skip_str`` ``n`` times, in one
        loop (0.2 s of Python calls for the sample model's 98k strings, where this takes 0.02 s)."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        unpack = struct.unpack_from
        for _ in range(n):
            (length,) = unpack("<Q", buf, pos)
            pos += 8
            if length > end - pos:
                self.pos = pos
                raise self._fail(f"{what}: a string of {length:,} bytes runs past the end of the file")
            pos += length
        self.pos = pos

    def _value(self, vtype: int, key: str, depth: int = 0, keep: bool = True) -> Any:
        """The value at the current position (None for an array not kept). ``keep`` False walks
        past it without building anything."""
        spec = _gguf()
        fmt = spec.SCALARS.get(vtype)
        if fmt is not None:
            (v,) = struct.unpack_from(fmt, self.buf, self.pos)
            self.pos += struct.calcsize(fmt)
            return v
        if vtype == spec.STRING:
            if not keep:
                self._skip_str(f"metadata key {key!r}")
                return None
            return self._str(f"metadata key {key!r}")
        if vtype != spec.ARRAY:
            raise self._fail(f"metadata key {key!r} has value type {vtype}, which GGUF does not define")
        if depth >= MAX_ARRAY_DEPTH:
            raise self._fail(f"metadata key {key!r} nests arrays more than {MAX_ARRAY_DEPTH} deep")
        itype = self._u32()
        n = self._u64()
        ifmt = spec.SCALARS.get(itype)
        width = struct.calcsize(ifmt) if ifmt is not None else 8 if itype == spec.STRING else 12
        if ifmt is None and itype not in (spec.STRING, spec.ARRAY):
            raise self._fail(f"metadata key {key!r} is an array of value type {itype}, which GGUF does not define")
        self._need(n, width, f"metadata key {key!r}")
        keep = keep and n <= MAX_ARRAY_KEPT and n <= self.kept_budget
        if keep:
            self.kept_budget -= n
        elif depth == 0:
            self.array_lengths[key] = n
        if ifmt is not None:
            vals = list(struct.unpack_from(f"<{n}{ifmt[1]}", self.buf, self.pos)) if keep else None
            self.pos += width * n
            return vals
        if not keep:
            if itype == spec.STRING:
                self._skip_strs(n, f"metadata key {key!r}")
                return None
            for _ in range(n):
                self._value(itype, key, depth + 1, keep=False)
            return None
        return [self._value(itype, key, depth + 1) for _ in range(n)]

    def parse(self, version: int, size: int) -> GGUFInfo:
        n_tensors = self._u64()
        n_kv = self._u64()
        if n_kv > MAX_KEYS:
            raise self._fail(f"the header declares {n_kv:,} metadata keys (at most {MAX_KEYS:,} are read)")
        if n_tensors > MAX_TENSORS:
            raise self._fail(f"the header declares {n_tensors:,} tensors (at most {MAX_TENSORS:,} are read)")
        self._need(n_kv, 8 + 4 + 1, "the metadata")  # a key's length, its type, a one-byte value
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._str(f"metadata key {len(metadata) + 1}'s name")
            vtype = self._u32()
            value = self._value(vtype, key)
            if value is not None:
                metadata[key] = value
        self._need(n_tensors, 8 + 4 + 4 + 8, "the tensor list")  # name length, dims, type, offset
        raw_tensors: list[tuple[str, tuple[int, ...], int, int]] = []
        for index in range(n_tensors):
            name = self._str(f"tensor {index}'s name")
            n_dims = self._u32()
            if n_dims > MAX_DIMS:
                raise self._fail(f"tensor {name!r} has {n_dims:,} dimensions (GGUF allows {MAX_DIMS})")
            dims = struct.unpack_from(f"<{n_dims}Q", self.buf, self.pos)
            self.pos += 8 * n_dims
            ttype = self._u32()
            offset = self._u64()
            raw_tensors.append((name, tuple(int(d) for d in dims), ttype, offset))
        spec = _gguf()
        alignment = _whole(metadata.get("general.alignment", spec.GGUF_DEFAULT_ALIGNMENT), "general.alignment", self.path)
        if not 0 < alignment <= MAX_ALIGNMENT or alignment & (alignment - 1):
            raise self._fail(f"general.alignment is {alignment}, not a power of two up to {MAX_ALIGNMENT:,}")
        data_offset = -(-self.pos // alignment) * alignment
        tensors = []
        for name, shape, ttype, offset in raw_tensors:
            try:
                qtype = spec.GGMLQuantizationType(ttype)
                block, type_size = spec.GGML_QUANT_SIZES[qtype]
            except (ValueError, KeyError):
                raise GGUFError(self.path, f"tensor {name!r} has tensor type {ttype}, which this version does not know") from None
            n_el = 1
            for d in shape:
                n_el *= d
            n_bytes = n_el // block * type_size
            if data_offset + offset + n_bytes > size:
                raise GGUFError(self.path, f"the file is cut short: tensor {name!r} runs past its end")
            tensors.append(TensorInfo(name, qtype.name, shape, n_bytes, data_offset + offset))
        return _interpret(self.path, size, version, metadata, self.array_lengths, tuple(tensors), data_offset, alignment)


def _whole(value: Any, key: str, path: Path) -> int:
    """A metadata value that must be a whole number, or ``GGUFError`` naming the key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise GGUFError(path, f"{_key(key)} is {_shown(value)}, not a whole number; the file is damaged")
    return int(value)


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.\-]+")


def _key(key: str) -> str:
    """A metadata key as a message shows it: as it is, or quoted and escaped when the file put
    something odd in it (a newline, a NUL: the architecture name is the file's own text)."""
    return key if _PLAIN_KEY.fullmatch(key) else repr(key)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _per_layer(value: Any, n_layer: int, key: str, path: Path) -> tuple[int, ...] | None:
    """A scalar or per-layer array as one value per layer (llama.cpp's get_key_or_arr)."""
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != n_layer:
            raise GGUFError(path, f"{_key(key)} has {len(value)} entries but the model has {n_layer} layers")
        return tuple(_whole(v, key, path) for v in value)
    return (_whole(value, key, path),) * n_layer


def _interpret(
    path: Path,
    size: int,
    version: int,
    md: dict[str, Any],
    array_lengths: dict[str, int],
    tensors: tuple[TensorInfo, ...],
    data_offset: int,
    alignment: int,
) -> GGUFInfo:
    arch = str(md.get("general.architecture", ""))
    if not arch:
        raise GGUFError(path, "general.architecture is missing; this GGUF file is not a language model")

    def key(suffix: str, default: Any = None) -> Any:
        return md.get(f"{arch}.{suffix}", default)

    def whole(suffix: str, default: Any) -> int:
        return _whole(key(suffix, default), f"{arch}.{suffix}", path)

    n_layer = whole("block_count", 0)
    if not 0 <= n_layer <= MAX_LAYERS:
        raise GGUFError(path, f"{_key(arch + '.block_count')} is {n_layer:,}; a model has 0 to {MAX_LAYERS:,} layers, "
                        "so the file is damaged")
    n_embd = whole("embedding_length", 0)
    head_count = _per_layer(key("attention.head_count", 0), n_layer, f"{arch}.attention.head_count", path) or ()
    head_count_kv = (
        _per_layer(key("attention.head_count_kv"), n_layer, f"{arch}.attention.head_count_kv", path) or head_count
    )
    # llama.cpp divides by the first layer's head count when the file gives no head size
    n_head0 = head_count[0] if head_count else 0
    default_head = n_embd // n_head0 if n_head0 else 0
    key_length = whole("attention.key_length", default_head)
    value_length = whole("attention.value_length", default_head)
    pattern = key("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        pattern = tuple(bool(v) for v in pattern)
    elif pattern is not None:
        pattern = whole("attention.sliding_window_pattern", pattern)
    vocab = key("vocab_size")
    if vocab is None:
        tokens = md.get("tokenizer.ggml.tokens", [])
        vocab = array_lengths.get("tokenizer.ggml.tokens", len(tokens) if isinstance(tokens, (list, str)) else 0)
    vocab = _whole(vocab, f"{arch}.vocab_size", path)
    return GGUFInfo(
        path=path,
        file_size=size,
        version=version,
        architecture=arch,
        name=str(md.get("general.name", "") or path.stem),
        parameters=sum(t.n_elements for t in tensors),
        quantization=_quantization(md, tensors),
        context_length=whole("context_length", 0),
        block_count=n_layer,
        embedding_length=n_embd,
        head_count=head_count,
        head_count_kv=head_count_kv,
        key_length=key_length,
        value_length=value_length,
        key_length_swa=whole("attention.key_length_swa", key_length),
        value_length_swa=whole("attention.value_length_swa", value_length),
        sliding_window=whole("attention.sliding_window", 0),
        sliding_window_pattern=pattern,
        vocab_size=vocab,
        metadata=md,
        array_lengths=array_lengths,
        tensors=tensors,
        data_offset=data_offset,
        alignment=alignment,
    )


def _quantization(md: dict[str, Any], tensors: tuple[TensorInfo, ...]) -> str:
    ftype = md.get("general.file_type")
    if isinstance(ftype, int) and not isinstance(ftype, bool):
        try:
            name = _gguf().LlamaFileType(ftype).name
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    # no file type: name it after the type holding most of the 2-D weights
    by_type: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) >= 2:
            by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
    return max(by_type, key=by_type.__getitem__) if by_type else "unknown"


def row_bytes(type_name: str, n: int) -> int:
    """Bytes of ``n`` consecutive values of a ggml type (ggml_row_size)."""
    spec = _gguf()
    block, type_size = spec.GGML_QUANT_SIZES[spec.GGMLQuantizationType[type_name]]
    if n % block:
        raise ValueError(f"{n} values are not a whole number of {type_name} blocks of {block}")
    return n // block * type_size
