"""Crafted GGUF headers: a clear GGUFError naming the key, fast and in little memory."""

from __future__ import annotations

import resource
import struct
from pathlib import Path

import pytest
from gguf import GGUFValueType as T

from runtime.models.gguf import GGUFError, clear_cache, read_gguf


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def kv_str(key: str, value: str) -> bytes:
    return _s(key) + struct.pack("<I", T.STRING) + _s(value)


def kv_u64(key: str, value: int) -> bytes:
    return _s(key) + struct.pack("<IQ", T.UINT64, value)


def kv_f32(key: str, value: float) -> bytes:
    return _s(key) + struct.pack("<If", T.FLOAT32, value)


def kv_array(key: str, item_type: int, count: int, body: bytes = b"") -> bytes:
    return _s(key) + struct.pack("<IIQ", T.ARRAY, item_type, count) + body


def nested_arrays(key: str, depth: int) -> bytes:
    body = struct.pack("<IQ", T.UINT8, 0)
    for _ in range(depth - 1):
        body = struct.pack("<IQ", T.ARRAY, 1) + body
    return _s(key) + struct.pack("<I", T.ARRAY) + body


def gguf(*kvs: bytes, n_tensors: int = 0, n_kv: int | None = None, tail: bytes = b"") -> bytes:
    count = len(kvs) if n_kv is None else n_kv
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, count) + b"".join(kvs) + tail


ARCH = kv_str("general.architecture", "llama")


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _read(tmp_path: Path, data: bytes) -> GGUFError:
    path = tmp_path / "crafted.gguf"
    path.write_bytes(data)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(GGUFError) as info:
        read_gguf(path)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 50, f"reading a {len(data)}-byte header took {grown_mib:.0f} MiB more"
    (problem,) = info.value.problems
    assert problem.file == str(path)
    return info.value


def test_deeply_nested_arrays(tmp_path):
    """Defect 8: RecursionError."""
    err = _read(tmp_path, gguf(ARCH, nested_arrays("deep.key", 100_000)))
    assert "metadata key 'deep.key' nests arrays more than 8 deep" in str(err)


def test_a_block_count_of_2_to_the_40(tmp_path):
    """Defect 8: MemoryError building per-layer head counts."""
    err = _read(tmp_path, gguf(ARCH, kv_u64("llama.block_count", 2**40)))
    assert "llama.block_count is 1,099,511,627,776" in str(err)


def test_a_block_count_of_1e8_in_a_tiny_file(tmp_path):
    """Defect 8: 830 MB of per-layer tuples for a 106-byte file."""
    err = _read(tmp_path, gguf(ARCH, kv_u64("llama.block_count", 10**8)))
    assert "llama.block_count is 100,000,000; a model has 0 to 4,096 layers" in str(err)


@pytest.mark.parametrize("item_type, each", [(T.UINT8, 1), (T.STRING, 8), (T.ARRAY, 12)], ids=["u8", "string", "array"])
def test_an_array_longer_than_the_file(tmp_path, item_type, each):
    err = _read(tmp_path, gguf(ARCH, kv_array("big", item_type, 10**8)))
    assert f"metadata key 'big' declares 100,000,000 entries of at least {each} bytes, but only 0 bytes" in str(err)


def test_more_keys_or_tensors_than_the_file_holds(tmp_path):
    assert "declares 100,000,000 metadata keys" in str(_read(tmp_path, gguf(ARCH, n_kv=10**8)))
    assert "the metadata declares 1,000 entries" in str(_read(tmp_path, gguf(ARCH, n_kv=1000)))
    assert "the tensor list declares 900,000 entries" in str(_read(tmp_path, gguf(ARCH, n_tensors=900_000)))


@pytest.mark.parametrize("kv, message", [
    (kv_str("llama.block_count", "many"), "llama.block_count is 'many', not a whole number"),
    (kv_f32("llama.context_length", float("inf")), "llama.context_length is inf, not a whole number"),
    (kv_array("llama.context_length", T.UINT8, 2, b"\x01\x02"), "llama.context_length is [1, 2], not a whole number"),
    (kv_u64("general.alignment", 3), "general.alignment is 3, not a power of two"),
    (_s("k") + struct.pack("<I", 99), "metadata key 'k' has value type 99"),
    (_s("s") + struct.pack("<IQ", T.STRING, 10**12), "metadata key 's': a string of 1,000,000,000,000 bytes"),
], ids=["text-block-count", "infinite-context", "array-context", "alignment-3", "unknown-type", "long-string"])
def test_values_of_the_wrong_kind_name_the_key(tmp_path, kv, message):
    assert message in str(_read(tmp_path, gguf(ARCH, kv)))


def test_an_architecture_name_with_a_newline_is_escaped_in_the_message(tmp_path):
    arch = kv_str("general.architecture", "ll\nama")
    err = _read(tmp_path, gguf(arch, kv_u64("ll\nama.block_count", 2**40)))
    assert "'ll\\nama.block_count' is 1,099,511,627,776" in str(err) and "\n" not in str(err)
