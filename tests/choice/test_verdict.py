"""The verdict: what was left out and why, the sentence, the confirmation of the pick, and when
the timed rounds may stop early."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.choice import confirm
from autotune.choice.confirm import passes, rivals, settle
from autotune.choice.selection import candidates, pareto, pick
from autotune.choice.verdict import excluded_summary, exclusions, verdict
from autotune.cli import main
from autotune.strategy import Strategy
from autotune.trial import timing
from autotune.trial.measurement import Measurement
from tests.helpers import S, hand_rows, point, stored


def _failed(strategy: Strategy, reason: str, number: int, status: str = "failed") -> object:
    payload = {**point(strategy, 1.0, 1.0), "status": status, "reason": reason, "latency": None}
    return stored(strategy.key, number, payload)


def test_every_excluded_strategy_is_named_with_its_reason_and_the_best_one_is_shown() -> None:
    rows = hand_rows()  # D: wrong answers at 1.9 ms, faster than anything feasible
    rows.append(_failed(Strategy.create("nested", "inductor"), "BackendCompilerFailed: inductor "
                        "raised CppCompileError: g++ failed", 10))  # fmt: skip
    rows.append(_failed(Strategy.create("regional", "inductor"), "no result within 60 s", 11,
                        "timeout"))  # fmt: skip
    summary = excluded_summary(exclusions(rows))
    assert summary["by_reason"] == {"wrong answers (accuracy)": 1, "failed: C++ compile error": 1,
                                    "timeout": 1}  # fmt: skip
    assert summary["best"]["key"] == S["D"].key and summary["best"]["speedup"] > 5


def test_eager_because_nothing_passed_is_not_eager_because_compiling_did_not_pay() -> None:
    nothing = [r for r in hand_rows(feasible=False)] + [stored("none", 0, point(S["none"], 0, 10))]
    points = candidates(nothing)
    summary = excluded_summary(exclusions(nothing))
    said = verdict(pick(points, "knee"), points, summary, "knee")
    assert said.startswith("don't compile: no compiled strategy passed (5 wrong answers")
    alone = [stored("none", 0, point(S["none"], 0, 10))]  # a budget that fit no trial
    said = verdict(pick(candidates(alone), "knee"), candidates(alone),
                   excluded_summary(exclusions(alone)), "knee")  # fmt: skip
    assert said.startswith("don't compile: no compiled strategy was measured (the time budget")
    rows = hand_rows()
    points = candidates(rows)
    said = verdict(pick(points, "amortized:100"), points, excluded_summary(exclusions(rows)),
                   "amortized:100")  # fmt: skip
    assert said.startswith("don't compile: compiling does not pay under amortized:100")
    said = verdict(pick(points, "fastest"), points, {}, "fastest")
    assert said.startswith(f"compile with {S['B'].key}: 5.00x eager")


def _rounds(eager: float, **compiled: float) -> dict[str, list[float]]:
    """Ten interleaved rounds: eager's latency, and each strategy's, with a little noise."""
    wobble = [0.0, 0.3, -0.2, 0.1, -0.1, 0.2, -0.3, 0.05, -0.05, 0.15]
    out = {"none": [eager + w for w in wobble]}
    for key, ms in compiled.items():
        out[key] = [ms + w * 0.9 for w in reversed(wobble)]
    return out


def test_a_lead_the_confirmation_does_not_show_goes_to_the_policy_s_tie_rule() -> None:
    points = candidates(hand_rows())
    chosen = pick(points, "fastest")  # B: 2 ms, by its trial
    assert chosen.key == S["B"].key
    # the rounds: B no quicker than A, both well ahead of eager
    said = settle(points, chosen, _rounds(10.0, **{S["A"].key: 5.0, S["B"].key: 5.0}),
                  "fastest", ("compile", "latency"))  # fmt: skip
    assert said.pick == S["A"].key  # a tie on latency: the quicker compile
    assert any("a tie" in line for line in said.lines)
    held = settle(points, chosen, _rounds(10.0, **{S["A"].key: 5.0, S["B"].key: 2.0}),
                  "fastest", ("compile", "latency"))  # fmt: skip
    assert held.pick == S["B"].key and not held.changed
    assert any(line.startswith(f"confirmed: {S['B'].key} beat eager in 10 of 10")
               for line in held.lines)  # fmt: skip


def test_a_rival_shown_faster_than_eager_keeps_that_when_it_ties_with_a_pick_that_was_not() -> (
    None
):
    points = [p for p in candidates(hand_rows()) if p.key in ("none", S["A"].key, S["B"].key)]
    chosen = pick(points, "fastest")
    rounds = _rounds(10.0, **{S["A"].key: 9.0})  # A beats eager in every round
    rounds[S["B"].key] = [8.5, 11.0] * 5  # B: 5 of 10 against eager, and 5 of 10 against A
    said = settle(points, chosen, rounds, "fastest", ("compile", "latency"))
    assert any(line.endswith(": a tie") for line in said.lines)
    assert said.latency_ms[S["A"].key] < said.latency_ms[S["B"].key] == points[0].latency_ms
    assert said.pick == S["A"].key


def test_a_speedup_that_was_noise_falls_back_to_the_next_and_then_to_eager() -> None:
    points = candidates(hand_rows())
    chosen = pick(points, "fastest")
    noise = settle(points, chosen, _rounds(10.0, **{S["B"].key: 10.0}), "fastest",
                   ("compile", "latency"))  # fmt: skip
    assert noise.pick == S["A"].key and noise.changed  # A's 5 ms, as its trial measured them
    alone = [p for p in points if p.key in ("none", S["B"].key)]
    noise = settle(alone, chosen, _rounds(10.0, **{S["B"].key: 10.0}), "fastest",
                   ("compile", "latency"))  # fmt: skip
    assert noise.pick == "none" and noise.changed
    assert any(line.startswith(f"not shown: {S['B'].key}") for line in noise.lines)


def _timer(truth: dict[str, float], asked: list[list[str]]):
    """Rounds in which each strategy takes its ``truth`` (eager 10 ms), and a note of each ask."""

    def time_rounds(keys: list[str]) -> tuple[dict[str, list[float]], float]:
        asked.append(keys)
        return _rounds(10.0, **{k: truth[k] for k in keys}), 1.0

    return time_rounds


def test_a_pick_the_rounds_did_not_time_is_confirmed_in_rounds_of_its_own(monkeypatch) -> None:
    points = candidates(hand_rows(with_nested=True))
    front, objectives = pareto(points), ("compile", "latency")
    chosen = pick(points, "fastest")
    assert chosen.key == S["B"].key
    noise = {S[k].key: 10.0 for k in ("A", "B", "N")}  # the first rounds show none of them
    asked: list[list[str]] = []
    said = passes(points, chosen, front, "fastest", objectives,
                  _timer({**noise, S["E"].key: 6.0}, asked))  # fmt: skip
    assert S["E"].key not in asked[0] and asked[1][0] == S["E"].key
    assert said.pick == S["E"].key and S["E"].key in said.latency_ms and said.chosen == chosen.key
    assert any("was not in those rounds" in line for line in said.lines)
    # no more passes allowed: the pick is the policy's among what the rounds timed (eager here)
    monkeypatch.setattr(confirm, "PASSES", 1)
    said = passes(points, chosen, front, "fastest", objectives,
                  _timer({**noise, S["E"].key: 6.0}, []))  # fmt: skip
    assert said.pick == "none" and "the strategies the rounds timed" in said.lines[-1]


def test_a_confirmation_that_fails_leaves_the_pick_unconfirmed_and_says_so() -> None:
    points = candidates(hand_rows())
    chosen = pick(points, "fastest")
    said = passes(points, chosen, pareto(points), "fastest", ("compile", "latency"),
                  lambda keys: (None, "crashed: child died of signal SIGKILL"))  # fmt: skip
    assert said.pick == chosen.key and said.status == "crashed" and not said.latency_ms
    assert said.lines[-1].startswith("not confirmed: the confirmation crashed")


def test_rivals_are_the_nearest_on_the_front_then_the_fastest() -> None:
    points = candidates(hand_rows())
    front = pareto(points)
    near = rivals(next(p for p in points if p.key == S["A"].key), points, front,
                  ("compile", "latency"))  # fmt: skip
    assert [p.key for p in near] == [S["B"].key, S["E"].key]  # B on the front, then fastest


def test_the_rounds_stop_once_the_sign_test_cannot_change() -> None:
    eager = [10.0] * 9
    assert timing.decided(eager, [5.0] * 9, remaining=1)  # 9 of 9: shown whatever comes
    assert not timing.decided(eager[:6], [5.0] * 5 + [11.0], remaining=4)  # 5 of 6: not yet
    assert timing.decided(eager[:6], [5, 11, 5, 11, 5, 11], remaining=4)  # can't reach 9 of 10
    assert not timing.decided(eager[:4], [5.0] * 4, remaining=6)  # too few rounds to stop


def test_the_summary_best_json_and_dashboard_say_the_same(in_tmp: Path, capsys) -> None:
    code = main(["search", "--model", "toy-64", "--layers", "2", "--backend", "eager,aot_eager",
                 "--granularity", "none,full", "--dynamic", "none", "--fullgraph", "false",
                 "--iters", "5", "--no-progress", "--study", "v", "--dashboard"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    block = json.loads((in_tmp / "studies" / "v" / "best.json").read_text())["autotune"]
    assert block["verdict"] in out and block["excluded"]["details"] in out
    assert block["accuracy_gate"]["reference"] == "float64" and "reference" in out
    assert block["confirmation"]["lines"][-1] in out
    page = (in_tmp / "dashboards" / "v.html").read_text()
    assert block["verdict"].replace("'", "&#x27;") in page
    assert main(["show", "--study", "v"]) == 0
    shown = capsys.readouterr().out
    assert "eager baseline" in shown and block["verdict"] in shown


@pytest.mark.parametrize("needed", [True, False])
def test_later_starts_are_measured_only_for_contenders(needed: bool) -> None:
    from autotune.trial.parent import later_starts

    cold = Measurement(Strategy.create("full").to_dict(), {}, {}, "ok", compile_s=9.0)
    ran: list[str] = []

    def run(kind: str) -> Measurement:
        ran.append(kind)
        return Measurement(cold.strategy, {}, {}, "ok", compile_s=2.0)

    starts = later_starts(cold, Strategy.create("full"), ("cold", "warm"), run, needed)
    assert (ran == ["warm"]) == needed
    assert (starts["warm"].status == "ok") == needed
    assert needed or "not a contender" in starts["warm"].note


def test_a_rival_stopped_early_is_said_to_have_stopped_and_counts_as_eager() -> None:
    points = candidates(hand_rows())
    chosen = next(p for p in points if p.key == S["B"].key)
    rounds = {"none": [10.0] * 12, S["B"].key: [11.0] * 5, S["A"].key: [5.0] * 12}
    said = settle(points, chosen, rounds, "fastest", ("compile", "latency"), planned=12)
    want = (f"not shown: {S['B'].key} beat eager in 0 of 5 rounds (p = 0.062, 0.91x); stopped: "
            "the 7 rounds left could not have shown it")  # fmt: skip
    assert said.lines[0] == want
    assert said.latency_ms[S["B"].key] == 10.0 and said.pick == S["A"].key
    whole = settle(points, chosen, rounds, "fastest", ("compile", "latency"), planned=5)
    assert "stopped" not in whole.lines[0]
    one = settle(points, chosen, rounds, "fastest", ("compile", "latency"), planned=6)
    assert one.lines[0].endswith("stopped: the round left could not have shown it")
