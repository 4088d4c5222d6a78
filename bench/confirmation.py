"""Where one confirmation's time goes: a rival of the main job confirmed over its traffic, in
this process (its first pass compiles cold here; in a search it is warm from the trial's
caches), with the phases the child records.

    python bench/confirmation.py --backend eager
    python bench/confirmation.py --backend inductor --rounds 12
"""

from __future__ import annotations

import argparse
import time

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.child import fulfil
from autotune.trial.request import Request
from autotune.workload import Workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--backend", default="eager")
    p.add_argument("--rounds", type=int, default=12, help="the rounds planned (12: its least)")
    args = p.parse_args()
    workload = Workload(seq_len="16..256", requests=16, dtype="bfloat16")
    strategy = Strategy.create("full", args.backend)
    request = Request("confirm", strategy, ModelRef("gemma-2b", layers=2), workload,
                      args.rounds, 1, 0, confirm=(strategy,))  # fmt: skip
    began = time.perf_counter()
    m = fulfil(request)
    t = m.timings
    rounds = int(t.get("rounds", 0))
    print(f"{strategy.key}: {time.perf_counter() - began:.1f} s in this process: build "
          f"{t.get('build_s', 0):.1f} s, first pass {t.get('first_s', 0):.1f} s (compile "
          f"{m.compile_s or 0:.1f} s), warm-up {t.get('warmup_s', 0):.1f} s, {rounds} of "
          f"{args.rounds} rounds {t.get('timing_s', 0):.1f} s "
          f"({t.get('timing_s', 0) / max(rounds, 1):.2f} s a round over "
          f"{len((m.traffic or {}).get('steady') or [])} steady shapes, both sides)")  # fmt: skip


if __name__ == "__main__":
    main()
