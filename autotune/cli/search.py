"""``autotune measure`` and ``autotune search``: one strategy, or a whole study and its answer."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from autotune.cli.parser import allowed_code, flag_dests, model_and_workload
from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.search.spec import StudySpec


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
        prefill=args.prefill,
        kv_cache=args.kv_cache,
        batching=args.batching,
    )
    strategy.validate()
    strategy.check_workload(workload.kind)
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


def searched(args: argparse.Namespace) -> tuple[StudySpec, str | None]:
    """What ``autotune search`` runs: its spec (the flags over its spec file, the default
    time budget where neither gives one: :meth:`StudySpec.from_sources`), the code it names
    allowed; and the dtype it asked for."""
    from autotune import usercode
    from autotune.search.spec import StudySpec, check_name

    if args.model is None and args.space is None:
        raise ConfigError("give --model or --space FILE.toml")
    flags = {k: v for k, v in vars(args).items() if k not in ("space", "debug", "command")}
    if args.study is not None:
        check_name(args.study)
    spec = StudySpec.from_sources(args.space, searched=True, **flags)
    usercode.check_allowed(spec, allowed_code(args), f"spec file {args.space}")
    return spec, StudySpec.asked_dtype(args.space, **flags)


def cmd_search(args: argparse.Namespace) -> int:
    """Parse, run one :class:`~autotune.job.local.LocalTuning` (open, run, finish), print."""
    began = time.time()  # a time budget's clock: torch's import is the job's too
    from autotune.cli.progress import Progress, Told
    from autotune.cli.summary import Finished, heading
    from autotune.job.local import LocalTuning

    spec, asked = searched(args)
    tuning = LocalTuning.open(spec, args.storage, workers=args.workers, force=args.force,
                              began=began)  # fmt: skip
    search, out = tuning.search, sys.stderr if args.json else sys.stdout
    print("\n".join(heading(search, asked)), file=out, flush=True)
    with Progress.of(search, not args.no_progress) as bar:
        outcome = tuning.run(bar)
    if outcome.stopped == "interrupted":
        print(f"autotune: interrupted; {outcome.measured} measured strategies are stored. Run "
              "the same command again to continue.", file=sys.stderr)  # fmt: skip
        return 130
    tuned = tuning.finish(confirm=not args.no_confirm, fmt=args.format, out=args.out,
                          listener=Told(out))  # fmt: skip
    page = None
    if args.dashboard:
        from autotune import dashboard

        page = dashboard.write(search.store, search.name, policy=spec.policy)
    done = Finished(search, spec, outcome, tuned, page, began)
    print(json.dumps(done.document(), indent=2) if args.json else "\n".join(done.lines()))
    return 0
