"""The ``autotune`` command. Heavy modules are imported inside each command, so --help is instant.

User errors (``AutotuneError``) end in one line on stderr and a non-zero exit; a traceback
only with ``--debug``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from autotune.errors import AutotuneError, ConfigError

ALLOW_CODE = ("package.module:function models and backends (or whole modules) that a spec file "
              "or a stored study may name, for autotune to import and run: it runs no other "
              "code it finds in data")  # fmt: skip


def _allowed(args: argparse.Namespace) -> list[str]:
    """The code this command line names: its model and backends, and --allow-code."""
    given = (getattr(args, "model", None), getattr(args, "backend", None), args.allow_code)
    names = [n for text in given for n in (text or "").split(",")]
    return [n.strip() for n in names if n.strip()]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"autotune: error: {message} (see '{self.prog} --help')\n")


def _add_fields(group: Any, cls: type, names: Sequence[str] | None = None) -> None:
    """Flags for a config dataclass's fields, with the help and defaults written on them
    (every default stays there: a flag not given is None, so a spec file can set it)."""
    from autotune import config

    for f in config.fields(cls):
        if names is not None and config.toml_key(f) not in names:
            continue
        if f.default is False:  # a switch
            group.add_argument(config.flag(f), action="store_true", default=None,
                               help=config.help_text(f))  # fmt: skip
            continue
        kind = f.metadata.get("cli_type") or str
        group.add_argument(config.flag(f), type=kind, help=config.help_text(f))


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """Model and workload flags."""
    from autotune.catalog import ModelRef
    from autotune.workload import Workload

    g = p.add_argument_group("model and workload")
    _add_fields(g, ModelRef)
    _add_fields(g, Workload)


def _add_timing_args(p: argparse.ArgumentParser) -> None:
    from autotune.workload import Settings

    _add_fields(p.add_argument_group("timing"), Settings, ("iters", "warmup", "timeout", "starts"))


def _add_storage_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", help="SQLAlchemy URL (default $AUTOTUNE_STORAGE or SQLite file)")
    p.add_argument("--study", help="study name (default: a slug of model, workload, hardware)")


def build_parser() -> argparse.ArgumentParser:
    from autotune.spec import StudySpec

    parser = _Parser(prog="autotune", description="How should I torch.compile this model here?")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("models", help="list the model catalog")

    m = sub.add_parser("measure", help="measure one compile strategy, cold, in a fresh process")
    _add_model_args(m)
    s = m.add_argument_group("strategy")
    s.add_argument("--granularity", default="full", help="none, full, regional or nested")
    s.add_argument("--backend", default="inductor", help="a registered backend or module:fn")
    s.add_argument("--mode", help="inductor mode (default, max-autotune-no-cudagraphs, ...)")
    s.add_argument("--dynamic", default="none", help="true, false or none")
    s.add_argument("--fullgraph", action="store_true", help="fail on any graph break")
    s.add_argument("--options", help="inductor option switches, e.g. freezing,cpp_wrapper")
    _add_timing_args(m)
    m.add_argument("--json", action="store_true", help="print the Measurement as JSON")

    r = sub.add_parser("search", help="search compile strategies; export the Pareto-best one")
    _add_model_args(r)
    sp = r.add_argument_group("space (comma lists narrow the default space)")
    for name in ("granularity", "backend", "mode", "dynamic", "fullgraph"):
        sp.add_argument(f"--{name}", metavar="LIST")
    sp.add_argument("--options", metavar="LIST", help="inductor switches: freezing, cpp_wrapper, "
                    "max_autotune (cudagraphs on CUDA), or none")  # fmt: skip
    sp.add_argument("--space", metavar="FILE.toml", help="spec file: model, workload, space")
    se = r.add_argument_group("search")
    _add_fields(se, StudySpec, ("trials", "time_budget", "sampler", "objectives", "max_memory",
                                "policy", "equivalence"))  # fmt: skip
    se.add_argument("--force", action="store_true", help="join a study made on other hardware")
    se.add_argument("--no-progress", action="store_true", help="no live progress bar")
    se.add_argument("--allow-code", metavar="LIST", help=ALLOW_CODE)
    _add_timing_args(r)
    _add_storage_args(r)
    r.add_argument("--out", help="exported file (default studies/<study>/best.json)")
    r.add_argument("--format", default="accelerate", help="accelerate, accelerate-yaml, torch, "
                   "transformers")  # fmt: skip
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.add_argument("--dashboard", action="store_true", help="also write dashboards/<study>.html")
    r.add_argument("--workers", type=int, default=1, help="local worker processes (one per GPU)")
    r.add_argument("--no-confirm", action="store_true", help="export the pick without timing "
                   "it again against its nearest rivals (see README: Verdicts)")  # fmt: skip

    sb = sub.add_parser("submit", help="create a study from a spec file, for workers to run")
    sb.add_argument("--space", required=True, metavar="FILE.toml", help="the study's spec")
    _add_storage_args(sb)

    w = sub.add_parser("worker", help="join a study and run its trials")
    _add_storage_args(w)
    w.add_argument("--device", help="this worker's device, e.g. cuda:1")
    w.add_argument("--trials", type=int, help="stop after measuring this many here")
    w.add_argument("--force", action="store_true", help="join although the hardware differs")
    w.add_argument("--allow-code", metavar="LIST", help=ALLOW_CODE)
    w.add_argument("--no-progress", action="store_true", help="no live progress bar")

    e = sub.add_parser("export", help="write a study's chosen config for Accelerate or torch")
    _add_storage_args(e)
    e.add_argument("--policy", default="knee", help="knee, fastest, quickest, amortized:N, ...")
    e.add_argument("--format", default="accelerate", help="accelerate, accelerate-yaml, torch, "
                   "transformers")  # fmt: skip
    e.add_argument("--max-memory", help="leave out strategies above this peak memory")
    e.add_argument("-o", "--out", help="output file (default studies/<study>/best.json)")

    sh = sub.add_parser("show", help="every strategy of a study, with why each was left out")
    _add_storage_args(sh)
    sh.add_argument("--policy", help="the policy whose answer is shown (default: the study's)")

    st = sub.add_parser("studies", help="list the studies in a storage with their progress")
    st.add_argument("--storage", help="SQLAlchemy URL (default $AUTOTUNE_STORAGE or SQLite file)")
    st.add_argument("--json", action="store_true", help="print the list as JSON")

    d = sub.add_parser("dashboard", help="render a study as one self-contained HTML page")
    _add_storage_args(d)
    d.add_argument("--policy", help="the policy whose choice is highlighted (default: the last "
                   "export's)")  # fmt: skip
    d.add_argument("-o", "--out", help="output file (default dashboards/<study>.html)")
    return parser


def model_and_workload(args: argparse.Namespace) -> tuple[Any, Any]:
    """The validated model reference and workload named by the command line."""
    from autotune import catalog, config
    from autotune.workload import Workload

    if args.model is None:
        raise ConfigError("give --model (autotune models lists the presets)")
    given = {"name": args.model, "layers": args.layers, "seed": args.seed, "weights": args.weights}
    ref = catalog.ModelRef(**{k: v for k, v in given.items() if v is not None})
    flags = {k: getattr(args, dest) for k, dest in _dests(Workload).items()}
    workload = Workload.create(**config.read(Workload, flags, "--"))
    catalog.check(ref, workload)
    return ref, workload


def _dests(cls: type) -> dict[str, str]:
    """A config dataclass's TOML keys and the argparse destinations of their flags."""
    from autotune import config

    return {config.toml_key(f): config.flag(f).lstrip("-").replace("-", "_")
            for f in config.fields(cls)}  # fmt: skip


def cmd_models(args: argparse.Namespace) -> int:
    from autotune import catalog

    rows = catalog.presets()
    width = max(map(len, rows))
    for name, description in rows.items():
        print(f"{name:<{width}}  {description}")
    print("\nAlso: a directory holding a transformers config.json, or package.module:function")
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from autotune import config, report, runner
    from autotune.strategy import Strategy
    from autotune.workload import Settings

    ref, workload = model_and_workload(args)
    options = [o.strip() for o in (args.options or "").split(",") if o.strip() not in ("", "none")]
    strategy = Strategy.create(
        args.granularity, args.backend, args.mode, args.dynamic, args.fullgraph, options
    )
    strategy.validate()
    given = {k: getattr(args, dest, None) for k, dest in _dests(Settings).items()}
    settings = Settings(**config.read(Settings, given, "--"))
    if not args.json:
        shown = ", ".join(settings.starts)
        print(f"measuring {strategy.key} on {ref.name} ({shown}; fresh processes)…", flush=True)
    result = runner.measure(ref, workload, strategy, settings)
    print(json.dumps(result.to_dict(), indent=2) if args.json else report.summary(result))
    return 0 if result.status in ("ok", "not-applicable") else 1


def cmd_search(args: argparse.Namespace) -> int:
    from autotune import catalog, code, export, report
    from autotune.progress import BestSoFar, Progress, counts
    from autotune.search import open_search, run, run_workers
    from autotune.spec import StudySpec, check_name
    from autotune.verdict import answer

    if args.model is None and args.space is None:
        raise ConfigError("give --model or --space FILE.toml")
    flags = {k: v for k, v in vars(args).items() if k not in ("space", "debug", "command")}
    if args.study is not None:
        check_name(args.study)
    spec = StudySpec.from_sources(args.space, **flags)
    code.check_allowed(spec, _allowed(args), f"spec file {args.space}")
    catalog.check(spec.model, spec.workload)
    if args.format not in export.FORMATS:
        raise ConfigError(f"bad format {args.format!r}: use one of {', '.join(export.FORMATS)}")
    search = open_search(spec, args.storage, force=args.force)
    out = sys.stderr if args.json else sys.stdout
    print(f"study {search.name} in {search.storage_shown}", file=out, flush=True)
    best = BestSoFar(search.store, search.name, spec.policy, spec.objectives, spec.max_memory_mb)
    with Progress(search.target, len(search.measured()), not args.no_progress, best) as bar:
        many = args.workers > 1
        outcome = run_workers(search, args.workers, bar, args.force) if many else run(search, bar)
    if outcome.stopped == "interrupted":
        print(
            f"autotune: interrupted; {outcome.measured} measured strategies are stored. Run the "
            "same command again to continue.",
            file=sys.stderr,
        )
        return 130
    if not args.no_confirm:
        print("confirming the pick against its nearest rivals…", file=out, flush=True)
        confirm_pick(search)
    path, chosen, notes = export.export(
        search.store, search.name, spec.policy, args.format, args.out, spec.max_memory_mb
    )
    page = None
    if args.dashboard:
        from autotune import dashboard

        page = dashboard.write(search.store, search.name, policy=spec.policy)
    rows, study = search.store.measurements(search.name), search.store.study(search.name)
    assert study is not None
    confirmation = search.store.confirmation(search.name, spec.policy)
    told = answer(rows, search.name, study.spec, spec.policy, spec.max_memory_mb, confirmation)
    front = told.front
    tally = counts(study, rows)
    if args.json:
        result = {
            "study": search.name, "storage": search.storage_shown, "stopped": outcome.stopped,
            "measured": tally["measured"], "deduced": tally["deduced"],
            "repeats": outcome.repeats, "policy": spec.policy,
            "chosen": chosen.key, "export": str(path), "caveats": notes,
            "dashboard": str(page) if page else None,
            "pareto_front": [dataclasses.asdict(p) for p in front], **told.block(),
        }  # fmt: skip
        print(json.dumps(result, indent=2))
        return 0
    print(f"stopped: {outcome.stopped}; {tally['measured']} strategies measured in this study, "
          f"{tally['deduced']} deduced without measuring, {outcome.repeats} sampler repeats "
          "reused their stored values")  # fmt: skip
    print("\nPareto front (cold compile vs median latency, feasible trials and eager):")
    print(report.front_table(front, chosen.key))
    print(f"\nchosen ({spec.policy}): {chosen.key}")
    for line in told.lines():
        print(line)
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {path}")
    if page:
        print(f"wrote {page}")
    return 0


def confirm_pick(search: Any) -> None:
    """Time the pick against its nearest rivals and eager; store what the rounds showed; drop
    the compile caches kept for it."""
    import shutil

    from autotune.confirm import confirm
    from autotune.selection import choose

    spec = search.spec
    rows = search.store.measurements(search.name)
    chosen, points, front = choose(rows, spec.policy, spec.objectives, spec.max_memory_mb)
    result = confirm(spec, chosen, points, front, search.keep)
    search.store.add_confirmation(search.name, spec.policy, result.pick, result.to_dict())
    shutil.rmtree(search.keep, ignore_errors=True)


def cmd_submit(args: argparse.Namespace) -> int:
    from autotune.search import submit
    from autotune.spec import StudySpec
    from autotune.storage import Store, mask

    spec = StudySpec.from_sources(args.space, study=args.study)
    name = submit(spec, args.storage)
    print(f"submitted study {name} to {mask(Store(args.storage, create=False).url)}")
    print(f"run it with: autotune worker --study {name} --storage URL")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from autotune.progress import Progress
    from autotune.search import join, run
    from autotune.spec import check_name

    if not args.study:
        raise ConfigError("give --study NAME (autotune studies lists them)")
    search = join(check_name(args.study), args.storage, device=args.device, force=args.force,
                  allow=_allowed(args))  # fmt: skip
    print(f"worker {search.worker} on study {search.name} in {search.storage_shown}", flush=True)
    with Progress(search.target, len(search.measured()), not args.no_progress) as bar:
        outcome = run(search, bar, max_measure=args.trials)
    print(f"worker {search.worker}: measured {outcome.measured_here}, stopped: {outcome.stopped}")
    return 130 if outcome.stopped == "interrupted" else 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from autotune import dashboard
    from autotune.spec import check_name
    from autotune.storage import Store

    if not args.study:
        raise ConfigError("give --study NAME")
    name = check_name(args.study)
    path = dashboard.write(Store(args.storage, create=False), name, args.out, args.policy)
    print(f"wrote {path}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from autotune import report
    from autotune.spec import check_name
    from autotune.storage import Store, mask
    from autotune.verdict import answer, exclusions

    if not args.study:
        raise ConfigError("give --study NAME (autotune studies lists them)")
    name = check_name(args.study)
    store = Store(args.storage, create=False)
    study = store.study(name)
    if study is None:
        raise ConfigError(f"no study named {args.study!r} in {mask(store.url)}")
    rows = store.measurements(study.name)
    max_memory = study.spec.get("max_memory_mb")
    print(report.trials_table(rows, exclusions(rows, max_memory)))
    policy = args.policy or study.spec.get("policy", "knee")
    if any(r.key == "none" and r.status == "ok" for r in rows):
        told = answer(rows, study.name, study.spec, policy, max_memory,
                      store.confirmation(study.name, policy))  # fmt: skip
        print()
        print("\n".join(told.lines()[:-1]))
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    from autotune import report
    from autotune.progress import overview
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
        print(report.table(keys, [[r[k] for k in keys] for r in rows]))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autotune import export, objectives
    from autotune.spec import check_name, parse_memory
    from autotune.storage import Store

    if not args.study:
        raise ConfigError("give --study NAME (autotune studies lists them)")
    objectives.parse_policy(args.policy)
    name = check_name(args.study)
    store = Store(args.storage, create=False)
    path, chosen, notes = export.export(
        store, name, args.policy, args.format, args.out, parse_memory(args.max_memory)
    )
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"chosen ({args.policy}): {chosen.key}\nwrote {path}")
    return 0


COMMANDS = {
    "models": cmd_models, "measure": cmd_measure, "search": cmd_search, "export": cmd_export,
    "dashboard": cmd_dashboard, "studies": cmd_studies, "submit": cmd_submit, "show": cmd_show,
    "worker": cmd_worker,
}  # fmt: skip


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # a scheduler's kill stops as cleanly as Ctrl-C
    try:
        return COMMANDS[args.command](args)
    except AutotuneError as exc:
        if args.debug:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("autotune: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a database error that reached here (Optuna's own calls)
        from autotune.storage import mask, resolve_url, scrub
        from autotune.storage.retry import database_error, final_reason

        found = database_error(exc)
        if found is None or args.debug:
            raise
        url = resolve_url(getattr(args, "storage", None))
        text = (str(getattr(found, "orig", None) or found).strip().splitlines() or [""])[0]
        why = final_reason(found) or "the database failed"
        print(f"autotune: error: storage {mask(url)}: {why} ({scrub(text, url)})", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
