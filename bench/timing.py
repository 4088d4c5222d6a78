"""The timing loop's own cost per round: the early-stopping sign test after every round.

A tie with eager (nothing to stop early) is the worst case: every round asks whether the
remaining rounds could still change the verdict. The loop is the trial's own
(``timing.interleave`` with the scenario's ``after_round``), its calls empty, so what is timed is
the harness alone. ``old`` is the check this replaced (every outcome of the remaining rounds
tried, big-integer tails), run where it finishes in minutes.

    python bench/timing.py            # iters 10, 1000 and 10,000
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.trial import timing


def old_decided(eager: list[float], compiled: list[float], remaining: int) -> bool:
    def p(w: int, lo: int) -> float:
        n = w + lo
        return 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(min(w, lo) + 1))
                                      / 2**n)  # fmt: skip

    def verdict(w: int, lo: int) -> int:
        return 0 if p(w, lo) >= timing.ALPHA else (1 if w > lo else -1)

    if len(eager) < timing.MIN_ROUNDS:
        return False
    wins = sum(e > c for e, c in zip(eager, compiled, strict=False))
    losses = sum(e < c for e, c in zip(eager, compiled, strict=False))
    now = verdict(wins, losses)
    return all(verdict(wins + w, losses + lo) == now
               for w in range(remaining + 1) for lo in range(remaining + 1 - w))  # fmt: skip


def per_round_us(iters: int, old: bool) -> tuple[float, int]:
    """Microseconds of harness per round over a whole tie of ``iters`` rounds; rounds run.
    ``old``: the lists rebuilt and every outcome tried each round; else the scenario's loop
    (the round's win or loss counted, then two checks)."""
    rng = random.Random(0)
    calls = {"eager": lambda: None, "compiled": lambda: None}
    tally = [0, 0]

    def timer(call: object) -> float:
        return rng.random()  # a tie: each side wins half the rounds

    def after_round(samples: dict[str, list[float]]) -> bool:
        ran = len(samples["compiled"])
        if old:
            return old_decided(list(samples["eager"]), list(samples["compiled"]), iters - ran)
        e, c = samples["eager"][-1], samples["compiled"][-1]
        tally[0] += e > c
        tally[1] += e < c
        return ran >= timing.MIN_ROUNDS and timing.settled(*tally, iters - ran)

    start = time.perf_counter()
    samples = timing.interleave(calls, iters, timer, 0, after_round)
    ran = len(samples["compiled"])
    return (time.perf_counter() - start) / ran * 1e6, ran


def main() -> None:
    print("| --iters | rounds run | old: µs per round | new: µs per round | old / new |")
    print("| --- | --- | --- | --- | --- |")
    for iters in (10, 1000, 10_000):
        new, ran = per_round_us(iters, old=False)
        if iters <= 1000:
            old, _ = per_round_us(iters, old=True)
            print(f"| {iters:,} | {ran:,} | {old:,.0f} | {new:,.1f} | {old / new:,.0f}x |")
        else:
            print(f"| {iters:,} | {ran:,} | not run (cubic: hours) | {new:,.1f} | — |")


if __name__ == "__main__":
    main()
