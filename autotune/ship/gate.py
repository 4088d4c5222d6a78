"""The CI gate, ``autotune check FILE --measure``: the pick a ``best.json`` ships, measured again
here and now, against what the file recorded.

An export records, in a versioned ``gate`` block, what the chosen trial measured and how: the
model reference, workload (traffic included) and rounds, and the figures (:func:`figures`).
The gate re-measures the same strategy cold in a fresh process, as a search's trial, and says
for each figure ``was → now → verdict``:

- graphs, graph breaks, recompiles, requests served eager: any increase fails, named with the
  new break or recompile reason;
- cold compile and time to ready: fail above the record by more than ``tolerance`` (a
  fraction) and :data:`SLACK_S` seconds;
- latency: a regression only where the paired rounds show it (a sign test of each round's
  speedup against the recorded one, at :data:`GATE_ALPHA`); a pick no faster than eager any
  more fails on its own line; rounds taken while other processes used more than
  :data:`LOAD` of the CPU are said to be, and not judged;
- accuracy: the gate against the reference must pass.

A pick of eager is gated on its runner-up, the best compiled strategy the file records, which
fails the build only under ``strict``. What differs in the environment (torch, the CPU or GPU)
is said first, as context, never a failure by itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.starts.later import hit_note
from autotune.trial.measurement import Measurement
from autotune.trial.metrics import LOADED
from autotune.trial.timing import ALPHA, sign_test

if TYPE_CHECKING:
    from autotune.workload import Settings

VERSION = 1
TOLERANCE = 0.5  # of a recorded compile time or time to ready (docs/ci.md: the noise seen)
SLACK_S = 1.0  # seconds a compile may grow by besides: a 0.3 s compile's noise is its own size
LOAD = LOADED  # of the CPU, taken by other processes during the rounds: latency not judged
# A latency regression must show at this level: a gate runs on every build, and at the search's
# 0.05 an unchanged pick would fail one run in forty (one side of the two-sided test)
GATE_ALPHA = 0.01
CONTEXT = ("torch", "cuda", "device_name", "cpu", "cpu_capability", "cpu_bf16", "driver")


def figures(m: Measurement) -> dict[str, Any]:
    """What a measurement says that the gate compares (a figure it did not measure absent)."""
    found: dict[str, Any] = {"compile_s": m.compile_s, "speedup": m.speedup}
    if m.graphs is not None:
        found.update(graphs=m.graphs.count, breaks=m.graphs.breaks,
                     recompiles=m.graphs.recompiles, break_reasons=m.graphs.break_reasons,
                     recompile_reasons=m.graphs.recompile_reasons)  # fmt: skip
    if m.traffic:
        found.update(ready_s=m.traffic.get("ready_s"),
                     ran_eager=len(m.traffic.get("ran_eager") or []))  # fmt: skip
    if m.latency is not None and m.eager_latency is not None:
        found.update(latency_ms=m.latency.median_ms, eager_ms=m.eager_latency.median_ms,
                     shown=sign_test(m.eager_latency.samples_ms, m.latency.samples_ms) < ALPHA
                     and m.latency.median_ms < m.eager_latency.median_ms)  # fmt: skip
    if m.accuracy is not None:
        found["accuracy"] = m.accuracy.passed
    start = m.starts.get("portable")
    if start is not None and start.status == "ok" and start.measured:
        found.update(
            portable_s=start.compile_s, portable_hit=not hit_note("portable", start.cache)
        )
    return {k: v for k, v in found.items() if v is not None}


def record(m: Measurement, settings: Settings,
           runner_up: Measurement | None = None) -> dict[str, Any]:  # fmt: skip
    """The ``gate`` block of an export whose pick ``m`` measured (and, for an eager pick, its
    ``runner_up``), with the rounds and seed from the study's ``settings``."""
    block: dict[str, Any] = {
        "version": VERSION,
        "model": m.model.to_dict() if m.model else None,
        "workload": m.workload.to_dict() if m.workload else None,
        "iters": settings.iters,
        "warmup": settings.warmup,
        "seed": settings.seed,
        "strategy": m.strategy.to_dict(),
        "figures": figures(m),
    }
    if runner_up is not None:
        block["runner_up"] = {"strategy": runner_up.strategy.to_dict(),
                              "figures": figures(runner_up)}  # fmt: skip
    return block


def read(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The ``gate`` block of an export's ``data``; a file without one (exported before it
    existed, or not by autotune) is refused in one line that says how to get one."""
    block = data.get("autotune") if isinstance(data.get("autotune"), dict) else {}
    gate = block.get("gate")
    if not isinstance(gate, dict) or not isinstance(gate.get("figures"), dict):
        raise ConfigError(f"{path} records nothing to gate on (exported before autotune "
                          "kept a gate block): export it again (autotune export)")  # fmt: skip
    if gate.get("version") != VERSION:
        raise ConfigError(f"{path}'s gate block is version {gate.get('version')!r}; this "
                          f"autotune reads {VERSION}: export it again")  # fmt: skip
    if not gate.get("model") or not gate.get("workload"):
        raise ConfigError(f"{path}'s gate block names no model or workload: export it again")
    return gate


@dataclass
class Verdict:
    """One figure: what was recorded, what was measured now, and whether that passes."""

    name: str
    was: Any
    now: Any
    passed: bool
    why: str = ""

    def line(self) -> str:
        shown = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
        verdict = "ok" if self.passed else "REGRESSED"
        return (f"{self.name:<11} {shown(self.was)} → {shown(self.now)} → {verdict}"
                + (f" ({self.why})" if self.why else ""))  # fmt: skip


def _new(reasons_was: list[str], reasons_now: list[str]) -> str:
    fresh = [r for r in reasons_now if r not in reasons_was]
    return f"new: {fresh[0]}" if fresh else ""


def compare(was: dict[str, Any], m: Measurement, tolerance: float = TOLERANCE,
            load: float = LOAD) -> list[Verdict]:  # fmt: skip
    """Each figure the record holds against the measurement ``m`` (see the module's text;
    ``load``: the share of the CPU others may take before latency is not judged)."""
    now = figures(m)
    found = []
    for name, reasons in (("graphs", "recompile_reasons"), ("breaks", "break_reasons"),
                          ("recompiles", "recompile_reasons"), ("ran_eager", "")):  # fmt: skip
        if name in was and name in now:
            grew = now[name] > was[name]
            why = _new(was.get(reasons, []), now.get(reasons, [])) if grew and reasons else ""
            found.append(Verdict(name, was[name], now[name], not grew, why))
    for name in ("compile_s", "ready_s", "portable_s"):
        if name in was and name in now:
            limit = was[name] * (1 + tolerance) + SLACK_S
            found.append(Verdict(name, was[name], now[name], now[name] <= limit,
                                 "" if now[name] <= limit else f"over {limit:.3g} s"))  # fmt: skip
    found += _latency(was, m, now, load)
    if "portable_hit" in was and "portable_hit" in now:
        start = m.starts.get("portable")
        why = hit_note("portable", start.cache) if start is not None else ""
        found.append(Verdict("portable_hit", was["portable_hit"], now["portable_hit"],
                             now["portable_hit"] or not was["portable_hit"], why))  # fmt: skip
    if "accuracy" in was and "accuracy" in now:
        detail = m.accuracy.detail if m.accuracy is not None and not now["accuracy"] else ""
        found.append(Verdict("accuracy", was["accuracy"], now["accuracy"], now["accuracy"],
                             detail))  # fmt: skip
    return found


def _latency(was: dict[str, Any], m: Measurement, now: dict[str, Any],
             limit: float) -> list[Verdict]:  # fmt: skip
    """The speedup against the recorded one, and against eager, by the paired rounds."""
    if "speedup" not in was or m.latency is None or m.eager_latency is None:
        return []
    load = m.timings.get("others_cpu", 0.0)
    if load > limit:
        return [Verdict("speedup", was["speedup"], now.get("speedup"), True,
                        f"not judged: other processes took {load:.0%} of the CPU during the "
                        "rounds")]  # fmt: skip
    eager, compiled = m.eager_latency.samples_ms, m.latency.samples_ms
    scaled = [c * was["speedup"] for c in compiled]  # as fast as recorded: half the rounds
    p = sign_test(eager, scaled)
    slower = sum(e < s for e, s in zip(eager, scaled, strict=False))
    regressed = p < GATE_ALPHA and slower > len(eager) / 2
    found = [Verdict("speedup", was["speedup"], now["speedup"], not regressed,
                     f"slower than recorded in {slower} of {len(eager)} rounds, p = {p:.2g}"
                     if regressed else "")]  # fmt: skip
    if was.get("shown") and not now.get("shown"):  # fails where it is no faster at all
        p_eager = sign_test(eager, compiled)
        faster = now["speedup"] > 1.0
        why = (f"the rounds do not show it faster than eager (p = {p_eager:.2g}), though its "
               f"median is {now['speedup']:.2f}x: too few or too noisy to tell" if faster else
               f"no faster than eager: {now['speedup']:.2f}x (p = {p_eager:.2g})")  # fmt: skip
        found.append(Verdict("beats eager", True, faster, faster, why))
    return found


@dataclass
class Report:
    """What the gate found: the context, the verdicts, and the exit code."""

    file: str
    strategy: str
    context: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gated: bool = True  # False: the verdicts are a runner-up's, which fail only when strict

    @property
    def regressed(self) -> bool:
        return self.gated and any(not v.passed for v in self.verdicts)

    @property
    def code(self) -> int:
        return 1 if self.regressed else 0

    def lines(self) -> list[str]:
        head = [f"gate {self.file}: {self.strategy}", *self.context]
        tail = [f"{'REGRESSED' if self.regressed else 'passed'}: "
                f"{sum(not v.passed for v in self.verdicts)} of {len(self.verdicts)} figures "
                "regressed"]  # fmt: skip
        return head + [v.line() for v in self.verdicts] + self.notes + tail

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "regressed": self.regressed, "code": self.code}


def context(made: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """What differs between the machine the file was made on and this one, as context."""
    return [f"context: {k} was {made[k]!r}, is {here.get(k)!r}" for k in CONTEXT
            if made.get(k) is not None and made.get(k) != here.get(k)]  # fmt: skip


def check(
    path: str, tolerance: float = TOLERANCE, strict: bool = False, allow: tuple[str, ...] = (),
    update: bool = False, load: float = LOAD, trust_artifact: bool = False,
) -> Report:  # fmt: skip
    """Measure again the pick that the export ``path`` ships (its runner-up, where the pick is
    eager) and compare it with the record; ``update`` writes the new figures into the file.
    Code the file names (a ``package.module:function`` model or backend) runs only where
    ``allow`` names it; the cache artefact it ships (which runs code when loaded) is loaded for
    a portable start only where ``trust_artifact``. A file that cannot be gated raises
    ``ConfigError``."""
    import json
    from pathlib import Path

    from autotune import usercode
    from autotune.catalog import ModelRef
    from autotune.environment import fingerprint
    from autotune.ship import exported
    from autotune.strategy import Strategy
    from autotune.trial import parent
    from autotune.trial.measurement import Start
    from autotune.workload import Settings, Workload

    _, data = exported.read(path)
    gate = read(data, path)
    model, workload = ModelRef.from_dict(gate["model"]), Workload.from_dict(gate["workload"])
    subject, was, gated = gate["strategy"], gate["figures"], True
    notes = []
    if Strategy.from_dict(subject).granularity == "none":
        runner = gate.get("runner_up")
        if not isinstance(runner, dict):
            return Report(path, "none", notes=["the pick is eager and the file records no "
                                               "compiled runner-up: nothing to gate"])  # fmt: skip
        subject, was, gated = runner["strategy"], runner["figures"], strict
        notes.append("the pick is eager: these are its runner-up's figures, which fail the "
                     "build only with --strict")  # fmt: skip
    strategy = Strategy.from_dict(subject)
    for what, name in (("model", model.name), ("backend", strategy.backend)):
        if usercode.is_code(name) and not usercode.allowed(name, allow):
            module = name.partition(":")[0]
            raise ConfigError(f"{path} names code that the gate would import and run ({what} "
                              f"{name}): allow it with --allow-code {module}")  # fmt: skip
    settings = Settings(
        iters=gate["iters"],
        warmup=gate["warmup"],
        seed=gate["seed"],
        starts=("cold",),
        least=gate["iters"],
    )  # every round: none cut short
    m = parent.measure(model, workload, strategy, settings)
    block = data["autotune"]
    made = block.get("environment") if isinstance(block.get("environment"), dict) else {}
    report = Report(path, strategy.key, context(made, fingerprint(workload.device)),
                    notes=notes, gated=gated)  # fmt: skip
    if m.status == "not-applicable":  # a device or feature this machine lacks: not checked
        raise ConfigError(f"cannot measure {strategy.key} here: {m.reason}")
    if not m.ok:  # it no longer compiles or runs: a regression, named
        report.verdicts.append(Verdict("status", "ok", m.status, False, m.reason[:300]))
        return report
    shipped = (block.get("cache_artifact") or {}).get("file")
    if "portable_s" in was and isinstance(shipped, str) and gated:
        if trust_artifact:
            start = parent.portable(model, workload, strategy,
                                    str(Path(path).with_name(shipped)), settings)  # fmt: skip
            if start.ok:
                m.starts["portable"] = Start("portable", compile_s=start.compile_s,
                                             cache=start.cache)  # fmt: skip
        else:
            report.notes.append(f"the portable start from {shipped} was not measured: it runs "
                                "code when loaded; --trust-artifact loads it")  # fmt: skip
    report.verdicts = compare(was, m, tolerance, load)
    if not gated and (speedup := m.speedup):
        report.notes.append(f"compiling {strategy.key} now runs {speedup:.2f}x eager")
    if update:
        key = "figures" if gated or "runner_up" not in gate else "runner_up"
        target = gate if key == "figures" else gate["runner_up"]
        target["figures"] = figures(m)
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
        report.notes.append(f"updated {path}'s record with these figures")
    return report


def junit(report: Report) -> str:
    """The verdicts as JUnit XML, one test case a figure (GitHub Actions, GitLab and Jenkins
    show it)."""
    import xml.etree.ElementTree as ET

    failed = sum(not v.passed for v in report.verdicts) if report.gated else 0
    suite = ET.Element("testsuite", name=f"autotune gate: {report.strategy}",
                       tests=str(len(report.verdicts)), failures=str(failed))  # fmt: skip
    for v in report.verdicts:
        case = ET.SubElement(suite, "testcase", classname="autotune.gate", name=v.name)
        if not v.passed and report.gated:
            ET.SubElement(case, "failure", message=v.line()).text = v.why
    return ET.tostring(suite, encoding="unicode")
