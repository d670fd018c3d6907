"""What the AMX guard and a portable build cost: prompt reading and generation on the sample model,
tokens per second, for each way llama.cpp can run here, side by side in one run (issue 31).

- ``native``: the llama-cpp-python the README installs (compiled for this machine's CPU), with
  llama.cpp's extra weight buffers (repacked weights; AMX where the CPU has it), as it runs wherever
  the guard allows;
- ``native, guard``: the same build with the extra buffers off, as it runs where the guard is on
  (a CPU whose AMX path crashes);
- ``portable``: llama-cpp-python built with ``-DGGML_NATIVE=OFF`` (AVX2 and FMA, no AVX-512 or
  AMX), as the frozen app ships it.

Each measurement runs in a process of its own (the portable build is another copy of the library),
the configurations taking turns round after round so that a drift of the machine's speed hits them
all alike. A round reads a 512-token prompt in the runtime's 512-token batches and then generates 64
tokens one at a time, each three times; the median of the rounds is reported, with the load average.
Two models: the sample model (Q4_1, which llama.cpp's CPU backend does not repack) and the same model
requantized to Q4_0 (which it repacks for AVX2 and AVX-512), so the extra buffers' worth shows.

    python bench/bench_llama_builds.py              # ~2 min once built: bench/results/llama_builds.json
    python bench/bench_llama_builds.py --rounds 2   # quicker

The portable build is made the first time (``pip install --target``, about as long as the README's
install) in ``~/.cache/parley-studio/llama-cpp-python-VERSION-portable``; ``--portable DIR`` names
another.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from conversation import ROOT, sample_model, write_results

PROMPT_TOKENS = 512
GENERATED_TOKENS = 64
REPEATS = 3
CONFIGURATIONS = {  # name: (uses the portable build, extra weight buffers)
    "native": (False, True),
    "native, guard": (False, False),
    "portable": (True, True),
}


def portable_dir(version: str) -> Path:
    return Path.home() / ".cache" / "parley-studio" / f"llama-cpp-python-{version}-portable"


def build_portable(target: Path, version: str) -> None:
    print(f"building a portable llama-cpp-python {version} into {target} (once; as long as the first install)",
          flush=True)
    partial = target.with_name(target.name + ".partial")
    env = dict(os.environ, CMAKE_ARGS="-DGGML_NATIVE=OFF")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-cache-dir",
                    "--target", str(partial), f"llama-cpp-python=={version}"], check=True, env=env)
    partial.rename(target)


def requantized(model: str, folder: Path) -> str:
    """The sample model requantized to Q4_0 (once, in ``folder``)."""
    import ctypes

    import llama_cpp

    from runtime.backends.llama import install_log_forwarding

    target = folder / (Path(model).stem.rsplit(".", 1)[0] + ".Q4_0.gguf")
    if not target.is_file():
        install_log_forwarding()  # llama.cpp's per-tensor lines go to the (quiet) Python logger
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
        params.allow_requantize = True
        folder.mkdir(parents=True, exist_ok=True)
        if llama_cpp.llama_model_quantize(model.encode(), str(target).encode(), ctypes.byref(params)) != 0:
            raise SystemExit(f"could not requantize {model} to Q4_0")
    return str(target)


def measure(model: str, extra_buffers: bool) -> dict:
    """In the child: tokens per second reading a prompt and generating, and the build's features."""
    import llama_cpp
    from llama_cpp import _internals as internals

    from runtime.backends.llama import install_log_forwarding, llama_context_params
    from runtime.backends.llama_build import compiled_features, model_params
    from runtime.models.context_settings import context_params

    install_log_forwarding()
    loaded = internals.LlamaModel(path_model=model, params=model_params(extra_buffers), verbose=True)
    params = context_params(PROMPT_TOKENS + GENERATED_TOKENS + 64)
    cpus = os.cpu_count() or 1
    threads, threads_batch = max(cpus // 2, 1), cpus  # the embedded backend's defaults
    context = internals.LlamaContext(model=loaded, params=llama_context_params(params, threads, threads_batch),
                                     verbose=True)
    text = (ROOT / "README.md").read_text(encoding="utf-8").encode("utf-8")
    prompt = loaded.tokenize(text, add_bos=False, special=False)[:PROMPT_TOKENS]
    batch = internals.LlamaBatch(n_tokens=params.n_batch, embd=0, n_seq_max=1, verbose=True)
    reads, generations = [], []
    for _ in range(REPEATS):
        llama_cpp.llama_memory_clear(context.memory, True)
        started = time.perf_counter()
        for at in range(0, len(prompt), params.n_batch):
            batch.set_batch(prompt[at:at + params.n_batch], n_past=at, logits_all=False)
            context.decode(batch)
        reads.append(len(prompt) / (time.perf_counter() - started))
        started = time.perf_counter()
        for step in range(GENERATED_TOKENS):  # a token's cost does not depend on which it is
            batch.set_batch(prompt[step:step + 1], n_past=len(prompt) + step, logits_all=True)
            context.decode(batch)
        generations.append(GENERATED_TOKENS / (time.perf_counter() - started))
    context.close()
    loaded.close()
    return {"prompt_tokens_per_s": statistics.median(reads), "generated_tokens_per_s": statistics.median(generations),
            "features": compiled_features(), "llama_cpp": llama_cpp.__file__}


def run_child(model: str, portable: Path | None, extra_buffers: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(p) for p in (portable, ROOT, ROOT / "bench") if p is not None] + [os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, __file__, "--measure", model, "--extra-buffers", str(int(extra_buffers))],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"a measurement failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--portable", type=Path, help="a portable llama-cpp-python installed with --target")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--extra-buffers", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, bool(args.extra_buffers))))
        return
    from importlib import metadata

    version = metadata.version("llama-cpp-python")
    portable = args.portable or portable_dir(version)
    if not portable.is_dir():
        build_portable(portable, version)
    sample = sample_model()
    models = {"Q4_1 (sample)": sample, "Q4_0": requantized(sample, portable.parent)}
    load_before = os.getloadavg()
    rounds = {(m, name): [] for m in models for name in CONFIGURATIONS}
    for number in range(args.rounds):
        for (m, name), runs in rounds.items():
            uses_portable, extra_buffers = CONFIGURATIONS[name]
            runs.append(run_child(models[m], portable if uses_portable else None, extra_buffers))
        print(f"round {number + 1}/{args.rounds}: " + ", ".join(
            f"{m} {name} {r[-1]['prompt_tokens_per_s']:.0f}/{r[-1]['generated_tokens_per_s']:.0f}"
            for (m, name), r in rounds.items()), flush=True)
    results: dict[str, dict] = {m: {} for m in models}
    for (m, name), runs in rounds.items():
        prompt = statistics.median(r["prompt_tokens_per_s"] for r in runs)
        generated = statistics.median(r["generated_tokens_per_s"] for r in runs)
        results[m][name] = {"prompt_tokens_per_s": round(prompt, 1), "generated_tokens_per_s": round(generated, 1),
                            "prompt_runs": [round(r["prompt_tokens_per_s"], 1) for r in runs],
                            "generated_runs": [round(r["generated_tokens_per_s"], 1) for r in runs],
                            "features": runs[0]["features"]}
    for rows in results.values():
        base = rows["native"]
        for row in rows.values():
            row["prompt_vs_native"] = round(row["prompt_tokens_per_s"] / base["prompt_tokens_per_s"], 3)
            row["generated_vs_native"] = round(row["generated_tokens_per_s"] / base["generated_tokens_per_s"], 3)
    cpu = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")][:1]
    data = {
        "models": {m: Path(path).name for m, path in models.items()},
        "prompt_tokens": PROMPT_TOKENS, "generated_tokens": GENERATED_TOKENS,
        "rounds": args.rounds, "cpus": os.cpu_count(),
        "cpu_lists_amx": bool(cpu) and "amx_tile" in cpu[0].split(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "tokens_per_s": results,
    }
    write_results("llama_builds", data)
    for m, rows in results.items():
        for name, row in rows.items():
            print(f"{m:14s} {name:14s} prompt {row['prompt_tokens_per_s']:7.1f} tok/s "
                  f"({row['prompt_vs_native']:.2f}x)  generation {row['generated_tokens_per_s']:6.1f} tok/s ({row['generated_vs_native']:.2f}x)")


if __name__ == "__main__":
    main()
