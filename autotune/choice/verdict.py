"""The verdict: the answer in one sentence, and every strategy left out with its reason.

A user must never see a silent "don't compile". The search's summary, ``best.json`` and the
dashboard's header all say how many strategies were excluded and why (grouped: wrong answers,
failures by kind, timeouts, implied failures), what the best excluded one would have given, and
whether eager was chosen because nothing compiled passed or because compiling did not pay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.choice.objectives import span
from autotune.choice.selection import Point
from autotune.errors import shorten
from autotune.trial.measurement import Measurement

if TYPE_CHECKING:
    from autotune.storage import Stored

# Failures a user recognises, by what their reason says (the first that matches names it).
_FAILURES = (
    ("CppCompileError", "C++ compile error"),
    ("out of memory", "out of memory"),
    ("OutOfMemoryError", "out of memory"),
    ("Unsupported", "Dynamo cannot trace it"),
    ("recompile limit", "recompile limit"),
    ("needs repeated blocks", "no repeated blocks"),
    ("BackendCompilerFailed", "the backend failed"),
)


CHEAP = "stopped at the cheap rung (could not reach the front)"


def _why(m: Measurement, over_memory: bool) -> str:
    """The group a left-out strategy belongs to, in a few words (a failure no label names: its
    first line, with the place it arose in kept, see :func:`autotune.errors.shorten`)."""
    if m.deduced and not m.ok:
        return "implied failure (not measured)"
    if m.ok and over_memory:
        return "over the memory limit"
    if m.feasible and m.cheap:
        return CHEAP
    if m.ok:
        return "wrong answers (accuracy)"
    if m.status != "failed":
        return {"not-applicable": "not applicable here"}.get(m.status, m.status)
    found = next((label for needle, label in _FAILURES if needle in m.reason), None)
    return f"failed: {found or shorten(m.reason.splitlines()[0], 140) if m.reason else 'failed'}"


def noise_floor(m: Measurement) -> str:
    """The eager baseline's speedup as what it is: a trial of granularity ``none`` times eager
    against eager, interleaved, so its distance from 1.00x is the noise floor of the study's
    speedups, not a result (``noise floor ±8.0% (eager against itself: 1.08x)``); "" for any
    other trial, or one without a speedup."""
    if m.strategy.granularity != "none" or not m.speedup:
        return ""
    return f"noise floor ±{abs(m.speedup - 1):.1%} (eager against itself: {m.speedup:.2f}x)"


@dataclass(frozen=True)
class Excluded:
    """A stored strategy that no policy may pick, and why; what it would have given where it
    ran (its point on the study's common scale)."""

    key: str
    why: str
    detail: str
    point: Point | None = None


def exclusions(stored: Iterable[Stored], max_memory_mb: float | None = None) -> list[Excluded]:
    """Every stored strategy left out of the candidates, with its reason (eager never is)."""
    rows = list(stored)
    base = next((Measurement.from_dict(r.payload) for r in rows if r.key == "none"), None)
    baseline = base if base is not None and base.ok else None
    found = []
    for row in rows:
        m = Measurement.from_dict(row.payload)
        over = bool(max_memory_mb and m.memory and m.memory.compiled_peak_mb > max_memory_mb)
        if row.key == "none" or (m.feasible and not over and not m.cheap):
            continue
        point = Point.of(m, row.trial_number, baseline) if m.ok and m.latency else None
        why = _why(m, over)
        judged = m.ok and m.accuracy and not over and why != CHEAP  # else the reason says why
        detail = (m.accuracy.detail if judged else m.reason) or m.status
        found.append(Excluded(row.key, why, shorten(detail.splitlines()[0], 300), point))
    return found


def excluded_summary(found: list[Excluded]) -> dict[str, Any]:
    """How many were left out, by reason (most first), and the best of those that ran: what
    it would have given."""
    counts: dict[str, int] = {}
    for e in found:
        counts[e.why] = counts.get(e.why, 0) + 1
    ran = [(e.point.latency_ms, e.point.compile_s, e) for e in found
           if e.point is not None and e.why != CHEAP]  # fmt: skip  # dominated: it gave no more
    by_reason = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    summary: dict[str, Any] = {"count": len(found), "by_reason": by_reason}
    if ran:
        best = min(ran, key=lambda r: r[:2])[2]
        assert best.point is not None
        summary["best"] = {"key": best.key, "why": best.why, "detail": best.detail,
                           "speedup": best.point.speedup, "compile_s": best.point.compile_s,
                           "latency_ms": best.point.latency_ms}  # fmt: skip
    return summary


def excluded_line(summary: dict[str, Any]) -> str:
    """``9 wrong answers (accuracy), 1 failed: C++ compile error`` (or ``none``)."""
    parts = [f"{n} {why}" for why, n in summary["by_reason"].items()]
    return ", ".join(parts) or "none"


def break_even(p: Point, eager: Point, good: bool = False) -> float | None:
    """After how many calls compiling ``p`` pays against eager (None: it never does);
    ``good``: a call costs ``1 / goodput`` (:meth:`Point.total_s`)."""
    saved_s = eager.total_s(1, good=good) - eager.compile_s - p.total_s(1, good=good) + p.compile_s
    return p.compile_s / saved_s if saved_s > 0 else None


def lifetime_line(chosen: Point, points: list[Point], calls: float,
                  serving_s: float | None = None, good: bool = False) -> str:  # fmt: skip
    """Over a lifetime of ``calls`` calls (a generate study's: decode tokens): what the pick
    saves over eager and over the runner-up, and after how many calls compiling pays. A
    lifetime stated in serving time (``serving_s`` seconds of calls back to back at eager's
    latency) says so, and the break-even in serving time too. ``good``: a goodput study's,
    each request costing ``1 / goodput`` (:meth:`Point.total_s`)."""
    eager = next((p for p in points if p.key == "none"), None)

    def total(p: Point) -> float:
        return p.total_s(calls, good=good)

    ranked = sorted(points, key=lambda p: (total(p), p.latency_ms))
    unit = f"{points[0].per}s" if points else "calls"
    over = f"over {calls:,.0f} {unit}"
    if serving_s is not None:
        per_call = serving_s * 1e3 / calls
        over = f"over {span(serving_s)} of serving ({calls:,.0f} {unit} at {per_call:.3g} ms)"
    if good:
        over += " within the SLO, at each one's goodput"
    words = [f"{over} the pick costs {total(chosen):.1f} s"]
    if eager is not None and chosen.key != "none":
        words.append(f"{total(eager) - total(chosen):.1f} s less than eager")
    runner = next((p for p in ranked if p.key != chosen.key), None)
    if runner is not None:
        words.append(f"{total(runner) - total(chosen):.1f} s less than the runner-up, "
                     f"{runner.key}")  # fmt: skip
    fastest = min((p for p in points if p.key != "none"), default=None,
                  key=lambda p: -(p.goodput or 0.0) if good else p.latency_ms)  # fmt: skip
    shown = chosen if chosen.key != "none" else fastest
    if eager is not None and shown is not None:
        calls_to_pay = break_even(shown, eager, good)
        served = "" if serving_s is None or calls_to_pay is None else (
            f" ({span(calls_to_pay * eager.latency_ms / 1e3)} of serving)")  # fmt: skip
        words.append(
            f"compiling {shown.key} pays after {calls_to_pay:,.0f} {unit}{served}"
            if calls_to_pay is not None
            else f"compiling {shown.key} never pays: "
            + ("its goodput is no higher" if good else "it is not faster")
        )
    return "; ".join(words)


def verdict(chosen: Point, points: list[Point], summary: dict[str, Any], policy: str,
            good: bool = False) -> str:  # fmt: skip
    """The answer in one sentence; when it is eager, whether that is because nothing compiled
    passed or because compiling did not pay. Under a lifetime (``amortized:CALLS`` or
    ``amortized:TIME``), what the pick saves and after how many calls compiling pays (``good``:
    goodput is an objective, see :func:`lifetime_line`)."""
    from autotune.choice.objectives import parse_policy
    from autotune.choice.selection import lifetime_calls

    name, args = parse_policy(policy)
    sentence = _verdict(chosen, points, summary, policy)
    calls = lifetime_calls(policy, points)
    if calls is None:
        return sentence
    serving_s = args[0] if name == "serving" else None
    return f"{sentence}; {lifetime_line(chosen, points, calls, serving_s, good)}"


def _verdict(chosen: Point, points: list[Point], summary: dict[str, Any], policy: str) -> str:
    if chosen.key != "none":
        eager = next((p for p in points if p.key == "none"), None)
        good = (
            ""
            if chosen.goodput is None
            else f", goodput {chosen.goodput:.2f} req/s"
            + ("" if eager is None or eager.goodput is None else f" (eager {eager.goodput:.2f})")
        )
        return (f"compile with {chosen.key}: {chosen.speedup:.2f}x eager{good} after a "
                f"{chosen.compile_s:.1f} s cold compile ({policy})")  # fmt: skip
    compiled = [p for p in points if p.key != "none"]
    if not compiled and (cheap := summary["by_reason"].get(CHEAP)):  # dominated by eager
        return (f"don't compile: {cheap} compiled strategies passed, none ran faster than eager "
                f"in any of its cheap rounds (left out: {excluded_line(summary)})")  # fmt: skip
    if not compiled and not summary["count"]:  # none was measured at all
        return ("don't compile: no compiled strategy was measured (the time budget fit none, "
                "or the space holds eager alone)")  # fmt: skip
    if not compiled:
        left = excluded_line(summary)
        return f"don't compile: no compiled strategy passed ({left})"
    faster = [p for p in compiled if p.significant and p.speedup > 1.0]
    if not faster:
        return (f"don't compile: none of the {len(compiled)} compiled strategies that passed "
                "was shown faster than eager (sign test)")  # fmt: skip
    best = min(faster, key=lambda p: p.latency_ms)
    return (
        f"don't compile: compiling does not pay under {policy} (the fastest, {best.key}, "
        f"runs {best.speedup:.2f}x eager; its compile takes {best.compile_s:.1f} s)"
    )


@dataclass
class Answer:
    """What a study answers, in one place, so that the search's summary, ``best.json`` and the
    dashboard's header say the same: the pick (confirmed or not), the sentence, what was left
    out and why, and the accuracy gate that was used."""

    chosen: Point
    points: list[Point]
    front: list[Point]
    sentence: str
    excluded: dict[str, Any]
    gate: dict[str, Any]
    details: str  # the command that lists every strategy with its reason
    confirmation: dict[str, Any] | None = None

    def lines(self) -> list[str]:
        """The closing summary, as the search prints it."""
        out = [self.sentence]
        out.append(f"left out: {excluded_line(self.excluded)}")
        if best := self.excluded.get("best"):
            out.append(f"  the best of them, {best['key']} ({best['why']}), would have given "
                       f"{best['speedup']:.2f}x eager after a {best['compile_s']:.1f} s "
                       f"compile: {best['detail']}")  # fmt: skip
        if self.confirmation:
            out += self.confirmation["lines"]
        else:
            out.append("not confirmed (no confirmation was run)")
        out.append(f"accuracy gate: {self.gate.get('rule') or 'none recorded'}")
        out.append(f"details: {self.details}")
        return out

    def block(self) -> dict[str, Any]:
        """The ``autotune`` block's part of it in ``best.json``."""
        return {"verdict": self.sentence, "excluded": {**self.excluded, "details": self.details},
                "accuracy_gate": self.gate, "confirmation": self.confirmation}  # fmt: skip


def answer(rows: list[Stored], study: str, objectives: tuple[str, ...], policy: str,
           max_memory_mb: float | None = None,
           confirmation: tuple[str, dict[str, Any]] | None = None) -> Answer:  # fmt: skip
    """The study's answer under ``policy`` over ``objectives`` (a stored study's
    ``StudySpec.objectives``) from its stored rows; a confirmation of the same pick (as stored
    by :mod:`autotune.choice.confirm`) decides it."""
    from autotune.choice.selection import choose

    chosen, points, front = choose(rows, policy, objectives, max_memory_mb)
    confirmed = None
    if confirmation is not None and confirmation[1].get("chosen") == chosen.key:
        from autotune.choice.confirm import confirmed_points
        from autotune.choice.selection import pareto

        confirmed = confirmation[1]
        points = confirmed_points(
            points, confirmed.get("latency_ms") or {}, confirmed.get("speedup") or {}
        )
        front = pareto(points, objectives)
        chosen = next((p for p in points if p.key == confirmation[0]), chosen)
    excluded = excluded_summary(exclusions(rows, max_memory_mb))
    said = verdict(chosen, points, excluded, policy, "goodput" in objectives)
    return Answer(chosen, points, front, said, excluded, gate(rows),
                  f"autotune show --study {study}", confirmed)  # fmt: skip


def gate(rows: list[Stored]) -> dict[str, Any]:
    """The accuracy gate the study's compiled trials were judged by (one for the study)."""
    for row in rows:
        a = (row.payload.get("accuracy") or {}) if row.key != "none" else {}
        if a.get("rule"):
            return {"rule": a["rule"], "tolerance": a.get("tolerance", 1.0),
                    "reference": a.get("reference", "")}  # fmt: skip
    return {}
