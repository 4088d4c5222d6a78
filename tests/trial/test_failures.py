"""A failure says where: the reason names the innermost frame outside autotune and the standard
library, is shortened only at a word, and the child's whole traceback is kept and shown."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import tests.models
from autotune.catalog import ModelRef
from autotune.cli import main
from autotune.cli.report import summary
from autotune.dashboard.page import folded
from autotune.errors import shorten, where
from autotune.storage import Store
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import measure
from autotune.trial.process import unbuilt
from autotune.trial.request import Request
from autotune.workload import Settings, Workload

QUICK = Settings(iters=3, warmup=1, starts=("cold",))
LINE = inspect.getsourcelines(tests.models._first_input_name)[1] + 1


def test_a_failure_names_the_frame_it_arose_in() -> None:
    m = measure(ModelRef("tests.models:tiny_toy"), Workload(device="cpu"),
                Strategy.create("full", "tests.models:indexing_backend"), QUICK)  # fmt: skip
    assert m.status == "failed"
    assert "IndexError: list index out of range" in m.reason
    assert f"(at tests/models.py:{LINE} in _first_input_name; tests/models.py:" in m.reason
    assert "autotune/" not in m.reason.split("(at ", 1)[1]  # none of autotune's own frames
    assert "_first_input_name" in m.traceback and "Traceback" in m.traceback


def _parse(text: str) -> object:
    return json.loads(text)  # fails inside the standard library, called from here


def test_where_skips_the_standard_library_and_follows_only_kept_causes() -> None:
    with pytest.raises(ValueError) as failed:
        _parse("{")
    assert where(failed.value).startswith("tests/trial/test_failures.py:")
    assert "in _parse" in where(failed.value) and "json" not in where(failed.value)
    for hidden in (True, False):
        try:
            try:
                _parse("{")
            except ValueError as exc:
                raise RuntimeError("while handling it") from (None if hidden else exc)
        except RuntimeError as exc:
            assert ("in _parse" in where(exc)) is not hidden  # `from None` hides the cause


def test_shortening_never_cuts_a_word() -> None:
    text = "AssertionError: invoke_subgraph operands must be a list of tensors, got a tuple"
    short = shorten(text, 60)
    assert short == "AssertionError: invoke_subgraph operands must be a list of…"
    assert len(short) <= 60 and shorten("a  b\nc", 60) == "a b c"
    assert shorten("x" * 100, 10) == "x" * 9 + "…"  # one word longer than the limit
    reason = "RuntimeError: " + "the backend refused " * 20  # the dashboard's table folds it
    summary = folded(reason).split("<summary>")[1].split("</summary>")[0]
    assert summary.endswith("…") and len(summary) <= 200
    assert reason.startswith(summary.removesuffix("…") + " ")  # cut between two words
    assert f"<pre>{reason.strip()}</pre>" in folded(reason)  # the whole text, below


def test_show_prints_a_failed_trial_s_traceback(in_tmp: Path, capsys) -> None:
    argv = ["search", "--model", "tests.models:tiny_toy", "--backend",
            "tests.models:indexing_backend", "--granularity", "none,full", "--trials", "2",
            "--iters", "3", "--warmup", "1", "--starts", "cold", "--no-progress", "--no-confirm",
            "--study", "where", "--dynamic", "none", "--fullgraph", "false"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    key = "full/tests.models:indexing_backend/-/dynamic=auto/breaks-ok"
    assert main(["show", "--study", "where", "--trial", key]) == 0
    out = capsys.readouterr().out
    assert f"IndexError: list index out of range (at tests/models.py:{LINE} in " in out
    assert "the child's traceback:" in out and f'models.py", line {LINE}' in out
    store = Store("sqlite:///studies/autotune.db", create=False)
    [number] = [r.trial_number for r in store.measurements("where") if r.key == key]
    assert main(["show", "--study", "where", "--trial", str(number)]) == 0
    assert capsys.readouterr().out == out  # the same trial, by its number
    old = Measurement(Strategy.create("full", "aot_eager"), None, None, "failed",
                      reason="RuntimeError: stored before tracebacks were").to_dict()  # fmt: skip
    del old["traceback"]  # a record from an older autotune
    store.add_measurement("where", "full/aot_eager/-/dynamic=auto/breaks-ok", None, old)
    assert main(["show", "--study", "where", "--trial", "full/aot_eager/-/dynamic=auto/"
                 "breaks-ok"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "stored before tracebacks were" in out and "no traceback kept" in out
    assert main(["show", "--study", "where", "--trial", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no strategy or trial 'nope'" in err and err.count("\n") == 1


def test_measure_debug_prints_the_child_s_traceback(in_tmp: Path, capsys) -> None:
    argv = ["measure", "--model", "tests.models:tiny_toy", "--granularity", "full", "--backend",
            "tests.models:indexing_backend", "--iters", "3", "--warmup", "1", "--starts",
            "cold"]  # fmt: skip
    assert main(argv) == 1
    plain = capsys.readouterr()
    assert f"IndexError: list index out of range (at tests/models.py:{LINE} in " in plain.out
    assert "Traceback" not in plain.out + plain.err  # without --debug, the one line alone
    assert main([*argv, "--debug"]) == 1
    err = capsys.readouterr().err
    assert "the child's traceback:\nTraceback (most recent call last):" in err
    assert f'models.py", line {LINE}, in _first_input_name' in err


def test_a_backend_computing_in_lower_precision_fails_the_gate() -> None:
    """The gate catches a backend that quietly computes in bfloat16 on a float64-referenced
    float32 study; the plain eager backend on the same model passes (both sides)."""
    ref, work = ModelRef("toy-64", layers=4), Workload(device="cpu", dtype="float32")
    low = measure(ref, work, Strategy.create("full", "tests.models:bf16_backend"), QUICK)
    assert low.status == "ok" and low.accuracy is not None and not low.accuracy.passed, low.reason
    plain = measure(ref, work, Strategy.create("full", "eager"), QUICK)
    assert plain.feasible


@pytest.mark.slow
def test_a_build_past_the_timeout_keeps_the_cold_measurement() -> None:
    """The builds run after the cold measurement, in its process: the AOTInductor build of a
    model whose export lasts an hour outlasts the trial's timeout and costs only the aot start,
    with why; the cold measurement stands, and so does the precompiled build that finished
    before it (a build within the timeout still gives its start)."""
    settings = Settings(iters=3, warmup=1, timeout_s=40, starts=("cold", "precompiled", "aot"))
    m = measure(ModelRef("tests.models:slow_to_export"), Workload(device="cpu"),
                Strategy.create("full", "inductor"), settings)  # fmt: skip
    assert m.status == "ok", m.reason
    assert m.compile_s is not None and m.latency is not None and m.feasible
    assert m.wall_s is not None and m.wall_s >= 40  # it did run into the timeout
    aot = m.starts["aot"]
    assert aot.status == "timeout", aot
    assert aot.note.startswith("the aot build did not finish within the trial's 40 s"), aot.note
    assert "error" in m.precompiled["aot"] and "error" not in m.precompiled["precompiled"]
    done = m.starts["precompiled"]
    assert done.status == "ok" and done.measured and done.compile_s is not None, done
    assert done.latency is not None and m.precompiled["precompiled"]["bytes"] > 0
    shown = summary(m)
    assert "aot timeout" in shown and "precompiled " in shown.split("starts", 1)[1]


def test_a_build_in_progress_and_those_after_it_are_marked_unbuilt() -> None:
    """What the parent marks when the cold process ends inside a build: the build it was in
    says it did not finish, one it never began says why not, one it finished keeps its
    result."""
    strategy = Strategy.create("full", "inductor")
    request = Request.trial(ModelRef("toy-64"), Workload(device="cpu"), strategy, Settings())
    request = request.but(build_ahead={"precompiled": "/x/a.bin", "aot": "/x/b.pt2"})
    m = Measurement(strategy, None, None, "ok")
    unbuilt(m, request, "crashed", "(child died of signal SIGSEGV)")
    built = m.precompiled
    assert built["precompiled"] == {"status": "crashed", "error": "the precompiled build did "
                                    "not finish (child died of signal SIGSEGV); the cold "
                                    "measurement stands"}  # fmt: skip
    assert m.precompiled["aot"]["error"].startswith("not built: the precompiled build before it")
    m = Measurement(strategy, None, None, "ok", precompiled={"precompiled": {"bytes": 1}})
    unbuilt(m, request, "timeout", "within the trial's 5 s")
    built = m.precompiled
    assert built["precompiled"] == {"bytes": 1} and built["aot"]["status"] == "timeout"
    assert m.precompiled["aot"]["error"].startswith("the aot build did not finish within")
