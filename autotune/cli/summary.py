"""What ``autotune search`` prints: its heading (:func:`heading`) and, once its study is
finished, the ``--json`` document or the summary's lines, both read from the finished study
(:attr:`autotune.job.tuning.Tuned.view`)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.cli import report, text, traffic_lines

if TYPE_CHECKING:
    from autotune.job.tuning import Tuned
    from autotune.search import Outcome, Search, StudySpec
    from autotune.search.plan import Plan


def heading(search: Search, asked: str | None) -> list[str]:
    """The study and its storage; the dtype's line, where the dtype asked for runs slowly
    here or ``auto`` chose one (:func:`autotune.environment.dtype_line`)."""
    from autotune.environment import dtype_line

    workload = search.spec.workload
    line = dtype_line(asked, workload.dtype, workload.device)
    return [f"study {search.name} in {search.storage_shown}", *([line] if line else [])]


UNSTARTED = "not measured: the time budget fit no trial of it"  # a preset a search never started
SPENT = 0.8  # of the budget: a search that ends sooner says why its answer is decided


def ending(plan: Plan, stopped: str, total_s: float, trials: int) -> str:
    """Whether a search under a budget spent it or ended decided, in one line ("" without a
    budget): before :data:`SPENT` of it only where every strategy that could change the pick
    was measured or ruled out (the space, the trials asked for, or the cost of the next trial
    that could decide against what was left: ``Plan.held``)."""
    if plan.budget_s is None:
        return ""
    used = f"{total_s / plan.budget_s:.0%} of the {plan.budget_s / 60:.3g} min budget"
    if total_s >= SPENT * plan.budget_s:
        return f"budget: spent, {used}"
    why = {"exhausted": "every strategy of the space was measured or ruled out",
           "budget": f"the {trials} trials asked for were measured",
           "time": plan.held}.get(stopped, f"stopped ({stopped})")  # fmt: skip
    return f"budget: decided at {used}: {why}"


@dataclass
class Finished:
    """A finished search as its summary reads it."""

    search: Search
    spec: StudySpec
    outcome: Outcome
    tuned: Tuned
    page: Path | None
    began: float

    def __post_init__(self) -> None:
        from autotune.search import stops

        view = self.tuned.view
        assert view is not None and self.tuned.chosen is not None
        self.told = view.answer(self.spec.policy, self.spec.max_memory_mb)
        self.rows, self.tally = view.rows, view.tally()
        self.split = self.search.plan.split(time.time() - self.began)
        self.cut = stops.stopped_trials(self.search)
        self.ending = ending(self.search.plan, self.outcome.stopped, self.split["total"],
                             self.spec.trials)  # fmt: skip

    def document(self) -> dict[str, Any]:
        """The ``--json`` document."""
        s, t, tally = self.spec, self.tuned, self.tally
        assert t.chosen is not None
        return {
            "study": self.search.name, "storage": self.search.storage_shown,
            "stopped": self.outcome.stopped, "measured": tally["measured"],
            "deduced": tally["deduced"], "repeats": self.outcome.repeats, "policy": s.policy,
            "chosen": t.chosen.key, "export": str(t.path), "caveats": t.notes,
            "dashboard": str(self.page) if self.page else None,
            "pareto_front": [dataclasses.asdict(p) for p in self.told.front], **self.told.block(),
            "budget_s": s.time_budget_s, "seconds": self.split, "ending": self.ending,
            "stopped_at_budget": [{"strategy": c.key, "seconds": round(c.seconds, 1),
                                   "why": c.why} for c in self.cut],
        }  # fmt: skip

    def served(self, key: str) -> list[str]:
        """The pick over its traffic: time to ready and its stalls, and, generating, its time
        to first token and per token over the traffic against eager's (none at one shape)."""
        from autotune.trial.measurement import Measurement

        if key == "none":  # eager's figures are the baseline's own: nothing to set beside them
            return []
        row = next((r for r in self.rows if r.key == key), None)
        m = Measurement.from_dict(row.payload) if row is not None else None
        if m is not None and m.traffic and "continuous" in m.traffic:
            return traffic_lines.traffic_lines(m)[:2] + traffic_lines.intervals_lines(
                m.traffic.get("auto"))  # fmt: skip
        if m is None or not m.traffic or "ready_s" not in m.traffic:
            return []
        out = traffic_lines.traffic_lines(m)[:1]
        if weighted := m.traffic.get("weighted"):
            w = {k: f"{v:.3g}" for k, v in weighted.items()}
            out.append(f"           over the traffic: TTFT {w['ttft_ms']} ms (eager "
                       f"{w['eager_ttft_ms']} ms), {w['tpot_ms']} ms a token (eager "
                       f"{w['eager_tpot_ms']} ms)")  # fmt: skip
        return out

    def presets(self) -> list[str]:
        """A continuous study's pick beside transformers' presets (:mod:`.presets`)."""
        from autotune.choice import presets

        if self.spec.workload.kind != "continuous":
            return []
        assert self.tuned.chosen is not None
        statuses = [(r.payload.get("strategy") or {}, r.status) for r in self.rows]
        members = {s.key: s.to_dict() for s in self.search.members}
        stopped = [(members[c.key], c.seconds) for c in self.cut if c.key in members]
        if self.outcome.stopped == "time":  # a preset of the space never started: the budget's
            ran = {r.key for r in self.rows} | {c.key for c in self.cut}
            statuses += [(s, UNSTARTED) for k, s in members.items() if k not in ran]
        found = presets.line(self.tuned.chosen, self.told.points, statuses, self.spec.policy,
                             stopped, "goodput" in self.spec.objectives)  # fmt: skip
        return [found] if found else []

    def lines(self) -> list[str]:
        """The summary a person reads."""
        s, t, tally = self.spec, self.tuned, self.tally
        assert t.chosen is not None
        out = [f"stopped: {self.outcome.stopped}; {tally['measured']} strategies measured in "
               f"this study, {tally['deduced']} deduced without measuring, "
               f"{self.outcome.repeats} sampler repeats reused their stored values"]  # fmt: skip
        for stop in self.cut:
            after = stop.why.removeprefix("stopped at the time budget ")
            out.append(f"stopped at the time budget: {stop.key}, {after}; a later run of this "
                       "study with a larger --time-budget measures it")  # fmt: skip
        if self.split:
            out.append(text.time_split(self.split))
        if self.ending:
            out.append(self.ending)
        speed = "time in the server" if s.workload.kind == "continuous" else "median latency"
        out += [f"\nPareto front (cold compile vs {speed}, feasible trials and eager):",
                report.front_table(self.told.front, t.chosen.key, s.settings.starts),
                f"\nchosen ({s.policy}): {t.chosen.key}", *self.served(t.chosen.key),
                *self.presets(),
                *self.told.lines(), *(f"note: {note}" for note in t.notes)]  # fmt: skip
        if loaded := report.load_note([r.payload for r in self.rows]):
            out.append(loaded)
        out.append(f"wrote {t.path}")
        if self.page:
            out.append(f"wrote {self.page}")
        return out
