"""runtime.models.gguf: the one GGUF reader, checked against gguf.GGUFReader."""

from __future__ import annotations

import os
import time
from pathlib import Path

import gguf
import pytest

from runtime.models.gguf import GGUFError, clear_cache, read_gguf, row_bytes
from runtime.problems import InputError
from tests.conftest import sample_model_path
from tests.runtime.tiny_gguf import write_tiny_gguf

SAMPLE = sample_model_path()


def _same_as_reference(path: Path) -> None:
    """Tensor names, types, shapes, sizes and offsets agree with the gguf package's own reader."""
    info = read_gguf(path)
    ref = gguf.GGUFReader(path)
    ours = [(t.name, t.type_name, t.shape, t.n_bytes, t.offset) for t in info.tensors]
    theirs = [(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes), int(t.data_offset)) for t in ref.tensors]
    assert ours == theirs
    for key, fld in ref.fields.items():
        if key.startswith("GGUF."):
            continue
        if key in info.array_lengths:
            assert info.array_lengths[key] == len(fld.data)
            continue
        value = fld.contents()
        assert info.metadata[key] == pytest.approx(value) if isinstance(value, float) else info.metadata[key] == value, key


def test_reads_scalar_and_per_layer_head_counts(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "gqa.gguf", n_layer=4, head_count=[4, 4, 8, 8], head_count_kv=[1, 2, 2, 4], key_length=16)
    info = read_gguf(path)
    assert info.architecture == "llama"
    assert info.block_count == 4
    assert info.head_count == (4, 4, 8, 8)
    assert info.head_count_kv == (1, 2, 2, 4)
    assert info.key_length == 16
    assert info.value_length == 64 // 4  # n_embd / head_count of layer 0, as llama.cpp defaults it
    assert info.context_length == 4096
    assert info.vocab_size == 96
    assert info.quantization == "F32"
    assert info.parameters == sum(t.n_elements for t in info.tensors)
    assert info.chat_template == "{{ messages }}"
    assert info.tensor("blk.2.attn_q.weight").layer == 2
    assert info.tensor("output.weight").layer is None
    _same_as_reference(path)


def test_head_count_kv_defaults_to_head_count(tmp_path: Path) -> None:
    info = read_gguf(write_tiny_gguf(tmp_path / "mha.gguf", head_count=4, head_count_kv=None))
    assert info.head_count_kv == info.head_count == (4, 4, 4, 4)


def test_sliding_window_fields(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "swa.gguf", arch="gemma2", sliding_window=256, sliding_window_pattern=[True, False, True, False])
    info = read_gguf(path)
    assert info.sliding_window == 256
    assert info.sliding_window_pattern == (True, False, True, False)
    info3 = read_gguf(write_tiny_gguf(tmp_path / "g3.gguf", arch="gemma3", sliding_window=128, sliding_window_pattern=3))
    assert info3.sliding_window_pattern == 3


def test_per_layer_array_of_the_wrong_length_names_the_key(tmp_path: Path) -> None:
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "llama")
    w.add_block_count(3)
    w.add_embedding_length(64)
    w.add_head_count([4, 4])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match="llama.attention.head_count has 2 entries but the model has 3 layers"):
        read_gguf(tmp_path / "bad.gguf")


def test_missing_file_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(InputError) as exc:
        read_gguf(missing)
    assert isinstance(exc.value, GGUFError)
    assert exc.value.problems[0].file == str(missing)
    assert "not found" in str(exc.value)


def test_not_a_gguf_file(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(GGUFError, match=r"not a GGUF model file \(it starts with b'PK"):
        read_gguf(bogus)
    tiny = tmp_path / "tiny.gguf"
    tiny.write_bytes(b"GG")
    with pytest.raises(GGUFError, match="only 2 bytes"):
        read_gguf(tiny)
    with pytest.raises(GGUFError, match="not a file"):
        read_gguf(tmp_path)


def test_truncated_file_is_reported(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "cut.gguf")
    data = path.read_bytes()
    for cut in (40, 1000, len(data) - 100):
        clear_cache()
        path.write_bytes(data[:cut])
        with pytest.raises(GGUFError, match="cut short|damaged") as exc:
            read_gguf(path)
        assert exc.value.problems[0].file == str(path)


def test_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf", n_layer=2)
    first = read_gguf(path)
    assert read_gguf(path) is first
    write_tiny_gguf(path, n_layer=3)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    second = read_gguf(path)
    assert second is not first
    assert second.block_count == 3


def test_row_bytes_by_block() -> None:
    assert row_bytes("F16", 192) == 384
    assert row_bytes("Q8_0", 192) == 6 * 34
    assert row_bytes("Q4_0", 192) == 6 * 18
    with pytest.raises(ValueError):
        row_bytes("Q8_0", 100)


@pytest.mark.model
def test_sample_model_matches_the_reference_reader() -> None:
    info = read_gguf(SAMPLE)
    assert (info.architecture, info.block_count, info.embedding_length) == ("llama", 30, 576)
    assert (info.head_count[0], info.head_count_kv[0], info.key_length) == (9, 3, 64)
    assert info.quantization == "Q4_1"
    assert info.context_length == 8192
    assert info.vocab_size == 49152
    assert info.array_lengths["tokenizer.ggml.tokens"] == 49152
    _same_as_reference(SAMPLE)


def test_the_gguf_package_is_imported_at_the_first_read_only():
    """Importing this module (as the editor does when it starts) leaves out the gguf package and
    numpy (0.09 s); its default alignment is the package's."""
    import subprocess
    import sys

    code = ("import sys, runtime.models.gguf as g; assert 'gguf' not in sys.modules and 'numpy' not in sys.modules; "
            "import gguf; assert g.DEFAULT_ALIGNMENT == gguf.GGUF_DEFAULT_ALIGNMENT")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_read_needs_only_the_gguf_packages_constants(sample_model):
    """A header is read with the package's constants module alone (no numpy: an open's VRAM estimate
    paid 0.09 s for it), and those are the package's own definitions."""
    import subprocess
    import sys

    code = ("import sys; from runtime.models.gguf import read_gguf, row_bytes, _gguf; "
            f"info = read_gguf({str(sample_model)!r}); row_bytes('Q8_0', 64); "
            "assert 'numpy' not in sys.modules and 'gguf' not in sys.modules, 'numpy or gguf imported'; "
            "spec = _gguf(); import gguf; "
            "assert {t.name: s for t, s in spec.GGML_QUANT_SIZES.items()} == "
            "{t.name: s for t, s in gguf.GGML_QUANT_SIZES.items()}; "
            "assert [(t.name, t.value) for t in spec.LlamaFileType] == [(t.name, t.value) for t in gguf.LlamaFileType]; "
            "assert [(t.name, t.value) for t in spec.GGUFValueType] == [(t.name, t.value) for t in gguf.GGUFValueType]; "
            "assert spec.GGUF_MAGIC == gguf.GGUF_MAGIC; print(info.quantization)")
    run = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == read_gguf(sample_model).quantization
