"""How much RAM and VRAM a model needs: its weights, and per context a KV cache and buffers.

Every model-backed node owns a llama.cpp context (its own KV cache, compute buffer
and output buffer), while nodes that use the same model file share its weights.
The numbers follow the llama.cpp version vendored in llama-cpp-python 0.3.36; the
formulas and the source of each are in ``docs/sizing.md``. The KV cache and the
weights are computed the way llama.cpp allocates them; the compute buffer is a
model of ggml's graph allocator checked against llama.cpp's own reports
(``tests/runtime/asset/test_estimate_accuracy.py``).

Everything after the GGUF header has been read is plain arithmetic on cached
shapes. This module knows nothing of assets: ``runtime.asset.estimate`` applies it to one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from runtime.models.context_settings import (
    FLASH_ATTN,
    FLASH_ATTN_MODES,
    KV_TYPE,
    KV_TYPES,
    N_BATCH,
    N_OUTPUTS_MAX,
    SNAPSHOT_BUDGET_MIB,
    ContextParams,
    FlashAttention,
    kv_type_refusal,
)
from runtime.models.gguf import GGUFInfo, row_bytes
from runtime.problems import InputError, Problem

GPU_PRESETS_GB: tuple[int, ...] = (6, 8, 12, 16, 24)
GIB = 1 << 30
MIB = 1 << 20

CTX_PAD = 256  # llama-context.cpp: cparams.n_ctx = GGML_PAD(n_ctx, 256)
CPU_ALIGNMENT = 32  # ggml-impl.h TENSOR_ALIGNMENT (CPU buffers)
GPU_ALIGNMENT = 128  # ggml-cuda: buffer alignment
F32 = 4

# Which layers use a sliding window when the file gives no per-layer pattern:
# architecture -> (pattern, dense_first, default window). From each model's
# load_arch_hparams in llama.cpp's src/models/*.cpp (load_swa_pattern calls).
SWA_ARCHITECTURES: dict[str, tuple[int, bool, int]] = {
    "gemma2": (2, False, 4096),
    "gemma3": (6, False, 0),
    "gemma3n": (5, False, 0),
    "cohere2": (4, False, 0),
    "exaone4": (4, False, 4096),
    "olmo2": (4, False, 0),
    "gpt-oss": (2, False, 0),
    "smallthinker": (4, True, 4096),
    "plamo3": (8, False, 0),
    "llama4": (4, False, 8192),
    "afmoe": (4, False, 0),
}
# llama-arch.cpp llm_arch_is_recurrent / llm_arch_is_hybrid
RECURRENT_ARCHITECTURES = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHITECTURES = frozenset(
    {"jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe", "qwen3next"}
)


class EstimateError(InputError):
    """Settings or a model the estimator cannot size; names the setting or file."""


@dataclass(frozen=True)
class Settings:
    """How the contexts would be created. Defaults are those of our llama backend
    (``runtime/models/context_settings.py``, the same values it creates contexts with)."""

    gpu_memory: int = 8 * GIB  # bytes of VRAM on the player's GPU; 0 means no GPU
    gpu_layers: int = -1  # llama.cpp n_gpu_layers: -1 all, 0 none, N the last N (the output layer counts as one)
    kv_type: str = KV_TYPE
    # "off" (the runtime's), "on", or "auto": llama.cpp's auto turns it on for CPU, CUDA, Metal and Vulkan
    flash_attn: FlashAttention = FLASH_ATTN
    n_batch: int = N_BATCH
    n_ubatch: int = N_BATCH
    n_outputs_max: int = N_OUTPUTS_MAX  # logits rows a micro-batch reserves; 0 means one per token (llama.cpp's default)
    swa_full: bool = True  # llama_context_default_params().swa_full
    offload_kqv: bool = True
    reserve_fraction: float = 0.05  # VRAM the driver and the desktop keep; "tight" below this headroom
    snapshot_budget: int = SNAPSHOT_BUDGET_MIB * MIB  # RAM the backend's cache snapshots may take, all nodes together

    def __post_init__(self) -> None:
        if self.kv_type not in KV_TYPES:
            raise EstimateError([Problem("error", f"KV cache type must be one of {', '.join(KV_TYPES)}, not {self.kv_type!r}", field="kv_type")])
        if self.flash_attn not in FLASH_ATTN_MODES:
            raise EstimateError([Problem("error", f"flash attention must be one of {', '.join(FLASH_ATTN_MODES)}, "
                                         f"not {self.flash_attn!r}", field="flash_attn")])
        refusal = kv_type_refusal(self.kv_type, self.flash_attn)  # llama.cpp would not create the context
        if refusal:
            raise EstimateError([Problem("error", refusal, field="kv_type")])
        if self.gpu_memory < 0:
            raise EstimateError([Problem("error", "GPU memory cannot be negative", field="gpu_memory")])
        if self.n_batch < 1 or self.n_ubatch < 1:
            raise EstimateError([Problem("error", "batch sizes must be at least 1", field="n_batch")])
        if self.n_outputs_max < 0:
            raise EstimateError([Problem("error", "n_outputs_max cannot be negative", field="n_outputs_max")])
        if self.snapshot_budget < 0:
            raise EstimateError([Problem("error", "the snapshot budget cannot be negative", field="snapshot_budget")])

    @classmethod
    def for_context(cls, params: ContextParams, **other: object) -> Settings:
        """The settings that size a context created with ``params`` (``other``: GPU memory and layers, ...)."""
        return cls(
            kv_type=params.kv_type,
            flash_attn=params.flash_attn,
            n_batch=params.n_batch,
            n_ubatch=params.n_ubatch,
            n_outputs_max=params.n_outputs_max,
            **other,  # type: ignore[arg-type]
        )

    @property
    def effective_flash_attn(self) -> bool:
        """Whether the context llama.cpp creates uses flash attention: "auto" resolves to on for the
        devices it runs on (CPU, CUDA, Metal, Vulkan; checked on the CPU by the accuracy test), and a
        quantized V cache with "off" is refused in ``__post_init__``, as llama.cpp refuses it."""
        return self.flash_attn != "off"


def flash_attn_assumed(settings: Settings) -> str:
    """The flash attention setting an estimate assumed, and what it means for replays, in a designer's words."""
    if not settings.effective_flash_attn:
        default = "the runtime's default" if FLASH_ATTN == "off" else f"not the runtime's default, {FLASH_ATTN}"
        return f"flash attention off ({default}: replays are exact at any thread count)"
    mode = "on" if settings.flash_attn == "on" else "auto, which llama.cpp turns on for the CPU, CUDA, Metal and Vulkan"
    why = (f"a {settings.kv_type} KV cache needs it" if settings.kv_type != "f16"
           else "the runtime's default" if FLASH_ATTN == settings.flash_attn
           else f"the runtime's default is {FLASH_ATTN}")
    return f"flash attention {mode} ({why}; replays are exact only at the same thread count)"


# model shapes (cached per GGUFInfo object; read_gguf caches those per file)


@dataclass(frozen=True)
class ModelShape:
    """What sizing needs from a GGUF file, per layer."""

    path: Path
    architecture: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ff_max: int
    n_ctx_train: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    head_k: tuple[int, ...]  # per layer: key_length, or key_length_swa on SWA layers
    head_v: tuple[int, ...]
    is_swa: tuple[bool, ...]
    n_swa: int
    is_recurrent: tuple[bool, ...]
    n_embd_r: int  # recurrent conv/shift state per layer and sequence, in f32 values
    n_embd_s: int  # recurrent SSM/WKV state per layer and sequence, in f32 values
    layer_bytes: tuple[int, ...]  # weights of each repeating layer (blk.N.*)
    input_bytes: int  # token embeddings: always on the CPU
    output_bytes: int  # output norm and head (and any other non-layer tensor)
    tied_output_bytes: int  # token_embd again, when the head is tied to it and placed on a GPU

    @property
    def weights_bytes(self) -> int:
        return sum(self.layer_bytes) + self.input_bytes + self.output_bytes


@lru_cache(maxsize=64)
def model_shape(info: GGUFInfo) -> ModelShape:
    """The sizing view of a model file (cached by the GGUFInfo object)."""
    n_layer = info.block_count
    if n_layer <= 0:
        raise EstimateError([Problem("error", f"{info.architecture}.block_count is missing or 0", file=str(info.path))])
    arch = info.architecture
    is_swa = _swa_layers(info)
    n_swa = info.sliding_window
    if arch in SWA_ARCHITECTURES and not n_swa:
        n_swa = SWA_ARCHITECTURES[arch][2]
    if not n_swa:
        is_swa = (False,) * n_layer
    recurrent = _recurrent_layers(info)
    head_k = tuple(info.key_length_swa if s else info.key_length for s in is_swa)
    head_v = tuple(info.value_length_swa if s else info.value_length for s in is_swa)
    layer_bytes = [0] * n_layer
    input_bytes = output_bytes = 0
    has_output = False
    token_embd = 0
    for t in info.tensors:
        il = t.layer
        if il is not None and il < n_layer:
            layer_bytes[il] += t.n_bytes
        elif t.name.startswith(("token_embd", "token_types", "position_embd")):
            input_bytes += t.n_bytes
            if t.name == "token_embd.weight":
                token_embd = t.n_bytes
        else:
            output_bytes += t.n_bytes
            has_output = has_output or t.name == "output.weight"
    n_ff = info.arch_key("feed_forward_length", 0)
    n_ff_max = max(n_ff) if isinstance(n_ff, list) else int(n_ff or 0)
    n_embd_r, n_embd_s = _recurrent_widths(info)
    return ModelShape(
        path=info.path,
        architecture=arch,
        n_layer=n_layer,
        n_embd=info.embedding_length,
        n_vocab=info.vocab_size,
        n_ff_max=n_ff_max,
        n_ctx_train=info.context_length,
        n_head=info.head_count or (0,) * n_layer,
        n_head_kv=info.head_count_kv or (0,) * n_layer,
        head_k=head_k,
        head_v=head_v,
        is_swa=is_swa,
        n_swa=n_swa,
        is_recurrent=recurrent,
        n_embd_r=n_embd_r,
        n_embd_s=n_embd_s,
        layer_bytes=tuple(layer_bytes),
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        tied_output_bytes=0 if has_output else token_embd,
    )


def _swa_layers(info: GGUFInfo) -> tuple[bool, ...]:
    """llama_hparams::set_swa_pattern, or the file's per-layer pattern array."""
    n = info.block_count
    pattern = info.sliding_window_pattern
    if isinstance(pattern, tuple):
        if len(pattern) != n:
            raise EstimateError([Problem("error", f"sliding_window_pattern has {len(pattern)} entries for {n} layers", file=str(info.path))])
        return pattern
    known = SWA_ARCHITECTURES.get(info.architecture)
    if known is None and pattern is None:
        return (False,) * n
    n_pattern, dense_first, _ = known or (0, False, 0)
    if pattern is not None:
        n_pattern = pattern
    if dense_first:
        return tuple(n_pattern == 0 or il % n_pattern != 0 for il in range(n))
    return tuple(n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n))


def _recurrent_layers(info: GGUFInfo) -> tuple[bool, ...]:
    n = info.block_count
    if info.architecture in RECURRENT_ARCHITECTURES:
        return (True,) * n
    if info.architecture in HYBRID_ARCHITECTURES:
        interval = info.arch_key("full_attention_interval")
        if interval:
            return tuple((il + 1) % int(interval) != 0 for il in range(n))
        return tuple(kv == 0 for kv in info.head_count_kv)
    return (False,) * n


def _recurrent_widths(info: GGUFInfo) -> tuple[int, int]:
    """llama_hparams::n_embd_r / n_embd_s for RWKV, LFM2 and Mamba-style layers."""
    n_embd = info.embedding_length
    wkv = int(info.arch_key("wkv.head_size", 0) or 0)
    if wkv:
        return int(info.arch_key("token_shift_count", 2)) * n_embd, n_embd * wkv
    l_cache = int(info.arch_key("shortconv.l_cache", 0) or 0)
    d_conv = int(info.arch_key("ssm.conv_kernel", 0) or 0)
    d_inner = int(info.arch_key("ssm.inner_size", 0) or 0)
    d_state = int(info.arch_key("ssm.state_size", 0) or 0)
    n_group = int(info.arch_key("ssm.group_count", 0) or 0)
    n_embd_r = n_embd * (l_cache - 1) if l_cache else max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    return n_embd_r, d_state * d_inner


# per-context arithmetic


@dataclass(frozen=True)
class ContextCost:
    """One llama.cpp context (one node) on one model: bytes by device."""

    n_ctx: int  # requested (0 resolved to the trained size)
    cells: int  # KV cells after llama.cpp's padding
    swa_cells: int
    n_ubatch: int
    flash_attn: bool
    kv_ram: int
    kv_vram: int
    recurrent_ram: int
    recurrent_vram: int
    compute_ram: int
    compute_vram: int
    output_ram: int

    @property
    def kv_bytes(self) -> int:
        return self.kv_ram + self.kv_vram + self.recurrent_ram + self.recurrent_vram

    @property
    def compute_bytes(self) -> int:
        return self.compute_ram + self.compute_vram

    @property
    def ram_bytes(self) -> int:
        return self.kv_ram + self.recurrent_ram + self.compute_ram + self.output_ram

    @property
    def vram_bytes(self) -> int:
        return self.kv_vram + self.recurrent_vram + self.compute_vram


def padded_context(n_ctx: int) -> int:
    """KV cells llama.cpp allocates for a requested context (llama-context.cpp)."""
    return -(-n_ctx // CTX_PAD) * CTX_PAD


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def gpu_layer_start(shape: ModelShape, settings: Settings) -> int:
    """First layer index on the GPU; index n_layer is the output layer (llama-model.cpp load_tensors)."""
    if settings.gpu_memory <= 0:
        return shape.n_layer + 1
    n_gpu = shape.n_layer + 1 if settings.gpu_layers < 0 else settings.gpu_layers
    return max(shape.n_layer + 1 - n_gpu, 0)


@lru_cache(maxsize=4096)
def context_cost(shape: ModelShape, n_ctx: int, settings: Settings) -> ContextCost:
    """KV cache, recurrent state, compute and output buffers of one context."""
    n_ctx = n_ctx or shape.n_ctx_train
    if n_ctx <= 0:
        raise EstimateError([Problem("error", "the model states no context length; set the node's context size", file=str(shape.path))])
    fa = settings.effective_flash_attn
    cells = padded_context(n_ctx)
    swa_cells = cells if settings.swa_full else min(cells, padded_context(shape.n_swa + min(n_ctx, settings.n_batch, settings.n_ubatch)))
    start = gpu_layer_start(shape, settings)
    kv_type = settings.kv_type
    v_trans = not fa
    attn_layers = [il for il in range(shape.n_layer) if not shape.is_recurrent[il] and shape.n_head_kv[il] > 0]
    v_max = max((shape.head_v[il] * shape.n_head_kv[il] for il in attn_layers), default=0)
    kv = {False: 0, True: 0}  # on GPU?
    for il in attn_layers:
        on_gpu = settings.offload_kqv and il >= start
        align = GPU_ALIGNMENT if on_gpu else CPU_ALIGNMENT
        n_cells = swa_cells if shape.is_swa[il] else cells
        k_width = shape.head_k[il] * shape.n_head_kv[il]
        v_width = v_max if v_trans else shape.head_v[il] * shape.n_head_kv[il]
        try:
            k = row_bytes(_ggml_type(kv_type), k_width) * n_cells
            v = row_bytes(_ggml_type(kv_type), v_width) * n_cells
        except ValueError:
            raise EstimateError([Problem(
                "error",
                f"a {kv_type} KV cache needs rows that are whole blocks; layer {il} has {k_width}/{v_width} values per row - use f16",
                file=str(shape.path), field="kv_type",
            )]) from None
        kv[on_gpu] += _pad(k, align) + _pad(v, align)
    rs = {False: 0, True: 0}
    for il in range(shape.n_layer):
        if shape.is_recurrent[il]:
            on_gpu = settings.offload_kqv and il >= start
            align = GPU_ALIGNMENT if on_gpu else CPU_ALIGNMENT
            rs[on_gpu] += _pad(shape.n_embd_r * F32, align) + _pad(shape.n_embd_s * F32, align)

    compute_ram, compute_vram = _compute_buffers(shape, settings, n_ctx, cells, swa_cells, attn_layers, start)
    n_ubatch = min(n_ctx, settings.n_batch, settings.n_ubatch)
    # llama_context::output_reserve: logits for one output per sequence, in host memory
    output = shape.n_vocab * F32
    return ContextCost(
        n_ctx=n_ctx, cells=cells, swa_cells=swa_cells, n_ubatch=n_ubatch, flash_attn=fa,
        kv_ram=kv[False], kv_vram=kv[True], recurrent_ram=rs[False], recurrent_vram=rs[True],
        compute_ram=compute_ram, compute_vram=compute_vram, output_ram=output,
    )


def _ggml_type(kv_type: str) -> str:
    return kv_type.upper()


def _compute_buffers(
    shape: ModelShape, settings: Settings, n_ctx: int, cells: int, swa_cells: int, attn_layers: list[int], start: int
) -> tuple[int, int]:
    """Peak of ggml's graph allocator for the worst-case batch (llama_context::sched_reserve).

    The reserve graph runs ``n_ubatch`` tokens over the whole KV cache, with
    ``min(n_ubatch, n_outputs_max)`` of them outputs. Three places compete for the
    peak: the logits at the head, the attention scores of the widest layer, and the
    feed-forward activations; the masks are graph inputs, live at every peak.
    """
    fa = settings.effective_flash_attn
    # n_batch is clamped to the requested (unpadded) context before n_ctx is padded
    n_ub = min(n_ctx, settings.n_batch, settings.n_ubatch)
    n_out = min(n_ub, settings.n_outputs_max) if settings.n_outputs_max else n_ub
    act = shape.n_embd * n_ub * F32  # one hidden-state activation
    head = shape.n_vocab * n_out * F32 + 3 * act
    mask_elt = 2 if fa else F32  # flash attention takes an f16 mask
    has_full = any(not shape.is_swa[il] for il in attn_layers)
    has_swa = any(shape.is_swa[il] for il in attn_layers)
    masks = (cells * n_ub * mask_elt if has_full else 0) + (swa_cells * n_ub * mask_elt if has_swa else 0)
    if not attn_layers:
        attention = 0
    elif fa:
        attention = masks + 6 * act
    else:
        scores = max((swa_cells if shape.is_swa[il] else cells) * n_ub * shape.n_head[il] * F32 for il in attn_layers)
        k_width = max(shape.head_k[il] * shape.n_head_kv[il] for il in attn_layers)
        attention = scores + masks + (5 * shape.n_embd + 2 * k_width) * n_ub * F32
    # gate, up and their product, three hidden states; an f16 KV cache costs one more
    # (measured on four llama-shaped models; see docs/sizing.md)
    ffn = 3 * shape.n_ff_max * n_ub * F32 + (4 if settings.kv_type == "f16" else 3) * act + masks
    layers = max(attention, ffn)
    if start > shape.n_layer:  # everything on the CPU
        return max(head, layers), 0
    # output layer on the GPU; repeating layers split at `start`
    gpu = max(head, layers if start < shape.n_layer else 0)
    cpu = act + (layers if start > 0 else 0)  # the token embeddings are looked up on the CPU
    return cpu, gpu


# weights


@dataclass(frozen=True)
class WeightsCost:
    ram: int
    vram: int

    @property
    def total(self) -> int:
        return self.ram + self.vram


@lru_cache(maxsize=256)
def weights_cost(shape: ModelShape, settings: Settings) -> WeightsCost:
    """Model buffers by device: layers from ``start`` (and the output layer) on the GPU."""
    start = gpu_layer_start(shape, settings)
    ram = shape.input_bytes
    vram = 0
    for il, b in enumerate(shape.layer_bytes):
        if il >= start:
            vram += b
        else:
            ram += b
    if start <= shape.n_layer:
        # a tied head is token_embd loaded a second time, on the output layer's device
        vram += shape.output_bytes + shape.tied_output_bytes
    else:
        ram += shape.output_bytes
    return WeightsCost(ram=ram, vram=vram)


Verdict = Literal["fits", "tight", "does not fit", "no GPU"]


def verdict(settings: Settings, vram_bytes: int) -> Verdict:
    if settings.gpu_memory <= 0:
        return "no GPU"
    headroom = settings.gpu_memory - vram_bytes
    if headroom < 0:
        return "does not fit"
    if headroom < settings.gpu_memory * settings.reserve_fraction:
        return "tight"
    return "fits"


def gpu_memory_bytes(gb: float) -> int:
    """A GPU size as sold (8 GB) in bytes; GPU makers' "GB" are GiB of VRAM."""
    if gb < 0 or math.isnan(gb):
        raise EstimateError([Problem("error", f"GPU memory must be a positive number of GB, not {gb}", field="gpu_memory")])
    return int(gb * GIB)
