"""The estimator against llama.cpp's own allocations on the sample model.

Real llama.cpp contexts are created exactly as the llama backend creates a node's
context (``llama_context_params(context_params(...))``, the functions the backend
calls) at several context sizes, KV cache types and flash attention modes;
the sizes llama.cpp reports in its log (captured through the llama_log_set
callback the llama backend installs, never by redirecting stdout/stderr) are
compared with the estimate:

- KV cache: exact. llama.cpp prints MiB with two decimals, so the estimate, printed
  the same way, must be the same text; the cell count must match exactly.
- compute buffer: within 5 %.
- weights: llama_model_size() is compared to the byte, and the model buffer's
  printed size to the estimate.
- total (weights + KV + compute + output): within 3 %.
- flash attention: the graph uses it exactly when the estimate says so. Off is the runtime's
  default (``FLASH_ATTN``); a quantized KV cache with it off is refused by llama.cpp and by the
  estimator alike, and "auto" turns it on for one, as llama.cpp does.

Everything is on the CPU here (the machine has no GPU), so the GPU split is not
checked by this test.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

llama_cpp = pytest.importorskip("llama_cpp")
internals = pytest.importorskip("llama_cpp._internals")

from runtime.backends.llama import install_log_forwarding, llama_context_params, llama_log
from runtime.models.context_settings import FLASH_ATTN, KV_TYPE, ContextParams, context_params
from runtime.models.gguf import read_gguf
from runtime.models.memory import MIB, EstimateError, Settings, context_cost, model_shape, weights_cost
from tests.conftest import sample_model_path

pytestmark = pytest.mark.model

SAMPLE = sample_model_path()

# (n_ctx, KV type, flash attention); FLASH_ATTN ("off") and f16 are the backend's defaults
CASES = [
    (512, KV_TYPE, FLASH_ATTN),
    (512, "f16", "on"),
    (512, "f16", "auto"),
    (2048, KV_TYPE, FLASH_ATTN),
    (2048, "f16", "on"),
    (8192, KV_TYPE, FLASH_ATTN),
    (8192, "f16", "on"),
    (1000, KV_TYPE, FLASH_ATTN),  # padded to 1024 cells
    (1000, "f16", "auto"),
    (300, KV_TYPE, FLASH_ATTN),  # a micro-batch smaller than n_batch
    (300, "f16", "on"),
    (512, "q8_0", "on"),
    (2048, "q8_0", "auto"),  # auto turns flash attention on for a quantized V cache
    (8192, "q8_0", "on"),
    (512, "q4_0", "auto"),
    (2048, "q4_0", "on"),
    (8192, "q4_0", "on"),
]
assert FLASH_ATTN == "off" and sum(fa == "off" for _n, _kv, fa in CASES) >= 5, "the default is the most checked"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def log_lines() -> Iterator[_Lines]:
    install_log_forwarding()
    handler = _Lines()
    old_level = llama_log.level
    llama_log.setLevel(logging.DEBUG)
    llama_log.addHandler(handler)
    yield handler
    llama_log.removeHandler(handler)
    llama_log.setLevel(old_level)


@pytest.fixture(scope="module")
def sample_model(log_lines: _Lines) -> Iterator[tuple[object, str]]:
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    log_lines.lines.clear()
    model = internals.LlamaModel(path_model=str(SAMPLE), params=params, verbose=True)
    load_log = "\n".join(log_lines.lines)
    yield model, load_log
    model.close()


def _mib(text: str, pattern: str) -> list[str]:
    return re.findall(pattern + r"\s*=\s*([\d.]+) MiB", text)


def _context_log(model: object, log_lines: _Lines, n_ctx: int, kv_type: str, flash_attn: str) -> str:
    return _create(model, log_lines, context_params(n_ctx, kv_type=kv_type, flash_attn=flash_attn))


def _create(model: object, log_lines: _Lines, params: ContextParams) -> str:
    """Create (and free) a context with ``params``; llama.cpp's log lines while it did."""
    log_lines.lines.clear()
    ctx = internals.LlamaContext(model=model, params=llama_context_params(params, 1, 1), verbose=True)
    try:
        return "\n".join(log_lines.lines)
    finally:
        ctx.close()


def test_weights_match_llama_cpp(sample_model: tuple[object, str]) -> None:
    model, load_log = sample_model
    info = read_gguf(SAMPLE)
    estimate = weights_cost(model_shape(info), Settings(gpu_memory=0))
    assert estimate.ram == llama_cpp.llama_model_size(model.model)
    assert info.parameters == llama_cpp.llama_model_n_params(model.model)
    printed = sum(float(v) for v in _mib(load_log, r"model buffer size"))
    assert f"{estimate.ram / MIB:.2f}" == f"{printed:.2f}"


@pytest.mark.parametrize(("n_ctx", "kv_type", "flash_attn"), CASES)
def test_context_buffers_match_llama_cpp(
    sample_model: tuple[object, str], log_lines: _Lines, n_ctx: int, kv_type: str, flash_attn: str
) -> None:
    model, load_log = sample_model
    text = _context_log(model, log_lines, n_ctx, kv_type, flash_attn)
    shape = model_shape(read_gguf(SAMPLE))
    settings = Settings.for_context(context_params(n_ctx, kv_type=kv_type, flash_attn=flash_attn), gpu_memory=0)
    cost = context_cost(shape, n_ctx, settings)

    # "auto" resolves to what the estimator assumes: the graph uses flash attention exactly when it says so
    assert any("FLASH_ATTN_EXT" in line for line in log_lines.lines) == cost.flash_attn
    assert cost.flash_attn == (flash_attn != "off")
    if (kv_type, flash_attn) == (KV_TYPE, FLASH_ATTN):  # what `parley estimate` and the VRAM dock show by default
        assert cost == context_cost(shape, n_ctx, Settings(gpu_memory=0))

    [kv_line] = [line for line in log_lines.lines if re.search(r"llama_kv_cache: size =", line)]
    cells = int(re.search(r"\(\s*(\d+) cells", kv_line).group(1))
    assert cost.cells == cells
    [kv_printed] = _mib(text, r"KV buffer size")
    assert f"{cost.kv_bytes / MIB:.2f}" == kv_printed

    [compute_printed] = _mib(text, r"compute buffer size")
    compute = float(compute_printed) * MIB
    assert cost.compute_bytes == pytest.approx(compute, rel=0.05)

    [output_printed] = _mib(text, r"output buffer size")
    assert f"{cost.output_ram / MIB:.2f}" == output_printed

    weights = sum(float(v) for v in _mib(load_log, r"model buffer size")) * MIB
    actual_total = weights + float(kv_printed) * MIB + compute + float(output_printed) * MIB
    estimated_total = weights_cost(shape, settings).total + cost.ram_bytes
    assert estimated_total == pytest.approx(actual_total, rel=0.03)


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_a_quantized_kv_cache_without_flash_attention_is_refused_by_both(
    sample_model: tuple[object, str], log_lines: _Lines, kv_type: str
) -> None:
    model, _load_log = sample_model
    allowed = context_params(512, kv_type=kv_type, flash_attn="on")
    off = ContextParams(**{**allowed.__dict__, "flash_attn": "off"})  # what context_params itself refuses
    with pytest.raises(ValueError, match="Failed to create llama_context"):
        _create(model, log_lines, off)
    assert any("quantized V cache requires flash_attn" in line for line in log_lines.lines)
    with pytest.raises(EstimateError) as exc:
        Settings.for_context(off, gpu_memory=0)
    assert exc.value.problems[0].field == "kv_type"
