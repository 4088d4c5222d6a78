"""Where the main job's time went: each trial's stored timings, the later starts, the
confirmation, and what is left (the parent's own work: the sampler, the store, the reference).

    /usr/bin/time -f "WALL %e" autotune search --model gemma-2b --dtype bfloat16 --trials 12 \\
        --iters 10 --warmup 2 --starts cold,warm
    python bench/mainjob.py --storage sqlite:///studies/autotune.db --wall 692 [--study NAME]

``--wall`` is the command's wall time; without ``--study``, the storage's only study.
"""

from __future__ import annotations

import argparse

from autotune.search import studies
from autotune.storage import Store
from autotune.trial.measurement import Measurement

PHASES = ("startup_s", "build_s", "first_s", "warmup_s", "timing_s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--storage", required=True)
    p.add_argument("--study")
    p.add_argument("--wall", type=float, required=True, help="the search command's wall seconds")
    args = p.parse_args()
    store = Store(args.storage, create=False)
    name = args.study or store.studies()[0].name
    study = studies.study(store, name)
    assert study is not None, name
    rows = store.measurements(name)
    print("| trial | cold child (startup, build, first call, warm-up, timed rounds) | rounds | "
          "later starts | wall |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    total = {"cold": 0.0, "later": 0.0, **{k: 0.0 for k in PHASES}}
    for row in rows:
        m = Measurement.from_dict(row.payload)
        t = m.timings
        later = sum(s.wall_s or 0.0 for k, s in m.starts.items() if k != "cold" and s.measured)
        phases = ", ".join(f"{t.get(k, 0.0):.1f}" for k in PHASES)
        total["cold"] += m.wall_s or 0.0
        total["later"] += later
        for k in PHASES:
            total[k] += t.get(k, 0.0)
        print(f"| {row.key} ({m.status}) | {phases} | {t.get('rounds', 0):.0f} | {later:.1f} s | "
              f"{(m.wall_s or 0.0) + later:.1f} s |")  # fmt: skip
    confirmation = store.confirmation(name, study.spec.policy)
    confirm_s = float(confirmation[1].get("wall_s", 0.0)) if confirmation else 0.0
    measured = total["cold"] + total["later"]
    rest = args.wall - measured - confirm_s
    split = ", ".join(f"{k.removesuffix('_s')} {total[k]:.0f} s" for k in PHASES)
    print(f"\n{len(rows)} trials: cold children {total['cold']:.0f} s ({split}), later starts "
          f"{total['later']:.0f} s, confirmation {confirm_s:.0f} s, the rest (reference, "
          f"sampler, store, exports) {rest:.0f} s; wall {args.wall:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
