"""Interleaved rounds, and the sign test that reads them: whether a speedup shows, and when the
rounds have decided. (The timers themselves are the device's: :mod:`autotune.device`.)"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def interleave(
    calls: dict[str, Callable[[], Any]], iters: int, timer: Callable[[Callable[[], Any]], T],
    seed: int = 0, after_round: Callable[[dict[str, list[T]]], bool | None] | None = None,
    deadline: float = 0.0, least: int = 0,
) -> dict[str, list[T]]:  # fmt: skip
    """Time each call up to ``iters`` times with ``timer`` (one call -> its sample), in a random
    order per round; ``after_round`` sees the samples so far after each round, and ends the
    rounds by returning True. With a ``deadline`` (``time.time()``), the rounds also end once
    another round like the last would end past it, but never before ``least`` rounds.

    Interleaving, as PyTorch's own benchmark harness does, spreads drift in the machine's
    speed (other load, frequency changes) over every call alike.
    """
    rng = random.Random(seed)
    samples: dict[str, list[T]] = {name: [] for name in calls}
    names = list(calls)
    for done in range(1, iters + 1):
        began = time.time()
        rng.shuffle(names)
        for name in names:
            samples[name].append(timer(calls[name]))
        if after_round is not None and after_round(samples):
            break
        if deadline and done >= least and 2 * time.time() - began > deadline:
            break
    return samples


def rounds_of(samples: dict[str, list[Any]]) -> int:
    """How many rounds ``samples`` holds."""
    return min((len(v) for v in samples.values()), default=0)


ALPHA = 0.05  # the sign test's level: a speedup the rounds do not show at it counts as none
MIN_ROUNDS = 5  # timed rounds before the rounds may stop early (a median needs some samples)


def sign_test(eager_ms: list[float], compiled_ms: list[float]) -> float:
    """Two-sided sign-test p-value that compiled and eager differ, over interleaved rounds.

    Round i timed both, back to back, so the pairs share the machine's state at that moment;
    the test asks how often compiled won, which drift and outliers cannot fake.
    """
    diffs = [e - c for e, c in zip(eager_ms, compiled_ms, strict=False) if e != c]
    return _p_value(sum(d > 0 for d in diffs), sum(d < 0 for d in diffs))


def _p_value(wins: int, losses: int) -> float:
    """The two-sided sign test's p-value, ``2 P(X <= min(wins, losses))`` for X ~ Bin(n, 1/2),
    in floating point: the largest term from ``lgamma``, then the others as ratios of it,
    summed down from it until they no longer count (a few hundred terms at n = 10,000)."""
    n, k = wins + losses, min(wins, losses)
    if n == 0 or 2 * k == n:
        return 1.0
    log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)
    total, term = 0.0, 1.0
    for i in range(k, -1, -1):  # term = C(n, i) / C(n, k)
        total += term
        term *= i / (n - i + 1)
        if term < total * 1e-17:
            break
    return min(1.0, 2 * math.exp(log_top) * total)


def _verdict(wins: int, losses: int) -> int:
    """+1 compiled faster, -1 slower, 0 not shown, at :data:`ALPHA`."""
    if _p_value(wins, losses) >= ALPHA:
        return 0
    return 1 if wins > losses else -1


def decided(eager: list[float], compiled: list[float], remaining: int) -> bool:
    """Whether the sign test's verdict can no longer change, whatever the ``remaining`` rounds
    give (each a win, a loss or a tie): timing more rounds would not change the answer.

    The verdict never falls as wins grow and never rises as losses grow (the p-value only grows
    towards a balance and only shrinks away from it), so over every outcome of the remaining
    rounds it is highest when all are won and lowest when all are lost: two checks, not one
    per outcome."""
    if len(eager) < MIN_ROUNDS:
        return False
    wins = sum(e > c for e, c in zip(eager, compiled, strict=False))
    losses = sum(e < c for e, c in zip(eager, compiled, strict=False))
    return settled(wins, losses, remaining)


def settled(wins: int, losses: int, remaining: int) -> bool:
    """:func:`decided` from the counts so far (a loop that keeps them pays O(1) a round)."""
    now = _verdict(wins, losses)
    return _verdict(wins + remaining, losses) == now == _verdict(wins, losses + remaining)


def cannot_show(wins: int, losses: int, remaining: int) -> bool:
    """Whether compiled can no longer be shown faster than eager, even if it wins every one of
    the ``remaining`` rounds: "not shown" is then the verdict that all the rounds would give."""
    return _verdict(wins + remaining, losses) != 1


def none_can_show(samples: dict[str, list[float]], iters: int, eager: str) -> bool:
    """A confirmation's early end (curtailment): True once no side of ``samples`` but
    ``eager`` can still be shown faster than it in ``iters`` rounds, after at least
    :data:`MIN_ROUNDS`. What the confirmation decides is then what ``iters`` rounds would
    decide (every strategy not shown, so none counts a speedup); a strategy that may still be
    shown keeps every side timing to the last round, for the comparisons between them."""
    done = rounds_of(samples)
    if done < MIN_ROUNDS:
        return False
    base = samples[eager]
    for key, values in samples.items():
        if key == eager:
            continue
        wins = sum(e > c for e, c in zip(base, values, strict=False))
        losses = sum(e < c for e, c in zip(base, values, strict=False))
        if not cannot_show(wins, losses, iters - done):
            return False
    return True


@functools.cache
def deciding_rounds() -> int:
    """The fewest rounds whose sign test can show a difference at :data:`ALPHA` (every round
    one way): 6 at 0.05. Fewer rounds decide nothing, so no budget cuts below them."""
    n = 1
    while sign_test([1.0] * n, [0.0] * n) >= ALPHA:
        n += 1
    return n
