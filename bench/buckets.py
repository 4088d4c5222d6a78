"""``--buckets auto`` beside the fixed kinds on one traffic: buckets, time to ready, padded share,
weighted latency and the cost over one hour of serving, each strategy cold in a fresh process.

    python bench/buckets.py --model gemma-2b --layers 2 --seq-len 16..256 --requests 16
    python bench/buckets.py --model gemma-2b --layers 2 \\
        --traffic bench/traffics/azure-conv-2023-first64-div8.csv

The hour's cost is a deployment's: time to ready plus an hour's calls (back to back at eager's
weighted latency, the lifetime policy's default) at the strategy's weighted latency, on eager's
scale of this run. ``auto`` also prints the cost its pilot predicted beside the one measured.
``bench/traffics/azure-conv-2023-first64-div8.csv``: the first 64 requests' ``ContextTokens`` of
the Azure LLM inference trace 2023, conversation
(github.com/Azure/AzurePublicDataset, ``data/AzureLLMInferenceTrace_conv.csv``), each divided by
8 and rounded up, so that its longest prompt (4,085 tokens) fits a 2-core CPU (511).
"""

from __future__ import annotations

import sys
from pathlib import Path

from autotune.strategy import Strategy, shapes
from autotune.workload import Workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from traffic import measure_each, traffic_parser  # bench/traffic.py

CHOICES = ({"buckets": "auto"}, {"buckets": "pow2"}, {"buckets": "quantiles"},
           {"dynamic": True}, {"dynamic": None, "marks": "seq"})  # fmt: skip
HOUR_S = 3600.0


def padded_share(s: Strategy, requests: tuple[tuple[int, int], ...]) -> float:
    """The share of the tokens computed over the traffic that are padding."""
    if s.buckets == "none":
        return 0.0
    found = shapes.edges_of(s.buckets, requests, s.edges)
    padded = [shapes.bucket_of(r, found) for r in requests]
    return 1 - sum(b * q for b, q in requests) / sum(b * q for b, q in padded)


def main() -> None:
    p = traffic_parser(__doc__)
    p.add_argument("--traffic", default="", help="a traffic file instead of --seq-len")
    args = p.parse_args()
    if args.traffic:
        w = Workload(traffic=args.traffic, dtype=args.dtype)
    else:
        w = Workload(seq_len=args.seq_len, requests=args.requests, dtype=args.dtype)
    measured, base = measure_each(args, w, CHOICES, timeout_s=1800)
    calls = HOUR_S * 1e3 / base.latency.median_ms if base.latency else 0.0
    print(f"an hour: {calls:,.0f} calls at eager's {base.latency.median_ms:.1f} ms\n")
    print("| strategy | trial s | buckets | time to ready s | padded share | weighted latency ms "
          "(x eager) | cost over 1 h, s | accuracy |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for m, wall in measured:
        if not m.ok:
            print(f"| {m.strategy.key} | {wall:.0f} | {m.status}: {m.reason[:100]} |||||")
            continue
        t = m.traffic or {}
        buckets = shapes.hit(m.strategy.buckets, w.traffic, m.strategy.edges) or "-"
        speed = 1.0 if m.strategy.key == "none" else m.speedup or 1.0
        latency_ms = base.latency.median_ms / speed  # eager's scale of this run, as measured
        cost = t["ready_s"] + calls * latency_ms / 1e3
        print(f"| {m.strategy.key} | {wall:.0f} | {buckets} | {t['ready_s']:.1f} | "
              f"{padded_share(m.strategy, w.traffic):.0%} | {latency_ms:.2f} "
              f"({speed:.3f}) | {cost:,.0f} | "
              f"{'pass' if m.accuracy and m.accuracy.passed else 'FAIL'} |")  # fmt: skip
    for m, _ in measured:
        if auto := (m.traffic or {}).get("auto"):
            seen = auto.get("measured", {})
            print(f"\nauto: edges {auto['edges'][1]} (batch {auto['edges'][0]}); pilot "
                  f"{auto['pilot']['wall_s']:.0f} s, a bucket's compile {auto['stall_s']:.2f} s, "
                  f"latency {auto['model']['base_ms']:.2f} ms + "
                  f"{auto['model']['per_token_ms']:.2e} ms a token; over 1 h predicted "
                  f"{auto['predicted']['total_s']:,.0f} s, measured "
                  f"{seen.get('total_s', float('nan')):,.0f} s (pow2 predicted "
                  f"{auto['pow2']['total_s']:,.0f} s)"
                  + (f"; {auto['note']}" if "note" in auto else ""))  # fmt: skip


if __name__ == "__main__":
    main()
