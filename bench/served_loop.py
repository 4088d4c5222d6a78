"""Benchmark: do a generate trial's figures say what a user's own ``generate`` loop sees?

One trial (``autotune.trial.parent.measure``, a fresh process) of a generate workload, and
beside it, in a fresh process of its own, the loop a user writes and times: ``model.generate``
on the model as built (eager, its default cache), on ``autotune.apply_generation(model,
Strategy("none"))`` (eager, a static cache) and on ``autotune.apply_generation(model,
strategy)``; per side and round, TTFT as ``generate(max_new_tokens=1)``'s wall time and the
time per token as ``(generate(max_new_tokens=N) - TTFT) / (N - 1)``, on ``time.perf_counter``;
the sides interleaved, medians over the rounds. Threads: ``OMP_NUM_THREADS`` as given (the
issue's table used 1). ``--sampling sample`` times sampled answers on both (the trial's
``Workload(sampling="sample")``; the loop's ``do_sample=True`` after ``torch.manual_seed``).
Run:

    OMP_NUM_THREADS=1 python bench/served_loop.py --repeats 3 [--sampling sample]

The loop's process is told nothing of the trial's; the two agree where every ratio is near 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

LOOP = textwrap.dedent("""
    import json, statistics, sys, time
    import torch
    import autotune
    from autotune.strategy import Strategy
    from tests import models

    seq, n, rounds, backend = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sample = sys.argv[5] == "sample"
    model, (ids,) = models.tiny_llama()  # its own prompt, as the trial's
    sides = {"eager": model, "static": autotune.apply_generation(model, Strategy("none")),
             "compiled": autotune.apply_generation(model, Strategy.create("full", backend))}

    def once(gen, tokens):
        if sample:
            torch.manual_seed(0)
        began = time.perf_counter()
        with torch.no_grad():
            gen.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                         min_new_tokens=tokens, do_sample=sample, use_cache=True)
        return time.perf_counter() - began

    for gen in sides.values():  # the compile, and a warm call of each
        once(gen, n), once(gen, n), once(gen, 1)
    found = {k: {"ttft": [], "tpot": []} for k in sides}
    for _ in range(rounds):
        for name, gen in sides.items():
            ttft, whole = once(gen, 1), once(gen, n)
            found[name]["ttft"].append(ttft * 1e3)
            found[name]["tpot"].append((whole - ttft) / (n - 1) * 1e3)
    print(json.dumps({k: {m: statistics.median(v) for m, v in d.items()}
                      for k, d in found.items()}))
""")


def loop(seq: int, new_tokens: int, rounds: int, backend: str, sampling: str
         ) -> dict[str, dict[str, float]]:  # fmt: skip
    """The user's loop (see the module's text), in a fresh process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
        os.environ.get("PYTHONPATH"), root)))}  # fmt: skip
    argv = [sys.executable, "-c", LOOP, str(seq), str(new_tokens), str(rounds), backend, sampling]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--sampling", choices=("greedy", "sample"), default="greedy")
    args = p.parse_args()
    strategy = Strategy.create("full", args.backend)
    work = Workload(batch_size=2, seq_len=8, kind="generate", new_tokens=args.new_tokens,
                    sampling=args.sampling)  # fmt: skip
    settings = Settings(iters=args.rounds, warmup=1, timeout_s=1800)
    print(
        f"tests.models:tiny_llama (its own prompt, batch 2 x 8), {work.slug()}, "
        f"{strategy.key}, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', '(torch default)')}, {args.rounds} rounds"
    )
    print(
        "| repeat | side | trial TTFT | loop TTFT | ratio | trial per token | loop per token "
        "| ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in range(1, args.repeats + 1):
        m = measure(ModelRef("tests.models:tiny_llama"), work, strategy, settings)
        assert m.ok and m.latency and m.eager_latency and m.ttft and m.eager_ttft, m.reason
        trial = {"eager": (m.eager_ttft.median_ms, m.eager_latency.median_ms),
                 "compiled": (m.ttft.median_ms, m.latency.median_ms)}  # fmt: skip
        if getattr(m, "eager_static", None):  # the static cache's eager, where the trial timed it
            trial["static"] = (m.eager_static["ttft_ms"], m.eager_static["tpot_ms"])
        user = loop(8, args.new_tokens, args.rounds, args.backend, args.sampling)
        for side, (ttft, tpot) in trial.items():
            u = user[side]
            print(
                f"| {r} | {side} | {ttft:.3f} ms | {u['ttft']:.3f} ms | {ttft / u['ttft']:.2f} "
                f"| {tpot:.3f} ms | {u['tpot']:.3f} ms | {tpot / u['tpot']:.2f} |"
            )
        speed = (
            trial["eager"][1] / trial["compiled"][1],
            user["eager"]["tpot"] / user["compiled"]["tpot"],
        )
        print(
            f"| {r} | speedup a token | | | | {speed[0]:.2f}x | {speed[1]:.2f}x "
            f"| {speed[0] / speed[1]:.2f} |"
        )


if __name__ == "__main__":
    main()
