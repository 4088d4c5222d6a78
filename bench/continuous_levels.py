"""Continuous batching: a search's pick against transformers' presets, ``default_compile_level``
0 (eager: the ``none`` strategy), 1, 2 and 3, each measured, over one Poisson traffic.

One ``autotune search --workload continuous`` with a time budget, in a temp dir (the search
measures the levels itself as anchors, then other strategies, and confirms its pick unless
``--no-confirm``); then its stored study, read through ``autotune.load_study``: for each level
and the pick, the lifetime cost over ``--hours`` at the arrival rate (time to ready + stalls +
requests in that time x the mean time a request spends in the server), the stalls after the
warm-up (graphs compiled while serving, and their seconds), p90 TTFT and tokens a second of the
steady pass, and the speedup against eager in the trial's own process. A level the search did
not measure (its budget ran out first) is measured here, cold in a fresh process, with the
study's own workload and settings. Prints a Markdown table. Run:

    python bench/continuous_levels.py --model tests.models:tiny_llama --rate 40 \\
        --seq-len 4..60 --new-tokens 4..16 --requests 12 --time-budget 15m
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import autotune
from autotune.strategy import Strategy
from autotune.strategy.batching import anchor_fields, level_of
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = "continuous-levels"


def search(args: argparse.Namespace, folder: str) -> tuple[str, float]:
    """The search, as a user runs it, in ``folder``: its output streamed; the storage's URL and
    the wall time."""
    storage = f"sqlite:///{folder}/study.db"
    flags = ["--model", args.model, *(["--layers", str(args.layers)] if args.layers else []),
             "--workload", "continuous", "--rate", f"{args.rate:g}", "--seq-len", args.seq_len,
             "--new-tokens", args.new_tokens, "--requests", str(args.requests),
             "--dtype", args.dtype, "--iters", str(args.iters), "--warmup", "1",
             "--starts", "cold", "--time-budget", args.time_budget, "--no-progress",
             "--format", "continuous-batching",
             *(["--no-confirm"] if args.no_confirm else [])]  # fmt: skip
    print("$ autotune search " + " ".join(flags), flush=True)
    argv = [sys.executable, "-m", "autotune.cli", "search", *flags, "--out", f"{folder}/cb.json",
            "--storage", storage, "--study", STUDY]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
        ROOT, os.environ.get("PYTHONPATH"))))}  # fmt: skip
    began = time.perf_counter()
    subprocess.run(argv, cwd=folder, env=env, check=True)
    wall = time.perf_counter() - began
    with open(f"{folder}/cb.json") as f:
        exported = json.load(f)
    print(f"\nexported ({args.time_budget} budget, {wall / 60:.1f} min): "
          f"{exported['autotune']['key']}, ContinuousBatchingConfig(**"
          f"{exported['continuous_batching_config']})")  # fmt: skip
    return storage, wall


def first_ok(found: list[Measurement], key: str) -> Measurement | None:
    """The first measurement of strategy ``key`` that ran and kept eager's tokens."""
    return next((m for m in found if m.strategy.key == key and m.ok and m.latency), None)


def row(name: str, m: Measurement, hours: float, rate: float, note: str) -> str:
    """One table row: lifetime cost, stalls, p90 TTFT and tokens a second (the medians over
    the steady passes), speedup against the trial's own interleaved eager."""
    c = m.traffic["continuous"] if m.traffic else {"ready_s": 0.0, "stalls_s": []}
    stalls = c["stalls_s"]
    assert m.compile_s is not None and m.latency is not None and m.ttft is not None
    total = m.compile_s + rate * 3600 * hours * m.latency.median_ms / 1e3
    speedup = 1.0 if m.strategy.key == "none" else (m.speedup or 0.0)
    rounds = f"{len(m.latency.samples_ms)}" + (f" ({m.rung} rung)" if m.rung == "cheap" else "")
    return (f"| {name} | {total:,.0f} s | {c['ready_s']:.1f} s | {len(stalls)} "
            f"({sum(stalls):.1f} s) | {m.latency.median_ms:.1f} ms | {m.ttft.median_ms:.1f} ms "
            f"| {m.tokens_per_s or 0:.0f} | {speedup:.2f}x | "
            f"{'yes' if m.accuracy and m.accuracy.passed else 'NO'} | {rounds} | "
            f"{m.timings.get('others_cpu', 0.0):.0%} | {note} |")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tests.models:tiny_llama")
    p.add_argument("--layers", type=int)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--seq-len", default="4..60")
    p.add_argument("--new-tokens", default="4..16")
    p.add_argument("--requests", type=int, default=12)
    p.add_argument("--iters", type=int, default=6)
    p.add_argument("--time-budget", default="15m")
    p.add_argument("--hours", type=float, default=1.0, help="the lifetime the cost counts")
    p.add_argument("--no-confirm", action="store_true")
    p.add_argument("--dir", help="the search's folder (default: a temp dir)")
    p.add_argument("--reuse", action="store_true", help="read --dir's finished search")
    args = p.parse_args()
    folder = args.dir or tempfile.mkdtemp(prefix="continuous-levels-")
    if args.reuse:
        storage = f"sqlite:///{folder}/study.db"
        with open(f"{folder}/wall_s") as f:
            wall = float(f.read())
    else:
        storage, wall = search(args, folder)
        with open(f"{folder}/wall_s", "w") as f:
            f.write(f"{wall}")

    view = autotune.load_study(STUDY, storage)
    found = view.measurements()
    answer = view.answer()
    pick = answer.chosen.key
    print("\n".join(answer.lines()))
    rows: list[tuple[str, Measurement, str]] = []
    for level in range(4):
        s = Strategy("none") if level == 0 else Strategy.create(**anchor_fields(level))
        m, note = first_ok(found, s.key), "the search's"
        if m is None:
            began = time.perf_counter()
            m = measure(view.spec.model, view.spec.workload, s, view.spec.settings)
            note = f"measured here ({time.perf_counter() - began:.0f} s)"
            if not (m.ok and m.latency):
                print(f"level {level} ({s.key}): {m.status} {m.reason}")
                continue
        rows.append((f"level {level}" + (" (eager)" if level == 0 else ""), m, note))
    m = first_ok(found, pick)
    assert m is not None, pick
    label = f"level {level_of(m.strategy.batching)}" if level_of(m.strategy.batching) else ""
    label = label or ("eager" if pick == "none" else "")
    rows.append((f"**the pick** `{pick}`", m, f"= {label}" if label else "the search's"))

    ran = [x for x in found if not x.deduced]
    print(f"\n{args.model}" + (f" --layers {args.layers}" if args.layers else "")
          + f", {args.dtype}, Poisson {args.rate:g}/s, prompts {args.seq_len}, answers "
          f"{args.new_tokens}, {args.requests} requests; search {wall / 60:.1f} min: "
          f"{len(ran)} strategies measured ({sum(x.ok for x in ran)} ok), "
          f"{len(found) - len(ran)} deduced; lifetime {args.hours:g} h = "
          f"{args.rate * 3600 * args.hours:,.0f} requests\n")  # fmt: skip
    print("| strategy | lifetime cost | time to ready | stalls after warm-up | mean time in "
          "server | p90 TTFT | tokens/s | vs eager | tokens exact | rounds | others' CPU | "
          "measured |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, m, note in rows:
        print(row(name, m, args.hours, args.rate, note))
    shown = {r[1].strategy.key for r in rows}
    others = [x for x in ran if x.ok and x.latency and x.strategy.key not in shown]
    others.sort(key=lambda x: (x.compile_s or 0) + args.rate * 3600 * args.hours
                * x.latency.median_ms / 1e3)  # fmt: skip
    for x in others:
        print(row(f"`{x.strategy.key}`", x, args.hours, args.rate, "the search's"))
    for x in ran:
        if not x.ok:
            print(f"failed: {x.strategy.key}: {x.status} {x.reason[:300]}")


if __name__ == "__main__":
    main()
