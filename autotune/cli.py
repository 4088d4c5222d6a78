"""The ``autotune`` command. Heavy modules are imported inside each command, so --help is instant.

User errors (``AutotuneError``) end in one line on stderr and a non-zero exit; a traceback
only with ``--debug``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from autotune.errors import AutotuneError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"autotune: error: {message} (see '{self.prog} --help')\n")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and workload")
    g.add_argument(
        "--model", required=True, help="preset, directory with config.json, or module:function"
    )
    g.add_argument("--layers", type=int, help="shorten a preset to N repeated blocks")
    g.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
    g.add_argument("--weights", help="local directory holding the model's real weights")
    g.add_argument("--batch-size", type=int, default=1)
    g.add_argument("--seq-len", type=int, default=32)
    g.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    g.add_argument("--workload", default="inference", help="inference or train")


def _add_timing_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("timing")
    g.add_argument("--iters", type=int, default=20, help="timed calls (default 20)")
    g.add_argument("--warmup", type=int, default=3, help="warm-up calls (default 3)")
    g.add_argument("--timeout", type=float, default=1200.0, help="seconds per trial")


def build_parser() -> argparse.ArgumentParser:
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
    _add_timing_args(m)
    m.add_argument("--json", action="store_true", help="print the Measurement as JSON")
    return parser


def model_and_workload(args: argparse.Namespace) -> tuple[Any, Any]:
    """The validated model reference and workload named by the command line."""
    from autotune import catalog
    from autotune.workload import Workload

    ref = catalog.ModelRef(args.model, layers=args.layers, seed=args.seed, weights=args.weights)
    workload = Workload.create(
        device=args.device, batch_size=args.batch_size, seq_len=args.seq_len,
        dtype=args.dtype, kind=args.workload,
    )  # fmt: skip
    catalog.check(ref)
    return ref, workload


def cmd_models(args: argparse.Namespace) -> int:
    from autotune import catalog

    rows = catalog.presets()
    width = max(map(len, rows))
    for name, description in rows.items():
        print(f"{name:<{width}}  {description}")
    print("\nAlso: a directory holding a transformers config.json, or package.module:function")
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from autotune import report, runner
    from autotune.strategy import Strategy

    ref, workload = model_and_workload(args)
    strategy = Strategy.create(
        args.granularity, args.backend, args.mode, args.dynamic, args.fullgraph
    )
    strategy.validate()
    settings = runner.Settings(args.iters, args.warmup, args.timeout, args.seed)
    if not args.json:
        print(f"measuring {strategy.key} on {ref.name} (cold, in a fresh process)…", flush=True)
    result = runner.measure(ref, workload, strategy, settings)
    print(json.dumps(result.to_dict(), indent=2) if args.json else report.summary(result))
    return 0 if result.status in ("ok", "not-applicable") else 1


COMMANDS = {"models": cmd_models, "measure": cmd_measure}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
