"""Tiny GGUF model files written with the ``gguf`` package, for sizing tests.

Weights are small f32/f16 arrays; only shapes and metadata matter to the reader
and the estimator. Shapes are given in numpy order (last ggml dimension first).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np


def write_tiny_gguf(
    path: Path,
    *,
    arch: str = "llama",
    n_layer: int = 4,
    n_embd: int = 64,
    n_ff: int = 128,
    n_vocab: int = 96,
    head_count: int | Sequence[int] = 4,
    head_count_kv: int | Sequence[int] | None = 2,
    key_length: int | None = None,
    value_length: int | None = None,
    context_length: int = 4096,
    sliding_window: int | None = None,
    sliding_window_pattern: int | Sequence[bool] | None = None,
    tied_output: bool = False,
    ssm: dict[str, int] | None = None,
    file_type: int | None = 0,
) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    if file_type is not None:
        w.add_file_type(file_type)
    w.add_block_count(n_layer)
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(head_count if isinstance(head_count, int) else list(head_count))
    if head_count_kv is not None:
        w.add_head_count_kv(head_count_kv if isinstance(head_count_kv, int) else list(head_count_kv))
    if key_length is not None:
        w.add_key_length(key_length)
    if value_length is not None:
        w.add_value_length(value_length)
    if sliding_window is not None:
        w.add_sliding_window(sliding_window)
    if sliding_window_pattern is not None:
        w.add_sliding_window_pattern(
            sliding_window_pattern if isinstance(sliding_window_pattern, int) else list(sliding_window_pattern)
        )
    if ssm:
        w.add_ssm_conv_kernel(ssm["conv_kernel"])
        w.add_ssm_inner_size(ssm["inner_size"])
        w.add_ssm_state_size(ssm["state_size"])
        w.add_ssm_time_step_rank(ssm.get("time_step_rank", 4))
        w.add_uint32(f"{arch}.ssm.group_count", ssm.get("group_count", 0))
    w.add_vocab_size(n_vocab)
    w.add_token_list([f"t{i}".encode() for i in range(n_vocab)])
    w.add_string("tokenizer.chat_template", "{{ messages }}")

    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, n_embd), dtype=np.float32))
    heads = [head_count] * n_layer if isinstance(head_count, int) else list(head_count)
    kv_heads = heads if head_count_kv is None else ([head_count_kv] * n_layer if isinstance(head_count_kv, int) else list(head_count_kv))
    for il in range(n_layer):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{il}.ffn_up.weight", np.zeros((n_ff, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.ffn_down.weight", np.zeros((n_embd, n_ff), dtype=np.float16))
        if not heads[il]:
            continue  # a recurrent layer: no attention weights
        head_k = key_length or n_embd // heads[0]
        head_v = value_length or n_embd // heads[0]
        w.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((heads[il] * head_k, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_k.weight", np.zeros((max(kv_heads[il], 1) * head_k, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_v.weight", np.zeros((max(kv_heads[il], 1) * head_v, n_embd), dtype=np.float16))
        w.add_tensor(f"blk.{il}.attn_output.weight", np.zeros((n_embd, heads[il] * head_v), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    if not tied_output:
        w.add_tensor("output.weight", np.zeros((n_vocab, n_embd), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
