"""Continuous batching: ``pad=auto``'s padding intervals against fixed ones, over one traffic.

Each strategy is measured cold in a fresh process (``autotune.trial.parent.measure``), with the
same workload and settings and the same compile (``--backend``, dynamic as torch decides):
transformers' default intervals (``batching=none``: q 64, kv 16,384), the intervals fitted to
the traffic (the pilot's: the longest prompt's and the longest request's powers of two), no
padding (``q=1+kv=16``), and ``pad=auto`` (which runs its own pilot first). Eager (level 0) is
measured too. For each: the lifetime cost over an hour at the arrival rate (time to ready +
stalls + the hour's requests x the mean time a request spends in the server, in its own
process), the graphs compiled after the warm-up and their seconds, the padded query tokens
and cache reads over the real ones (priced over eager's batches), and the speedup against eager
in the trial's own process; for ``pad=auto``, its intervals and its cost predicted beside the
cost measured. Prints a Markdown table. Run:

    python bench/continuous_padding.py --model tests.models:tiny_llama --rate 40 \\
        --seq-len 4..60 --new-tokens 4..16 --requests 12
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import torch

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial import auto_padding
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload


def row(name: str, m: Measurement, requests: float) -> str:
    """One strategy's line of the table."""
    if not m.ok:
        return f"| {name} | {m.status}: {m.reason[:80]} | | | | | |"
    c = m.traffic["continuous"]
    stalls = f"{c['graphs']} ({sum(c['stalls_s']):.1f} s)"
    cost = m.compile_s + requests * m.latency.median_ms / 1e3
    pad = c.get("padding") or {}
    waste = f"{pad['q_waste']:.0%} / {pad['kv_waste']:.0%}" if pad else "—"
    return (f"| {name} | {cost:,.0f} s | {c['ready_s']:.1f} s | {stalls} | "
            f"{m.latency.median_ms:.1f} ms | {waste} | {m.speedup:.2f}x |")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tests.models:tiny_llama")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--seq-len", default="4..60")
    p.add_argument("--new-tokens", default="4..16")
    p.add_argument("--requests", type=int, default=12)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--iters", type=int, default=6)
    args = p.parse_args()
    model = ModelRef(args.model, layers=args.layers) if args.layers else ModelRef(args.model)
    w = Workload(kind="continuous", rate=args.rate, seq_len=args.seq_len,
                 new_tokens=args.new_tokens, requests=args.requests)  # fmt: skip
    settings = Settings(iters=args.iters, warmup=1, starts=("cold",), timeout_s=1200)
    requests = args.rate * 3600
    auto = Strategy.create(backend=args.backend, batching="pad=auto")
    fitted = auto_padding.pilot_of(auto, w).batching
    rows = [("eager (level 0)", Strategy.create("none")),
            ("transformers' intervals (q 64, kv 16,384)", Strategy.create(backend=args.backend)),
            (f"fitted ({fitted})", Strategy.create(backend=args.backend, batching=fitted)),
            ("no padding (q=1+kv=16)", Strategy.create(backend=args.backend,
                                                        batching="q=1+kv=16")),
            ("pad=auto", auto)]  # fmt: skip
    start = time.time()
    print(f"# {args.model}{f' --layers {args.layers}' if args.layers else ''}, "
          f"{args.requests} requests at {args.rate:g}/s, seq {args.seq_len}, new "
          f"{args.new_tokens}, backend {args.backend}, {args.iters} rounds; torch "
          f"{torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}", flush=True)  # fmt: skip
    lines = [
        "| strategy | lifetime cost (1 h) | ready | stalls after warm-up | in server "
        "| padding q / kv | vs eager |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    found = {}
    for name, s in rows:
        t = time.time()
        found[name] = m = measure(model, w, s, settings)
        lines.append(row(name, m, requests))
        print(f"{name}: {m.status} in {time.time() - t:.0f} s", flush=True)
    print("\n".join(lines))
    a = (found["pad=auto"].traffic or {}).get("auto")
    if a:
        q, kv = a["intervals"]
        done = a.get("measured", {}).get("total_s")
        print(f"\npad=auto chose q {q}, kv {kv} from eager's {a['batches']} batches: predicted "
              f"{a['predicted']['total_s']:,.0f} s, measured "
              f"{'—' if done is None else f'{done:,.0f} s'} (the pilot's scale); the pilot's "
              f"own intervals priced at {a['pilot']['cost']['total_s']:,.0f} s; "
              f"{a.get('note', 'within the noise')}")  # fmt: skip
    print(f"\nwall {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
