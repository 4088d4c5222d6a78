"""The sign test and its early stop: exact where it decides, and cheap at any number of rounds."""

from __future__ import annotations

import itertools
import math

from autotune.trial import timing


def exact_p(wins: int, losses: int) -> float:
    """The sign test's p-value with big integers (the implementation this one replaced)."""
    n = wins + losses
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n)


def brute_decided(wins: int, losses: int, remaining: int) -> bool:
    """Every outcome of the remaining rounds tried (the implementation this one replaced)."""

    def verdict(w: int, lo: int) -> int:
        return 0 if exact_p(w, lo) >= timing.ALPHA else (1 if w > lo else -1)

    now = verdict(wins, losses)
    return all(verdict(wins + w, losses + lo) == now
               for w in range(remaining + 1) for lo in range(remaining + 1 - w))  # fmt: skip


def rounds(wins: int, losses: int, ties: int) -> tuple[list[float], list[float]]:
    """Eager and compiled milliseconds whose rounds give those wins, losses and ties."""
    eager = [2.0] * wins + [1.0] * losses + [1.5] * ties
    compiled = [1.0] * wins + [2.0] * losses + [1.5] * ties
    return eager, compiled


def test_the_p_value_matches_the_exact_one() -> None:
    for n in range(300):
        for wins in range(n + 1):
            want = exact_p(wins, n - wins)
            assert math.isclose(timing._p_value(wins, n - wins), want, rel_tol=1e-9), (wins, n)
    assert timing._p_value(0, 0) == 1.0 and timing._p_value(10, 0) < timing.ALPHA


def test_decided_agrees_with_every_outcome_tried() -> None:
    checked = 0
    for wins in range(41):
        for losses in range(41 - wins):
            if wins + losses < timing.MIN_ROUNDS:
                continue
            for remaining in range(0, 41 - wins - losses):
                eager, compiled = rounds(wins, losses, ties=1)
                want = brute_decided(wins, losses, remaining)
                got = timing.decided(eager, compiled, remaining)
                assert got == want, (wins, losses, remaining)
                checked += 1
    assert checked > 5000


def test_a_long_tie_is_judged_at_any_round() -> None:
    eager, compiled = rounds(2500, 2500, ties=0)
    assert not timing.decided(eager, compiled, 5000)  # 5000 rounds could still show a speedup
    assert timing.decided(*rounds(5000, 5000, 0), remaining=10)  # 10 more cannot
    assert timing.sign_test(*rounds(5000, 5000, 0)) == 1.0
    assert timing.sign_test(*rounds(5200, 4800, 0)) < timing.ALPHA  # 52 % of 10,000 is shown


def shown_after(eager: list[float], compiled: list[float]) -> bool:
    """What a confirmation concludes of all its rounds (``autotune.choice.confirm.settle``):
    shown where the sign test says so and compiled won most of the rounds that were not ties."""
    won = sum(c < e for e, c in zip(eager, compiled, strict=True))
    lost = sum(c > e for e, c in zip(eager, compiled, strict=True))
    return timing.sign_test(eager, compiled) < timing.ALPHA and won > (won + lost) / 2


def counts(wins: int, losses: int, ties: int) -> list[tuple[float, float]]:
    """Rounds as (eager, compiled) milliseconds: ``wins`` won by compiled, then losses, ties."""
    return [(2.0, 1.0)] * wins + [(1.0, 2.0)] * losses + [(1.5, 1.5)] * ties


def test_a_confirmation_stops_only_where_all_its_rounds_would_say_not_shown() -> None:
    """Every count of wins, losses and ties a confirmation of 12 rounds can have so far (the
    verdict reads counts, not their order): wherever the rounds stop, every way the rest could
    go leaves the strategy not shown; and where any way shows it, they go on."""
    iters = 12
    stops, earliest = 0, iters
    for done in range(1, iters):
        for wins, losses in itertools.product(range(done + 1), repeat=2):
            if wins + losses > done:
                continue
            so_far = counts(wins, losses, done - wins - losses)
            stop = timing.none_can_show({"none": [e for e, _ in so_far],
                                         "k": [c for _, c in so_far]}, iters, "none")  # fmt: skip
            left = iters - done
            could = False
            for w, lo in itertools.product(range(left + 1), repeat=2):
                if w + lo <= left:
                    every = so_far + counts(w, lo, left - w - lo)
                    could |= shown_after([e for e, _ in every], [c for _, c in every])
            assert not (stop and could), (wins, losses, done)
            if done >= timing.MIN_ROUNDS:
                assert stop == (not could), (wins, losses, done)  # no round more than needed
            stops, earliest = stops + stop, min(earliest, done if stop else iters)
    assert stops > 50 and earliest == timing.MIN_ROUNDS  # never before the least rounds


def test_a_confirmation_goes_on_while_any_strategy_may_still_be_shown() -> None:
    eager = [1.5] * 5
    assert timing.none_can_show({"none": eager, "a": [2.0] * 5}, 12, "none")  # lost every round
    assert not timing.none_can_show({"none": eager, "a": [2.0] * 5, "b": [1.0] * 5}, 12, "none")
    assert not timing.none_can_show({"none": eager, "a": [1.0] * 5}, 12, "none")  # won all
    assert not timing.none_can_show({"none": eager[:4], "a": [2.0] * 4}, 12, "none")  # too few
    # at 12 rounds, 2 losses leave 10 wins of 12 possible (p = 0.039): it may still be shown
    assert not timing.none_can_show({"none": eager, "a": [1.0, 1.0, 1.0, 2.0, 2.0]}, 12, "none")
    assert timing.none_can_show({"none": eager, "a": [1.0, 1.0, 2.0, 2.0, 2.0]}, 12, "none")
