"""Benchmark: does compiling pay for generation (prefill + decode) on this machine?

For each model, each compiled strategy is measured cold in its own child process, ``--repeats``
times, with ``--workload generate``; each trial times its TTFT (prefill) and every decode step
interleaved with eager in the same process, so the ratios below are eager / compiled within one
trial (> 1: compiling is faster). Run:

    python bench/generate.py --model gpt2 --repeats 3
    python bench/generate.py --model gemma-2b --layers 2 --dtype bfloat16 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics

from autotune.catalog import ModelRef
from autotune.choice.selection import sign_test
from autotune.strategy import Strategy
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

STRATEGIES = (Strategy.create("full", "inductor"), Strategy.create("regional", "inductor"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--layers", type=int)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=5, help="timed generations per trial")
    args = p.parse_args()
    ref = ModelRef(args.model, layers=args.layers)
    work = Workload(seq_len=args.seq_len, dtype=args.dtype, kind="generate",
                    new_tokens=args.new_tokens)  # fmt: skip
    settings = Settings(iters=args.iters, warmup=1, timeout_s=1800)
    print(f"{ref.slug()} {work.slug()}: {args.repeats} repeats, {args.iters} timed generations")
    head = ("strategy", "rep", "compile s", "eager TTFT ms", "TTFT x", "eager decode ms/tok",
            "decode x", "p(sign)", "tok/s", "eager tok/s", "tokens", "recompiles")  # fmt: skip
    print(" | ".join(head))
    ratios: dict[str, list[tuple[float, float]]] = {}
    for rep in range(args.repeats):
        for s in STRATEGIES:
            m = measure(ref, work, s, settings)
            if not m.ok or not (m.latency and m.eager_latency and m.ttft and m.eager_ttft):
                print(f"{s.key} | {rep} | {m.status}: {m.reason}")
                continue
            ttft_x = m.eager_ttft.median_ms / m.ttft.median_ms
            p_value = sign_test(m.eager_latency.samples_ms, m.latency.samples_ms)
            ratios.setdefault(s.key, []).append((ttft_x, m.speedup or 0.0))
            row = (s.key, rep, f"{m.compile_s:.1f}", f"{m.eager_ttft.median_ms:.1f}",
                   f"{ttft_x:.2f}", f"{m.eager_latency.median_ms:.2f}", f"{m.speedup:.2f}",
                   f"{p_value:.2g}", f"{m.tokens_per_s:.1f}", f"{m.eager_tokens_per_s:.1f}",
                   "ok" if m.tokens and m.tokens.passed else "DIFFER",
                   m.graphs.recompiles if m.graphs else "?")  # fmt: skip
            print(" | ".join(map(str, row)), flush=True)
            if m.limit_hit and m.graphs:
                print(f"    {m.graphs.limit_hit}; fix: {m.graphs.limit_hint}", flush=True)
    for key, values in ratios.items():
        ttft = statistics.median(v[0] for v in values)
        decode = statistics.median(v[1] for v in values)
        print(f"median over repeats: {key}: TTFT {ttft:.2f}x, decode {decode:.2f}x of eager")


if __name__ == "__main__":
    main()
