"""runtime.models.memory on tiny GGUFs: KV cache, weights split, compute buffers, what-ifs and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.asset.estimate import estimate_asset, what_if_context, what_if_shared_model
from runtime.asset.file import save_asset
from runtime.asset.model import Asset, new_node
from runtime.cli import main
from runtime.models.context_settings import FLASH_ATTN, context_params
from runtime.models.gguf import read_gguf
from runtime.models.memory import (
    GIB,
    MIB,
    EstimateError,
    Settings,
    context_cost,
    gpu_memory_bytes,
    model_shape,
    padded_context,
    weights_cost,
)
from tests.runtime.tiny_gguf import write_tiny_gguf

CPU = Settings(gpu_memory=0)  # flash attention off, as the runtime creates contexts
CPU_FA = Settings(gpu_memory=0, flash_attn="on")


def shape_of(path: Path):
    return model_shape(read_gguf(path))


def test_context_is_padded_to_256_cells() -> None:
    assert [padded_context(n) for n in (1, 256, 257, 1000, 2048, 4097)] == [256, 256, 512, 1024, 2048, 4352]


def test_kv_cache_with_per_layer_kv_heads(tmp_path: Path) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "gqa.gguf", head_count=[4, 4, 8, 8], head_count_kv=[1, 2, 2, 4], key_length=16, value_length=32))
    cost = context_cost(shape, 1000, CPU_FA)
    assert cost.cells == 1024
    # f16: 2 bytes per value; K rows 16 x kv_heads, V rows 32 x kv_heads; flash attention keeps V untransposed
    expected = sum(1024 * 2 * (16 * kv + 32 * kv) for kv in (1, 2, 2, 4))
    assert cost.kv_bytes == expected
    assert cost.kv_vram == 0


def test_v_cache_without_flash_attention_uses_the_widest_layer(tmp_path: Path) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "gqa.gguf", head_count=[4, 4, 8, 8], head_count_kv=[1, 2, 2, 4], key_length=16))
    cost = context_cost(shape, 256, CPU)
    assert not cost.flash_attn
    k = sum(256 * 2 * 16 * kv for kv in (1, 2, 2, 4))
    v = 4 * 256 * 2 * 16 * 4  # the transposed V cache is padded to the largest n_embd_v_gqa (llama-kv-cache.cpp)
    assert cost.kv_bytes == k + v


@pytest.mark.parametrize(("kv_type", "block_bytes"), [("q8_0", 34), ("q4_0", 18)])
@pytest.mark.parametrize("flash_attn", ["on", "auto"])
def test_quantized_kv_cache_rows_by_block(tmp_path: Path, kv_type: str, block_bytes: int, flash_attn: str) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "q.gguf", head_count=4, head_count_kv=2))  # 16 x 2 = 32 values a row
    cost = context_cost(shape, 512, Settings(gpu_memory=0, kv_type=kv_type, flash_attn=flash_attn))
    assert cost.flash_attn  # "auto" turns it on for a quantized V cache, as llama.cpp does
    assert cost.kv_bytes == 4 * 2 * 512 * block_bytes


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_quantized_kv_cache_without_flash_attention_is_refused(kv_type: str) -> None:
    # llama.cpp refuses such a context ("quantized V cache requires flash_attn to be enabled"), so does the estimate
    with pytest.raises(EstimateError) as exc:
        Settings(kv_type=kv_type)  # flash attention off: the runtime's default
    [problem] = exc.value.problems
    assert problem.field == "kv_type" and kv_type in problem.message and "flash attention" in problem.message
    with pytest.raises(EstimateError):
        Settings(kv_type=kv_type, flash_attn="off")


def test_quantized_kv_cache_needs_whole_blocks(tmp_path: Path) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "odd.gguf", n_embd=48, head_count=4, head_count_kv=1))  # 12 values a row
    with pytest.raises(EstimateError, match="use f16"):
        context_cost(shape, 512, Settings(gpu_memory=0, kv_type="q8_0", flash_attn="on"))


def test_sliding_window_layers_gemma2(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "g2.gguf", arch="gemma2", n_layer=4, sliding_window=300, head_count=4, head_count_kv=2)
    shape = shape_of(path)
    assert shape.is_swa == (True, False, True, False)  # gemma2: every other layer, from llama.cpp's pattern 2
    full = context_cost(shape, 4096, CPU)  # llama.cpp default: full-size SWA cache
    assert full.swa_cells == full.cells == 4096
    small = context_cost(shape, 4096, Settings(gpu_memory=0, swa_full=False))
    # SWA cache: GGML_PAD(min(size, n_swa + n_ubatch), 256) = pad(300 + 512) = 1024
    assert small.swa_cells == 1024
    row = 2 * 16 * 2  # f16, 16-value heads, 2 kv heads
    assert small.kv_bytes == 2 * (2 * 4096 * row) + 2 * (2 * 1024 * row)
    assert small.kv_bytes < full.kv_bytes


def test_sliding_window_pattern_from_the_file(tmp_path: Path) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "g3.gguf", arch="gemma3", n_layer=6, sliding_window=128, sliding_window_pattern=3))
    assert shape.is_swa == (True, True, False, True, True, False)
    arr = shape_of(write_tiny_gguf(tmp_path / "arr.gguf", arch="gemma3", n_layer=4, sliding_window=128,
                                   sliding_window_pattern=[False, True, True, False]))
    assert arr.is_swa == (False, True, True, False)
    plain = shape_of(write_tiny_gguf(tmp_path / "plain.gguf", arch="gemma3", n_layer=4))
    assert plain.is_swa == (False,) * 4  # gemma3 without sliding_window has no SWA layers


def test_recurrent_state_mamba(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "mamba.gguf", arch="mamba", n_layer=3, head_count=0, head_count_kv=0,
                           ssm={"conv_kernel": 4, "inner_size": 128, "state_size": 16})
    cost = context_cost(shape_of(path), 2048, CPU)
    # n_embd_r = (d_conv - 1) * d_inner, n_embd_s = d_state * d_inner, f32, one sequence
    assert cost.kv_ram == 0
    assert cost.recurrent_ram == 3 * ((3 * 128) * 4 + (16 * 128) * 4)
    assert cost.kv_bytes == cost.recurrent_ram


def test_weights_split_by_offloaded_layers(tmp_path: Path) -> None:
    info = read_gguf(write_tiny_gguf(tmp_path / "w.gguf", n_layer=4))
    shape = model_shape(info)
    size = {t.name: t.n_bytes for t in info.tensors}
    layer = [sum(b for n, b in size.items() if n.startswith(f"blk.{i}.")) for i in range(4)]
    embd, head = size["token_embd.weight"], size["output.weight"] + size["output_norm.weight"]
    gpu = Settings(gpu_memory=8 * GIB)
    assert weights_cost(shape, Settings(gpu_memory=8 * GIB, gpu_layers=0)).vram == 0
    one = weights_cost(shape, Settings(gpu_memory=8 * GIB, gpu_layers=1))  # only the output layer
    assert (one.ram, one.vram) == (embd + sum(layer), head)
    three = weights_cost(shape, Settings(gpu_memory=8 * GIB, gpu_layers=3))  # output + the last two layers
    assert (three.ram, three.vram) == (embd + layer[0] + layer[1], head + layer[2] + layer[3])
    everything = weights_cost(shape, gpu)
    assert (everything.ram, everything.vram) == (embd, head + sum(layer))  # token embeddings stay on the CPU
    assert weights_cost(shape, Settings(gpu_memory=8 * GIB, gpu_layers=99)) == everything
    assert weights_cost(shape, CPU).ram == info.weights_bytes  # no GPU: everything in RAM


def test_tied_output_is_loaded_again_on_the_gpu(tmp_path: Path) -> None:
    info = read_gguf(write_tiny_gguf(tmp_path / "tied.gguf", tied_output=True))
    shape = model_shape(info)
    embd = info.tensor("token_embd.weight").n_bytes
    w = weights_cost(shape, Settings(gpu_memory=8 * GIB))
    assert w.total == info.weights_bytes + embd
    assert weights_cost(shape, CPU).total == info.weights_bytes


def test_kv_and_compute_follow_the_layer_devices(tmp_path: Path) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "d.gguf", n_layer=4))
    all_gpu = context_cost(shape, 512, Settings(gpu_memory=8 * GIB))
    assert all_gpu.kv_ram == 0 and all_gpu.kv_vram > 0
    assert all_gpu.compute_vram > all_gpu.compute_ram > 0
    half = context_cost(shape, 512, Settings(gpu_memory=8 * GIB, gpu_layers=3))
    assert half.kv_vram == half.kv_ram == all_gpu.kv_vram // 2
    cpu = context_cost(shape, 512, CPU)
    assert cpu.vram_bytes == 0 and cpu.compute_ram > 0
    assert cpu.output_ram == 96 * 4  # one row of f32 logits


def test_compute_buffer_grows_with_context_only_without_flash_attention(tmp_path: Path) -> None:
    shape = shape_of(write_tiny_gguf(tmp_path / "c.gguf", n_vocab=96))
    no_fa = [context_cost(shape, n, CPU).compute_bytes for n in (2048, 8192)]
    # the attention scores: n_kv x n_ubatch x n_head f32
    assert no_fa[1] - no_fa[0] >= (8192 - 2048) * 512 * 4 * 4
    fa = [context_cost(shape, n, CPU_FA).compute_bytes for n in (2048, 8192)]
    assert fa[1] - fa[0] == (8192 - 2048) * 512 * 2  # only the f16 mask grows


def test_defaults_are_the_contexts_the_llama_backend_creates(tmp_path: Path) -> None:
    # the backend creates every node context from context_params(); the default estimate must size exactly that
    assert Settings.for_context(context_params(4096), gpu_memory=Settings().gpu_memory) == Settings()
    shape = shape_of(write_tiny_gguf(tmp_path / "d.gguf"))
    for n_ctx in (300, 512, 4096):
        assert context_cost(shape, n_ctx, Settings.for_context(context_params(n_ctx), gpu_memory=0)) == context_cost(shape, n_ctx, CPU)
    assert Settings().n_outputs_max == context_params(512).n_outputs_max == 1
    assert Settings().flash_attn == context_params(512).flash_attn == FLASH_ATTN == "off"
    assert not context_cost(shape, 512, Settings()).flash_attn
    for mode in ("on", "auto"):  # a backend created with another mode is sized with it
        params = context_params(2048, flash_attn=mode)
        assert context_cost(shape, 2048, Settings.for_context(params, gpu_memory=0)) == context_cost(shape, 2048, CPU_FA)


def test_logits_head_reserves_only_the_outputs_read(tmp_path: Path) -> None:
    # a large vocabulary: with every token an output, the logits dominate the compute buffer
    shape = shape_of(write_tiny_gguf(tmp_path / "v.gguf", n_vocab=50_000))
    one = context_cost(shape, 512, CPU)
    every = context_cost(shape, 512, Settings(gpu_memory=0, n_outputs_max=0))
    assert every.compute_bytes >= 50_000 * 512 * 4
    assert one.compute_bytes < 50_000 * 512 * 4 / 10
    assert one.output_ram == every.output_ram == 50_000 * 4
    with pytest.raises(EstimateError, match="n_outputs_max"):
        Settings(n_outputs_max=-1)


def _asset(tmp_path: Path, model: Path, summarizer_model: str = "") -> Asset:
    reply = new_node("GenerateAndSpeak", "reply", context_size=2048, default_exit="summarize")
    summarize = new_node("Summarize", "summarize", context_size=1024, model_name=summarizer_model)
    router = new_node("ClassifyIntent", "route", context_size=0)
    return Asset(name="t", default_model=model.name, start_node="reply", nodes=[reply, summarize, router])


def _resolver(folder: Path):
    def resolve(name: str) -> Path:
        p = folder / name
        if not p.is_file():
            raise FileNotFoundError(f"no model {name}")
        return p
    return resolve


def test_asset_counts_shared_weights_once(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "a.gguf", context_length=4096)
    est = estimate_asset(_asset(tmp_path, model), _resolver(tmp_path), Settings(gpu_memory=8 * GIB))
    assert [n.node_id for n in est.nodes] == ["reply", "summarize", "route"]
    assert len(est.models) == 1 and est.models[0].node_ids == ("reply", "summarize", "route")
    assert est.node("route").context.n_ctx == 4096  # 0 uses the model's trained context
    shape = shape_of(model)
    assert est.vram_bytes == weights_cost(shape, est.settings).vram + sum(n.vram_bytes for n in est.nodes)
    assert est.ram_bytes == weights_cost(shape, est.settings).ram + sum(n.ram_bytes for n in est.nodes)
    assert not est.problems


def test_what_if_summarizer_shared_the_default_model(tmp_path: Path) -> None:
    default = write_tiny_gguf(tmp_path / "a.gguf")
    write_tiny_gguf(tmp_path / "b.gguf", n_layer=6)
    asset = _asset(tmp_path, default, summarizer_model="b.gguf")
    settings = Settings(gpu_memory=8 * GIB)
    before = estimate_asset(asset, _resolver(tmp_path), settings)
    assert len(before.models) == 2
    after = what_if_shared_model(asset, _resolver(tmp_path), "summarize", settings)
    assert len(after.models) == 1
    saved = weights_cost(shape_of(tmp_path / "b.gguf"), settings).vram
    kv_change = before.node("summarize").vram_bytes - after.node("summarize").vram_bytes
    assert before.vram_bytes - after.vram_bytes == saved + kv_change


def test_what_if_context_changes_only_that_node(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "a.gguf")
    asset = _asset(tmp_path, model)
    base = estimate_asset(asset, _resolver(tmp_path), CPU)
    bigger = what_if_context(asset, _resolver(tmp_path), "summarize", 4096, CPU)
    assert bigger.node("summarize").kv_bytes == 4 * base.node("summarize").kv_bytes
    assert bigger.node("reply") == base.node("reply")
    with pytest.raises(KeyError):
        what_if_context(asset, _resolver(tmp_path), "nope", 10, CPU)


def test_verdicts_and_agents_that_fit(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "a.gguf")
    asset = _asset(tmp_path, model)
    est = estimate_asset(asset, _resolver(tmp_path), Settings(gpu_memory=6 * GIB))
    assert est.verdict == "fits" and est.headroom == 6 * GIB - est.vram_bytes
    expected = int((6 * GIB * 0.95 - est.weights_vram) // est.agent_vram)
    assert est.agents_that_fit() == expected
    assert est.agents_that_fit(12 * GIB) > expected
    snug = Settings(gpu_memory=est.vram_bytes + 10)
    assert estimate_asset(asset, _resolver(tmp_path), snug).verdict == "tight"
    small = Settings(gpu_memory=est.vram_bytes - 1)
    assert estimate_asset(asset, _resolver(tmp_path), small).verdict == "does not fit"
    assert estimate_asset(asset, _resolver(tmp_path), CPU).verdict == "no GPU"
    assert gpu_memory_bytes(8) == 8 * GIB


def test_unreadable_model_is_a_problem_naming_the_node(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "a.gguf")
    (tmp_path / "broken.gguf").write_bytes(b"not a model at all, sorry")
    asset = _asset(tmp_path, model, summarizer_model="broken.gguf")
    est = estimate_asset(asset, _resolver(tmp_path), CPU, asset_file="agent.json")
    assert est.node("summarize").context is None
    assert est.node("reply").context is not None
    [problem] = est.problems
    assert (problem.node_id, problem.field) == ("summarize", "model_name")
    assert "broken.gguf" in problem.file and "not a GGUF" in problem.message
    missing = estimate_asset(_asset(tmp_path, model, "gone.gguf"), _resolver(tmp_path), CPU, asset_file="agent.json")
    assert missing.problems[0].file == "agent.json" and "no model gone.gguf" in missing.problems[0].message


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(EstimateError) as exc:
        Settings(kv_type="q5_1")
    assert exc.value.problems[0].field == "kv_type"
    for wrong in (True, "yes"):  # the mode, not a bool: off, on or auto
        with pytest.raises(EstimateError) as exc:
            Settings(flash_attn=wrong)  # type: ignore[arg-type]
        assert exc.value.problems[0].field == "flash_attn" and "auto, on, off" in exc.value.problems[0].message
    with pytest.raises(EstimateError) as exc:
        Settings(snapshot_budget=-1)
    assert exc.value.problems[0].field == "snapshot_budget"


def test_cli_json_and_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_tiny_gguf(tmp_path / "a.gguf")
    (tmp_path / "agents").mkdir()
    asset_path = tmp_path / "agents" / "agent.json"
    save_asset(_asset(tmp_path, model), asset_path)
    assert main(["estimate", str(asset_path), "--models-dir", str(tmp_path), "--json", "--gpu-memory", "12",
                 "--kv-type", "q8_0", "--flash-attn", "on", "--context", "reply=1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"ram_bytes", "vram_bytes", "verdict", "headroom_bytes"} <= set(out["totals"])
    reply = out["nodes"][0]
    assert reply["id"] == "reply" and reply["n_ctx"] == 1000 and reply["kv_cells"] == 1024
    assert reply["kv_bytes"] > 0 and reply["compute_bytes"] > 0
    assert set(out["models"][0]["weights_bytes"]) == {"cpu", "gpu", "total"}
    assert out["settings"]["kv_type"] == "q8_0" and out["settings"]["gpu_memory_bytes"] == 12 * GIB
    assert out["settings"]["flash_attn"] is True and out["settings"]["flash_attn_setting"] == "on"
    assert out["totals"]["snapshot_ram_bytes"] == out["settings"]["snapshot_budget_bytes"] == 256 * MIB
    assert main(["estimate", str(asset_path), "--model", str(model), "--gpu-layers", "0"]) == 0
    table = capsys.readouterr().out
    assert "reply" in table and "summarize" in table and "total" in table and "GPU 8 GB: fits" in table
    assert "flash attention off (the runtime's default: replays are exact at any thread count)" in table
    assert "cache snapshots: up to 256 MiB of RAM on top of the total" in table
    assert main(["estimate", str(asset_path), "--models-dir", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "reply.default_model" in err and "not found" in err
    assert main(["estimate", str(asset_path), "--context", "ghost=5", "--models-dir", str(tmp_path)]) == 2
    assert "ghost" in capsys.readouterr().err
