"""The ``autotune`` command line: its parser and the readers of its flags."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from autotune.errors import ConfigError

ALLOW_CODE = ("package.module:function models and backends (or whole modules) that a spec file "
              "or a stored study may name, for autotune to import and run: it runs no other "
              "code it finds in data")  # fmt: skip


def allowed_code(args: argparse.Namespace) -> list[str]:
    """The code this command line names: its model and backends, and --allow-code."""
    given = (getattr(args, "model", None), getattr(args, "backend", None), args.allow_code)
    names = [n for text in given for n in (text or "").split(",")]
    return [n.strip() for n in names if n.strip()]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, like every other bad input, and a flag is
    never taken for the abbreviation of another (``worker --all`` is not ``--allow-code``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"autotune: error: {message} (see '{self.prog} --help')\n")


def _add_fields(group: Any, cls: type, names: Sequence[str] | None = None) -> None:
    """Flags for a config dataclass's fields, with the help and defaults written on them
    (every default stays there: a flag not given is None, so a spec file can set it)."""
    from autotune import fields

    for f in fields.fields(cls):
        if names is not None and fields.toml_key(f) not in names:
            continue
        if f.default is False:  # a switch
            group.add_argument(fields.flag(f), action="store_true", default=None,
                               help=fields.help_text(f))  # fmt: skip
            continue
        kind = f.metadata.get("cli_type") or str
        group.add_argument(fields.flag(f), type=kind, help=fields.help_text(f))


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


STORAGE_HELP = ("SQLAlchemy URL of the study storage (default $AUTOTUNE_STORAGE, else "
                "studies/autotune.db, under $AUTOTUNE_STUDIES where set)")  # fmt: skip


def _add_storage_args(p: argparse.ArgumentParser, study: bool = True) -> None:
    p.add_argument("--storage", help=STORAGE_HELP)
    if study:
        p.add_argument("--study", help="study name (default: a slug of model, workload, "
                       "hardware)")  # fmt: skip


def _add_format_arg(p: argparse.ArgumentParser) -> None:
    from autotune.ship.formats import FORMATS

    p.add_argument("--format", default="accelerate", choices=FORMATS,
                   help="what to write (default accelerate)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    from autotune.search.spec import StudySpec

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
    s.add_argument(
        "--buckets",
        default="none",
        help="under a traffic: none, pow2, quantiles or auto[:K] (pad each request to the power "
        "of two, the traffic's quartile, or the edge of least lifetime cost, at most K a "
        "dimension, above it; compile each bucket static)",
    )
    s.add_argument("--marks", default="none", help="under a traffic: the inputs' dimensions "
                   "marked dynamic: none, batch, seq or both, each also -unbacked")  # fmt: skip
    s.add_argument(
        "--stance",
        default="default",
        help="under a traffic: default, "
        "eager_on_recompile or eager_then_compile (torch.compiler.set_stance)",
    )
    s.add_argument("--prefill", default="compiled", help="generating: the prefill compiled "
                   "with the decode steps, or eager (decode alone compiled)")  # fmt: skip
    s.add_argument("--kv-cache", default="single", help="generating over a traffic: one static "
                   "KV cache for the longest request (single), or one a bucket of prompt plus "
                   "answer lengths (pow2, quantiles)")  # fmt: skip
    s.add_argument("--batching", default="none", help="continuous: transformers' "
                   "ContinuousBatchingConfig knobs, key=value joined by +: level (1-3), q and "
                   "kv (padding intervals; pad=auto: both chosen from a pilot's batches), "
                   "tokens, requests, graphs")  # fmt: skip
    _add_timing_args(m)
    m.add_argument("--json", action="store_true", help="print the Measurement as JSON")

    r = sub.add_parser("search", help="search compile strategies; export the Pareto-best one")
    _add_model_args(r)
    sp = r.add_argument_group("space (comma lists narrow the default space)")
    for name in ("granularity", "backend", "mode", "dynamic", "fullgraph", "buckets", "marks",
                 "stance", "prefill", "kv_cache", "batching"):  # fmt: skip
        sp.add_argument(f"--{name.replace('_', '-')}", metavar="LIST")
    sp.add_argument("--options", metavar="LIST", help="inductor switches: freezing, cpp_wrapper, "
                    "max_autotune (cudagraphs on CUDA), or none")  # fmt: skip
    sp.add_argument("--space", metavar="FILE.toml", help="spec file: model, workload, space")
    se = r.add_argument_group("search")
    _add_fields(se, StudySpec, ("trials", "time_budget", "sampler", "objectives", "max_memory",
                                "policy", "calls", "equivalence", "rungs"))  # fmt: skip
    se.add_argument("--force", action="store_true", help="join a study made on other hardware")
    se.add_argument("--no-progress", action="store_true", help="no live progress bar")
    se.add_argument("--allow-code", metavar="LIST", help=ALLOW_CODE)
    _add_timing_args(r)
    _add_storage_args(r)
    r.add_argument("--out", help="exported file (default studies/<study>/best.json)")
    _add_format_arg(r)
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.add_argument("--dashboard", action="store_true", help="also write dashboards/<study>.html")
    r.add_argument("--workers", type=int, default=1, help="local worker processes (one per GPU)")
    r.add_argument("--no-confirm", action="store_true", help="export the pick without timing "
                   "it again against its nearest rivals (see README: Verdicts)")  # fmt: skip

    sb = sub.add_parser("submit", help="create a study from a spec file, for workers to run")
    sb.add_argument("--space", required=True, metavar="FILE.toml", help="the study's spec")
    _add_storage_args(sb)

    q = sub.add_parser("queue-worker", help="serve the queue: take the next study with budget "
                       "left that fits this machine, measure it to the end, confirm and export "
                       "its pick, then the next")  # fmt: skip
    _add_storage_args(q, study=False)
    q.add_argument("--idle-timeout", metavar="DURATION", help="exit after this long with no "
                   "study to take (e.g. 90s, 10m; default: never)")  # fmt: skip
    q.add_argument("--no-confirm", action="store_true", help="export a finished study's pick "
                   "without timing it again against its rivals")  # fmt: skip
    q.add_argument("--device", help="this worker's device, e.g. cuda:1")
    q.add_argument("--allow-code", metavar="LIST", help=ALLOW_CODE)

    w = sub.add_parser("worker", help="join one study and run its trials")
    _add_storage_args(w)
    w.add_argument("--device", help="this worker's device, e.g. cuda:1")
    w.add_argument("--trials", type=int, help="stop after measuring this many here")
    w.add_argument("--force", action="store_true", help="join although the hardware differs")
    w.add_argument("--allow-code", metavar="LIST", help=ALLOW_CODE)
    w.add_argument("--no-progress", action="store_true", help="no live progress bar")

    v = sub.add_parser("serve", help="serve a storage over HTTP: the studies live, a lookup "
                       "of the best known config, submitting studies")  # fmt: skip
    _add_storage_args(v, study=False)
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback; "
                   "any other needs a token)")  # fmt: skip
    v.add_argument("--port", type=int, default=8321, help="port (default 8321; 0: any free one)")
    v.add_argument("--token", help="the token that writes need (default $AUTOTUNE_TOKEN; "
                   "prefer the variable: a command line shows in ps)")  # fmt: skip
    v.add_argument("--model-root", metavar="DIR", help="model directories that a submitted "
                   "spec may name must lie under DIR (default: presets only)")  # fmt: skip
    v.add_argument("--max-body", type=int, default=64 * 1024, metavar="BYTES",
                   help="largest request body (default 65536)")  # fmt: skip
    v.add_argument("--access-log", action="store_true", help="log every request")

    e = sub.add_parser("export", help="write a study's chosen config for Accelerate or torch")
    _add_storage_args(e)
    e.add_argument("--policy", help="knee, fastest, quickest, amortized:N (calls), amortized:1h "
                   "(serving time), ... (default: the study's)")  # fmt: skip
    _add_format_arg(e)
    e.add_argument("--max-memory", help="leave out strategies above this peak memory")
    e.add_argument("-o", "--out", help="output file (default studies/<study>/best.json)")
    e.add_argument("--merge", metavar="FILE", help="accelerate-yaml: the Accelerate config "
                   "to merge into (default: Accelerate's own, where there is one)")  # fmt: skip

    ch = sub.add_parser("check", help="preflight: will the artefacts an exported file ships load "
                        "and hit on this machine? (exit 1 when one will not)")  # fmt: skip
    ch.add_argument("file", help="the exported file, e.g. studies/<study>/best.json")
    ch.add_argument("--device", help="the device your process runs on (default: the kind the "
                    "artefact was made for, index 0)")  # fmt: skip
    ch.add_argument("--measure", action="store_true", help="the CI gate: measure the pick again "
                    "here and compare it with the file's record (exit 1 on a regression, 2 when "
                    "it cannot check)")  # fmt: skip
    ch.add_argument("--tolerance", type=float, default=None, help="--measure: how much a "
                    "cold compile or time to ready may grow (default 0.5, and 1 s)")  # fmt: skip
    ch.add_argument("--strict", action="store_true", help="--measure: an eager pick's "
                    "runner-up regressing fails the build too")  # fmt: skip
    ch.add_argument("--update", action="store_true", help="--measure: write the new figures "
                    "into the file's record (after an intended change)")  # fmt: skip
    ch.add_argument("--max-load", type=float, default=None, help="--measure: judge latency "
                    "while others take up to this share of the CPU (default 0.25)")  # fmt: skip
    ch.add_argument("--trust-artifact", action="store_true", help="--measure: load the cache "
                    "artefact the file ships (it runs code): gate its portable start")  # fmt: skip
    ch.add_argument("--junit", metavar="FILE", help="--measure: also write JUnit XML there")
    ch.add_argument("--json", action="store_true", help="--measure: print the report as JSON")
    ch.add_argument("--allow-code", metavar="LIST", default="", help="--measure: code the "
                    "file names that the gate may import (pkg.mod, pkg.mod:fn)")  # fmt: skip

    sh = sub.add_parser("show", help="every strategy of a study, with why each was left out")
    _add_storage_args(sh)
    sh.add_argument("--policy", help="the policy whose answer is shown (default: the study's)")
    sh.add_argument("--trial", metavar="KEY", help="one strategy (its key, or its trial number): "
                    "its whole reason and, for a failure, the child's traceback")  # fmt: skip

    st = sub.add_parser("studies", help="list the studies in a storage with their progress")
    _add_storage_args(st, study=False)
    st.add_argument("--json", action="store_true", help="print the list as JSON")

    d = sub.add_parser("dashboard", help="render a study as one self-contained HTML page")
    _add_storage_args(d)
    d.add_argument("--policy", help="the policy whose choice is highlighted (default: the last "
                   "export's)")  # fmt: skip
    d.add_argument("-o", "--out", help="output file (default dashboards/<study>.html)")
    for command in sub.choices.values():  # after the command too: autotune measure --debug
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=argparse.SUPPRESS)  # fmt: skip
    return parser


def model_and_workload(args: argparse.Namespace) -> tuple[Any, Any]:
    """The validated model reference and workload named by the command line."""
    from autotune import catalog, fields
    from autotune.workload import Workload

    if args.model is None:
        raise ConfigError("give --model (autotune models lists the presets)")
    given = {"name": args.model, "layers": args.layers, "seed": args.seed, "weights": args.weights}
    ref = catalog.ModelRef(**{k: v for k, v in given.items() if v is not None})
    flags = {k: getattr(args, dest) for k, dest in flag_dests(Workload).items()}
    workload = Workload.create(**fields.read(Workload, flags, "--"))
    catalog.check(ref, workload)
    return ref, workload


def flag_dests(cls: type) -> dict[str, str]:
    """A config dataclass's TOML keys and the argparse destinations of their flags."""
    from autotune import fields

    return {fields.toml_key(f): fields.flag(f).lstrip("-").replace("-", "_")
            for f in fields.fields(cls)}  # fmt: skip
