"""The parameters of the llama.cpp context the llama backend creates for each node.

One place for them: ``runtime/backends/llama.py`` creates its contexts from
:func:`context_params`, and ``runtime/models/memory.py`` takes its defaults from the
same constants, so the estimate describes the contexts the runtime really makes.
Plain Python, so the estimator (and the editor's VRAM panel) can import it without
loading llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KVType = Literal["f16", "q8_0", "q4_0"]
KV_TYPES: tuple[str, ...] = ("f16", "q8_0", "q4_0")
FlashAttention = Literal["auto", "on", "off"]
FLASH_ATTN_MODES: tuple[str, ...] = ("auto", "on", "off")

N_BATCH = 512  # tokens per llama_decode call while reading a prompt
N_SEQ_MAX = 1  # one conversation per context
# Only the last position's logits are ever read (sampling the next token). Reserving one output
# row instead of n_batch shrinks the compute buffer ~7x for a 49k-token vocabulary (SmolLM2: 102 -> 15 MiB).
N_OUTPUTS_MAX = 1
KV_TYPE: KVType = "f16"  # llama_context_default_params()
# Off, unlike llama.cpp's "auto" (which turns it on for CPU, CUDA, Metal and Vulkan): on the CPU,
# flash attention splits one query over the cached cells into one part per thread, so the thread
# count changes a token's numbers, and a conversation would say other things at 1 thread than at 2.
# Measured here (SmolLM2-135M, 2 cores): off is ~18 % slower to read a prompt and ~25 % faster per
# generated token, so a turn costs about the same. Quantized V caches need it on.
FLASH_ATTN: FlashAttention = "off"
# RAM all nodes' cache snapshots may take together, per backend (``TurnSnapshots`` in the llama
# backend). Snapshots are taken only before a rewind, a trim or a new summary cuts cached cells;
# the estimator shows the budget as a RAM line of its own.
SNAPSHOT_BUDGET_MIB = 256


@dataclass(frozen=True)
class ContextParams:
    """What a node's llama.cpp context is created with (besides threads)."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_outputs_max: int
    kv_type: KVType
    flash_attn: FlashAttention


def kv_type_refusal(kv_type: str, flash_attn: str) -> str:
    """Why llama.cpp would refuse this KV cache type with this flash attention mode ("" when it would not).

    With flash attention "off" (``LLAMA_FLASH_ATTN_TYPE_DISABLED``) llama_init_from_model refuses a
    quantized V cache ("quantized V cache requires flash_attn to be enabled"); with "auto" it turns
    flash attention on for it ("enabling flash_attn since it is required for quantized V cache").
    """
    if kv_type != "f16" and flash_attn == "off":
        return (f"a {kv_type} KV cache needs flash attention (llama.cpp quantizes V only with it): "
                "set flash attention to on or auto, or use an f16 KV cache")
    return ""


def context_params(
    n_ctx: int, n_batch: int = N_BATCH, *, kv_type: KVType = KV_TYPE, flash_attn: FlashAttention = FLASH_ATTN
) -> ContextParams:
    """The parameters of a node context holding ``n_ctx`` tokens.

    The batch is whole-prompt-sized up to ``n_batch`` and one micro-batch is the whole
    batch (``n_ubatch = n_batch``), so a prompt chunk is one graph evaluation.
    """
    if kv_type not in KV_TYPES:
        raise ValueError(f"KV cache type must be one of {', '.join(KV_TYPES)}, not {kv_type!r}")
    if flash_attn not in FLASH_ATTN_MODES:
        raise ValueError(f"flash attention must be one of {', '.join(FLASH_ATTN_MODES)}, not {flash_attn!r}")
    refusal = kv_type_refusal(kv_type, flash_attn)
    if refusal:
        raise ValueError(refusal)
    batch = max(min(n_ctx, n_batch), 1)
    return ContextParams(
        n_ctx=n_ctx,
        n_batch=batch,
        n_ubatch=batch,
        n_seq_max=N_SEQ_MAX,
        n_outputs_max=N_OUTPUTS_MAX,
        kv_type=kv_type,
        flash_attn=flash_attn,
    )
