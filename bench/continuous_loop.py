"""Benchmark: does a continuous trial's figures say what a user's own serving loop sees?

One trial of the continuous workload (``autotune.trial.parent.measure``, a fresh process), and
beside it, in a fresh process of its own, the loop a user writes over transformers' public API:
``model.init_continuous_batching(continuous_batching_config=autotune.continuous_batching_config
(file))`` with the trial's own keywords, ``warmup()``, ``start()``, then ``add_request(...,
streaming=True)`` at each arrival and ``get_result`` until each answer ends; TTFT as the
user's ``time.perf_counter`` when a request's first streamed token arrives, less its arrival;
the time in the server as its last token's, less its arrival. Passes: the first (its stalls),
then ``--passes`` more; medians over the later passes. Graphs compiled after the warm-up by
Dynamo's own counter. Run:

    python bench/continuous_loop.py [--backend eager] [--batching q=32+kv=512] [--passes 5]

The two agree where every ratio is near 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from autotune.catalog import ModelRef
from autotune.ship import continuous_batching
from autotune.strategy import Strategy
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

LOOP = textwrap.dedent("""
    import json, random, statistics, sys, time
    import torch
    import autotune
    from tests import models

    spec = json.loads(sys.argv[1])
    torch.manual_seed(0)
    model, _ = models.tiny_llama()
    config = autotune.continuous_batching_config(spec["file"])
    draw = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, model.config.vocab_size, (s,), generator=draw).tolist()
               for s in spec["prompts"]]
    answers, arrivals = spec["answers"], spec["arrivals"]
    with torch.inference_mode():
        manager = model.init_continuous_batching(
            generation_config=__import__("transformers").GenerationConfig(
                do_sample=False, max_new_tokens=max(answers), eos_token_id=-1, pad_token_id=0),
            continuous_batching_config=config)
        manager.warmup()
        manager.start()
    counter = torch._dynamo.utils.counters["stats"]
    passes = []
    for k in range(1 + spec["passes"]):
        before = counter["unique_graphs"]
        start, sent, first, last = time.perf_counter(), {}, {}, {}
        def take(timeout):
            r = manager.get_result(timeout=timeout)
            if r is None:
                return
            now = time.perf_counter()
            first.setdefault(r.request_id, now)
            if r.is_finished():
                last[r.request_id] = now
        for i, at in enumerate(arrivals):
            while (wait := start + at - time.perf_counter()) > 0:
                take(min(wait, 0.01))
            rid = f"{k}-{i}"
            manager.add_request(prompts[i], request_id=rid, max_new_tokens=answers[i],
                                streaming=True)
            sent[rid] = start + at
        while len(last) < len(arrivals):
            take(1.0)
        ttft = sorted((first[r] - sent[r]) * 1e3 for r in sent)
        total = [(last[r] - sent[r]) * 1e3 for r in sent]
        passes.append({"ttft_p50_ms": statistics.median(ttft),
                       "ttft_p90_ms": ttft[int(0.9 * (len(ttft) - 1))],
                       "total_mean_ms": statistics.mean(total),
                       "graphs": counter["unique_graphs"] - before})
    manager.stop(block=True)
    print(json.dumps(passes))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--batching", default="q=32+kv=512")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--rate", type=float, default=40.0)
    args = parser.parse_args()
    w = Workload(kind="continuous", rate=args.rate, seq_len="4..40", new_tokens="2..8",
                 requests=12)  # fmt: skip
    strategy = Strategy.create(backend=args.backend, batching=args.batching)
    settings = Settings(iters=args.passes, warmup=1, starts=("cold",), timeout_s=600)
    m = measure(ModelRef("tests.models:tiny_llama"), w, strategy, settings)
    assert m.ok, m.reason
    c = m.traffic["continuous"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cb.json"
        kwargs = {k: v for k, v in c["config"].items()}
        path.write_text(json.dumps({continuous_batching.KEY: kwargs}))
        spec = {"file": str(path), "prompts": [s for _, s in w.traffic],
                "answers": list(w.answers), "arrivals": list(w.arrivals),
                "passes": args.passes}  # fmt: skip
        out = subprocess.run([sys.executable, "-c", LOOP, json.dumps(spec)], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    loop = json.loads(out.strip().splitlines()[-1])
    steady = loop[1:]

    def med(name: str) -> float:
        return statistics.median(p[name] for p in steady)

    trial_ttft = c["steady"]["compiled"]["ttft_p50_ms"]
    rows = [
        ("graphs after warm-up, first pass", c["graphs"], loop[0]["graphs"]),
        ("graphs after warm-up, later passes", 0, sum(p["graphs"] for p in steady)),
        ("TTFT p50 (ms, steady)", trial_ttft, med("ttft_p50_ms")),
        ("TTFT p90 (ms, steady)", m.ttft.median_ms, med("ttft_p90_ms")),
        ("in server (ms a request, steady)", m.latency.median_ms, med("total_mean_ms")),
    ]
    print(f"{strategy.key} over {len(w.traffic)} requests at {args.rate:g}/s")
    print(f"{'figure':<36}{'trial':>10}{'user loop':>12}{'ratio':>8}")
    for name, trial, user in rows:
        ratio = f"{trial / user:.2f}" if user else "—"
        print(f"{name:<36}{trial:>10.3g}{user:>12.3g}{ratio:>8}")
    print(
        f"(the trial's first pass: {len(c['stalls_s'])} compiles, some of which make no graph; "
        "TTFT in the trial from transformers' own token stamps, in the loop as the user's "
        "get_result sees a streamed first token)"
    )


if __name__ == "__main__":
    main()
