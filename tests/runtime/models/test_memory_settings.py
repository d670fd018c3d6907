"""The estimator's settings follow the runtime's: flash attention as the llama backend creates contexts,
what a designer is told it assumed, and the cache snapshots' RAM budget from one place."""

from __future__ import annotations

import pytest

from runtime.models.context_settings import FLASH_ATTN, SNAPSHOT_BUDGET_MIB, context_params, kv_type_refusal
from runtime.models.memory import MIB, EstimateError, Settings, flash_attn_assumed


def test_flash_attention_is_assumed_off_as_the_runtime_creates_contexts() -> None:
    assert FLASH_ATTN == "off"
    settings = Settings()
    assert settings.flash_attn == context_params(2048).flash_attn and not settings.effective_flash_attn
    assert flash_attn_assumed(settings) == \
        "flash attention off (the runtime's default: replays are exact at any thread count)"


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"flash_attn": "on"}, "flash attention on (the runtime's default is off; replays are exact only at the same thread count)"),
    ({"flash_attn": "auto"}, "flash attention auto, which llama.cpp turns on for the CPU, CUDA, Metal and Vulkan"),
    ({"kv_type": "q8_0", "flash_attn": "on"}, "flash attention on (a q8_0 KV cache needs it;"),
    ({"kv_type": "q4_0", "flash_attn": "auto"}, "(a q4_0 KV cache needs it; replays are exact only at the same thread count)"),
])
def test_the_assumption_says_which_setting_and_why(kwargs: dict[str, str], said: str) -> None:
    settings = Settings(**kwargs)
    assert settings.effective_flash_attn
    assert said in flash_attn_assumed(settings)


def test_the_runtime_and_the_estimator_refuse_the_same_kv_types() -> None:
    for kv_type in ("f16", "q8_0", "q4_0"):
        for mode in ("off", "on", "auto"):
            refused = bool(kv_type_refusal(kv_type, mode))
            assert refused == (kv_type != "f16" and mode == "off")
            for make in (context_params, Settings):
                try:
                    make(**({"n_ctx": 512} if make is context_params else {}), kv_type=kv_type, flash_attn=mode)
                except (ValueError, EstimateError) as exc:
                    assert refused, exc
                else:
                    assert not refused


def test_the_snapshot_budget_is_the_llama_backends() -> None:
    assert Settings().snapshot_budget == SNAPSHOT_BUDGET_MIB * MIB == 256 * MIB
    llama = pytest.importorskip("runtime.backends.llama")
    backend = llama.LlamaBackend()
    try:
        assert backend.snapshots.budget == Settings().snapshot_budget
    finally:
        backend.close()
