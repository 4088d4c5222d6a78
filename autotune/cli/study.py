"""The commands over a stored study: models, submit, worker, queue-worker, show, studies, export,
dashboard, check."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from autotune.cli.parser import allowed_code
from autotune.errors import ConfigError


def cmd_models(args: argparse.Namespace) -> int:
    from autotune import catalog

    rows = catalog.presets()
    width = max(map(len, rows))
    for name, description in rows.items():
        print(f"{name:<{width}}  {description}")
    print("\nAlso: a directory holding a transformers config.json, or package.module:function")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from autotune.search import submit
    from autotune.search.spec import StudySpec
    from autotune.storage import Store, mask

    spec = StudySpec.from_sources(args.space, study=args.study)
    name = submit(spec, args.storage)
    print(f"submitted study {name} to {mask(Store(args.storage, create=False).url)}")
    print(f"run it with: autotune worker --study {name} --storage URL")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from autotune.cli.progress import Progress
    from autotune.job.study_worker import work

    def bar(search: Any) -> Progress:
        return Progress.of(search, not args.no_progress)

    outcome = work(args.study, args.storage, device=args.device, force=args.force,
                   allow=allowed_code(args), trials=args.trials, listener=bar)  # fmt: skip
    return 130 if outcome.stopped == "interrupted" else 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from autotune import dashboard
    from autotune.search.spec import check_name
    from autotune.storage import Store

    if not args.study:
        raise ConfigError("give --study NAME")
    name = check_name(args.study)
    path = dashboard.write(Store(args.storage, create=False), name, args.out, args.policy)
    print(f"wrote {path}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from autotune.choice.verdict import exclusions
    from autotune.cli import report
    from autotune.ship.study import load_study

    if not args.study:
        raise ConfigError("give --study NAME (autotune studies lists them)")
    study = load_study(args.study, args.storage)
    rows = study.rows
    if args.trial is not None:
        return _show_trial(rows, args.trial, study.name)
    print(report.trials_table(rows, exclusions(rows, study.spec.max_memory_mb)))
    if any(r.key == "none" and r.status == "ok" for r in rows):
        told = study.answer(args.policy)
        print()
        print("\n".join(told.lines()[:-1]))
    return 0


def _show_trial(rows: list[Any], wanted: str, study: str) -> int:
    """One stored strategy of a study in full: status, whole reason, the child's traceback."""
    from autotune.cli import report
    from autotune.trial.measurement import Measurement

    row = next((r for r in rows if r.key == wanted or str(r.trial_number) == wanted), None)
    if row is None:
        raise ConfigError(f"study {study} has no strategy or trial {wanted!r} (autotune show "
                          f"--study {study} lists them)")  # fmt: skip
    m = Measurement.from_dict(row.payload)
    print(report.summary(m))  # its whole reason too
    if m.traceback:
        print("\nthe child's traceback:\n" + m.traceback.rstrip())
    elif not m.ok:
        print("no traceback kept (an error autotune reported itself, or an older trial)")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from autotune.ship.preflight import preflight

    if args.measure:
        return measure_gate(args)
    found = preflight(args.file, args.device)
    if not found:
        print(f"{args.file} ships no artefact: a process that applies it compiles cold")
        return 0
    for fit in found:
        print(fit.line())
    return 0 if all(f.hits for f in found) else 1


def measure_gate(args: argparse.Namespace) -> int:
    """``autotune check FILE --measure``: the CI gate (:mod:`autotune.ship.gate`), then the
    preflight of the artefacts the file ships, which fail it where one will not hit."""
    from pathlib import Path

    from autotune import variables
    from autotune.ship import gate
    from autotune.ship.preflight import preflight

    tolerance = gate.TOLERANCE if args.tolerance is None else args.tolerance
    if not 0 <= tolerance < 100:
        raise ConfigError(f"--tolerance {tolerance}: give a fraction, e.g. 0.5")
    allow = tuple(a for a in args.allow_code.split(",") if a)
    load = gate.LOAD if args.max_load is None else args.max_load
    trust = args.trust_artifact or variables.trust_artifacts()
    report = gate.check(args.file, tolerance, args.strict, allow, args.update, load, trust)
    for fit in preflight(args.file, args.device):
        now = "hit" if fit.hits else "miss"
        why = "" if fit.hits else fit.line()
        report.verdicts.append(gate.Verdict(f"{fit.kind} start", "hit", now, fit.hits, why))
    if args.junit:
        Path(args.junit).write_text(gate.junit(report) + "\n")
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print("\n".join(report.lines()))
    return report.code


def cmd_studies(args: argparse.Namespace) -> int:
    from autotune.cli import text
    from autotune.search.overview import overview
    from autotune.storage import Store, mask

    store = Store(args.storage, create=False)
    rows = overview(store)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{len(rows)} studies in {mask(store.url)}")
    if rows:
        keys = ("study", "model", "measured", "deduced", "budget", "ok", "failed", "runs",
                "live workers", "last")  # fmt: skip
        print(text.table(keys, [[r[k] for k in keys] for r in rows]))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autotune.choice import objectives
    from autotune.fields import parse_memory
    from autotune.search import studies
    from autotune.search.spec import check_name
    from autotune.ship import export
    from autotune.storage import Store

    if not args.study:
        raise ConfigError("give --study NAME (autotune studies lists them)")
    if args.policy is not None:
        objectives.parse_policy(args.policy)
    name = check_name(args.study)
    store = Store(args.storage, create=False)
    study = studies.study(store, name)
    policy = args.policy or (study.spec.policy if study else objectives.lifetime(None))
    memory = parse_memory(args.max_memory)
    path, chosen, notes = export.export(store, name, policy, args.format, args.out, memory,
                                        args.merge or True)  # fmt: skip
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"chosen ({policy}): {chosen.key}\nwrote {path}")
    return 0


def cmd_queue_worker(args: argparse.Namespace) -> int:
    from autotune.fields import parse_duration
    from autotune.job.worker import work_queue
    from autotune.search import Lines

    class Log(Lines):  # each strategy measured on stdout; notes on stderr
        def measured(self, key: str, done: int) -> None:
            print(f"measured {key} ({done} in the study)", flush=True)

    idle = parse_duration(args.idle_timeout, "--idle-timeout")

    print("worker serving the queue"
          + (f" (idle timeout {args.idle_timeout})" if idle else ""), flush=True)  # fmt: skip
    try:
        shift = work_queue(args.storage, device=args.device, allow=allowed_code(args),
                      idle_timeout_s=idle, listener=Log(),
                      confirm=not args.no_confirm)  # fmt: skip
    except KeyboardInterrupt:  # asked before the queue was open
        print("worker: stopped: asked", flush=True)
        return 0
    done = ", ".join(shift.finished) or "none"
    print(f"worker: {len(shift.studies)} studies, measured {shift.measured}, finished {done}; "
          f"stopped: {shift.stopped}", flush=True)  # fmt: skip
    return 0  # asked to stop (Ctrl-C, SIGTERM) or idle: either is how a queue worker ends
