"""``autotune measure`` and ``autotune search``: one strategy, or a whole study and its answer."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from autotune.cli.parser import allowed_code, flag_dests, model_and_workload
from autotune.errors import ConfigError


def cmd_measure(args: argparse.Namespace) -> int:
    from autotune import fields
    from autotune.choice.verdict import noise_floor
    from autotune.cli import report
    from autotune.strategy import Strategy
    from autotune.trial import parent
    from autotune.workload import Settings

    ref, workload = model_and_workload(args)
    options = [o.strip() for o in (args.options or "").split(",") if o.strip() not in ("", "none")]
    strategy = Strategy.create(
        args.granularity,
        args.backend,
        args.mode,
        args.dynamic,
        args.fullgraph,
        options,
        args.buckets,
        args.marks,
        args.stance,
    )
    strategy.validate()
    given = {k: getattr(args, dest, None) for k, dest in flag_dests(Settings).items()}
    settings = Settings(**fields.read(Settings, given, "--"))
    if not args.json:
        shown = ", ".join(settings.starts)
        print(f"measuring {strategy.key} on {ref.name} ({shown}; fresh processes)…", flush=True)
    result = parent.measure(ref, workload, strategy, settings)
    shown = result.to_dict()
    if noise := noise_floor(result):  # eager against itself: labelled, not read as a speedup
        shown["speedup_is"] = noise
    print(json.dumps(shown, indent=2) if args.json else report.summary(result))
    if args.debug and result.traceback:
        print("the child's traceback:\n" + result.traceback.rstrip(), file=sys.stderr)
    return 0 if result.status in ("ok", "not-applicable") else 1


def cmd_search(args: argparse.Namespace) -> int:
    began = time.time()  # a time budget's clock: torch's import is the job's too
    from autotune import usercode
    from autotune.cli import report
    from autotune.cli.progress import BestSoFar, Progress, Told
    from autotune.environment import dtype_line
    from autotune.job.tuning import Tuning
    from autotune.search import stops
    from autotune.search.spec import DEFAULT_BUDGET_S, StudySpec, check_name, read_toml

    if args.model is None and args.space is None:
        raise ConfigError("give --model or --space FILE.toml")
    flags = {k: v for k, v in vars(args).items() if k not in ("space", "debug", "command")}
    if flags.get("time_budget") is None and args.space is None:
        flags["time_budget"] = DEFAULT_BUDGET_S
    if args.study is not None:
        check_name(args.study)
    spec = StudySpec.from_sources(args.space, **flags)
    usercode.check_allowed(spec, allowed_code(args), f"spec file {args.space}")
    tuning = Tuning.open(spec, args.storage, workers=args.workers, force=args.force,
                         began=began)  # fmt: skip
    search = tuning.search
    out = sys.stderr if args.json else sys.stdout
    print(f"study {search.name} in {search.storage_shown}", file=out, flush=True)
    asked = flags.get("dtype") or (read_toml(args.space).get("workload", {}).get("dtype")
                                   if args.space else None)  # fmt: skip
    if line := dtype_line(asked, spec.workload.dtype, spec.workload.device):
        print(line, file=out, flush=True)
    best = BestSoFar(search.store, search.name, spec.policy, spec.objectives, spec.max_memory_mb)
    with Progress(search.target, len(search.measured()), not args.no_progress, best,
                  search.plan) as bar:  # fmt: skip
        outcome = tuning.run(bar)
    if outcome.stopped == "interrupted":
        print(
            f"autotune: interrupted; {outcome.measured} measured strategies are stored. Run the "
            "same command again to continue.",
            file=sys.stderr,
        )
        return 130
    tuned = tuning.finish(confirm=not args.no_confirm, fmt=args.format, out=args.out,
                          listener=Told(out))  # fmt: skip
    path, chosen, notes = tuned.path, tuned.chosen, tuned.notes
    assert chosen is not None
    page = None
    if args.dashboard:
        from autotune import dashboard

        page = dashboard.write(search.store, search.name, policy=spec.policy)
    assert tuned.view is not None
    told = tuned.view.answer(spec.policy, spec.max_memory_mb)
    rows, tally = tuned.view.rows, tuned.view.tally()
    front = told.front
    split = search.plan.split(time.time() - began) if search.plan else None
    cut = stops.stopped_trials(search)
    if args.json:
        result = {
            "study": search.name, "storage": search.storage_shown, "stopped": outcome.stopped,
            "measured": tally["measured"], "deduced": tally["deduced"],
            "repeats": outcome.repeats, "policy": spec.policy,
            "chosen": chosen.key, "export": str(path), "caveats": notes,
            "dashboard": str(page) if page else None,
            "pareto_front": [dataclasses.asdict(p) for p in front], **told.block(),
            "budget_s": spec.time_budget_s,
            "seconds": split,
            "stopped_at_budget": [{"strategy": s.key, "seconds": round(s.seconds, 1),
                                   "why": s.why} for s in cut],
        }  # fmt: skip
        print(json.dumps(result, indent=2))
        return 0
    print(f"stopped: {outcome.stopped}; {tally['measured']} strategies measured in this study, "
          f"{tally['deduced']} deduced without measuring, {outcome.repeats} sampler repeats "
          "reused their stored values")  # fmt: skip
    for stop in cut:
        after = stop.why.removeprefix("stopped at the time budget ")
        print(f"stopped at the time budget: {stop.key}, {after}; a later run of this study "
              "with a larger --time-budget measures it")  # fmt: skip
    if split:
        print(report.time_split(split))
    print("\nPareto front (cold compile vs median latency, feasible trials and eager):")
    print(report.front_table(front, chosen.key, spec.settings.starts))
    print(f"\nchosen ({spec.policy}): {chosen.key}")
    for line in told.lines():
        print(line)
    for note in notes:
        print(f"note: {note}")
    if loaded := report.load_note([r.payload for r in rows]):
        print(loaded)
    print(f"wrote {path}")
    if page:
        print(f"wrote {page}")
    return 0
