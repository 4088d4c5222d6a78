"""Every start kind of one strategy, as a ratio to its cold start: cold, warm, portable, and the
two that skip the compiler (a precompiled function, an AOTInductor package).

    python bench/precompiled.py [--repeats 3] [--cases toy,gemma] [--raw FILE] [--tables FILE ...]
    TORCHINDUCTOR_VEC_ISA_OK=1 python bench/precompiled.py ...   # Inductor's ISA probes skipped

Cases: toy-64 full (inductor, fullgraph, float32; 10 timed calls after 3 warm-ups) and gemma-2b
``--layers 2`` full (inductor, fullgraph, bfloat16; 3 timed calls after 1 warm-up). Each
repeat is one autotune trial (``autotune.trial.parent.measure``): a cold child that also builds the
two artefacts, then a fresh child per later start; repeats run round-robin over the cases.
A start's cost is its load plus its first call; the build of an artefact is paid once, in the
cold trial, and reported beside it. ``--raw`` appends each measurement as a JSON line;
``--tables`` prints the table from such files alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from autotune.catalog import ModelRef
from autotune.start_kinds import KINDS
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

CASES = {
    "toy": (ModelRef("toy-64"), Workload(device="cpu"), Settings(iters=10, warmup=3)),
    "gemma": (
        ModelRef("gemma-2b", layers=2),
        Workload(device="cpu", dtype="bfloat16"),
        Settings(iters=3, warmup=1),
    ),
}


def label(m: Measurement) -> str:
    ref = ModelRef.from_dict(m.model)
    return f"{ref.name}{f' --layers {ref.layers}' if ref.layers else ''} full"


def line(r: int, m: Measurement) -> str:
    s, cold = m.starts, m.starts["cold"].compile_s or 0.0
    parts = [f"cold {cold:.2f} s"]
    for kind in KINDS[1:]:
        start = s.get(kind)
        if start is None or start.status != "ok" or start.compile_s is None:
            note = f" ({start.note[:120]})" if start and start.note else ""
            parts.append(f"{kind} {start.status if start else 'absent'}{note}")
            continue
        extra = f", load {start.load_s:.2f} s" if start.load_s else ""
        if probes := start.phases.get("isa_probes_s"):
            extra += f", ISA probes {probes:.2f} s"
        parts.append(f"{kind} {start.compile_s:.2f} s ({start.compile_s / cold:.2f}{extra})")
    built = ", ".join(f"{k} build {v['build_s']:.1f} s {v['bytes'] / 2**20:.1f} MiB"
                      for k, v in m.precompiled.items() if "build_s" in v)  # fmt: skip
    return f"repeat {r + 1} {label(m)}: " + "; ".join(parts) + (f"; {built}" if built else "")


def tables(runs: dict[str, list[Measurement]]) -> None:
    """Medians over the repeats: each start's cost and its ratio to cold."""
    isa = "skipped (TORCHINDUCTOR_VEC_ISA_OK=1)" if os.environ.get("TORCHINDUCTOR_VEC_ISA_OK") \
        == "1" else "run"  # fmt: skip
    print(f"\nInductor's ISA probes: {isa}")
    print("| case | " + " | ".join(KINDS) + " | builds (once, in the cold trial) |")
    print("| --- " * (len(KINDS) + 2) + "|")
    for name, ms in runs.items():
        cells = []
        cold = statistics.median(m.starts["cold"].compile_s for m in ms)
        for kind in KINDS:
            ok = [m.starts[kind] for m in ms if kind in m.starts and m.starts[kind].status == "ok"]
            if not ok:
                cells.append("n/a")
                continue
            cost = statistics.median(s.compile_s for s in ok)
            ratio = statistics.median(s.compile_s / m.starts["cold"].compile_s
                                      for s, m in zip(ok, ms, strict=False))  # fmt: skip
            load = statistics.median(s.load_s for s in ok)
            probes = statistics.median(s.phases.get("isa_probes_s", 0.0) for s in ok)
            detail = f" (load {load:.2f}, probes {probes:.2f})" if kind in KINDS[3:] else ""
            cells.append(f"{cost:.2f} s{detail}" + ("" if kind == "cold" else f", {ratio:.2f}"))
        builds = ", ".join(
            f"{k} {statistics.median(m.precompiled[k]['build_s'] for m in ms):.1f} s"
            for k in ("precompiled", "aot")
            if all("build_s" in m.precompiled.get(k, {}) for m in ms)
        )  # fmt: skip
        print(f"| {name} (cold {cold:.1f} s) | " + " | ".join(cells) + f" | {builds} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cases", default="toy,gemma")
    p.add_argument("--raw", help="append each measurement to this file as a JSON line")
    p.add_argument("--tables", nargs="*", help="print the table from --raw files, measure none")
    args = p.parse_args()
    runs: dict[str, list[Measurement]] = {}
    if args.tables:
        for path in args.tables:
            for text in Path(path).read_text().splitlines():
                m = Measurement.from_dict(json.loads(text))
                runs.setdefault(label(m), []).append(m)
        tables(runs)
        return
    began = time.perf_counter()
    strategy = Strategy.create("full", "inductor", fullgraph=True)
    for r in range(args.repeats):
        for case in args.cases.split(","):
            ref, workload, settings = CASES[case]
            settings = Settings(iters=settings.iters, warmup=settings.warmup, starts=KINDS)
            m = measure(ref, workload, strategy, settings)
            assert m.ok and m.accuracy and m.accuracy.passed, (case, m.status, m.reason)
            runs.setdefault(label(m), []).append(m)
            print(line(r, m), flush=True)
            if args.raw:
                with open(args.raw, "a") as f:
                    f.write(json.dumps(m.to_dict()) + "\n")
    print(f"\ntotal {time.perf_counter() - began:.0f} s")
    tables(runs)


if __name__ == "__main__":
    main()
