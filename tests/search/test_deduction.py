"""Deduction: failure implication and equivalence, proved on real trials of awkward models."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch

from autotune.choice.selection import candidates
from autotune.search import Search, deduction, open_search, run
from autotune.strategy import Strategy
from autotune.trial import metrics, parent
from autotune.trial.measurement import Graphs, Measurement
from tests.helpers import fast_spec


def _raised(fn: object, *args: object, **kwargs: object) -> BaseException:
    torch._dynamo.reset()
    try:
        torch.compile(fn, **kwargs)(*args)  # type: ignore[call-overload]
    except Exception as exc:
        return exc
    raise AssertionError("it compiled")


def _breaks(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    torch._dynamo.graph_break()
    return y + 1


def _data_dependent(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.sum().item() > 0 else x


def _refusing_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    raise ValueError("this backend refuses every graph")


def test_failure_stage_reads_dynamo_s_exceptions() -> None:
    """The one use of torch._dynamo.exc: fails loudly if Dynamo's exception classes change."""
    x = torch.randn(3)
    assert metrics.failure_stage(_raised(_breaks, x, backend="eager", fullgraph=True)) == "dynamo"
    data = _raised(_data_dependent, x, backend="eager", fullgraph=True, dynamic=True)
    assert metrics.failure_stage(data) == "dynamo"
    assert metrics.failure_stage(_raised(_breaks, x, backend=_refusing_backend)) == ""
    assert metrics.failure_stage(ValueError("not torch's")) == ""
    internal = torch._dynamo.exc.InternalTorchDynamoError("RuntimeError: not in this Graph")
    assert metrics.failure_stage(internal) == "dynamo"  # e.g. nested + dynamic on gpt2
    assert metrics.failure_stage_of("InternalTorchDynamoError: RuntimeError: ...") == "dynamo"
    assert metrics.failure_stage_of("BackendCompilerFailed: backend='inductor' ...") == ""


def _search(folder: Path, model: str, **space: object) -> Search:
    spec = fast_spec(model=model, layers=None, options="none", **space)
    return open_search(spec, f"sqlite:///{folder}/t.db")


def _trial(search: Search, key: str) -> optuna.trial.FrozenTrial:
    study = optuna.load_study(study_name=search.name, storage=search.store.url)
    return next(t for t in study.trials if t.user_attrs.get("key") == key)


def test_a_dynamo_failure_implies_every_backend_fails_and_it_is_right(in_tmp: Path) -> None:
    search = _search(in_tmp, "tests.models:graph_break", granularity="full",
                     backend="eager,aot_eager,inductor", dynamic="none", fullgraph="true",
                     trials=1)  # fmt: skip
    run(search)
    (measured,) = search.measured()  # one trial of the budget; all the others are implied
    source = Measurement.from_dict(search.store.measurement(search.name, measured).payload)
    assert source.status == "failed" and source.stage == "dynamo"
    implied = sorted(search.keys - {measured}, key=lambda k: "inductor" not in k)
    assert len(implied) == len(search.keys) - 1 >= 2
    for key in implied:
        row = search.store.measurement(search.name, key)
        assert row is not None and row.deduced_from == measured
        told = Measurement.from_dict(row.payload)
        assert told.status == "failed" and told.reason.startswith(f"implied by {measured}")
        assert source.reason in told.reason
        trial = _trial(search, key)
        assert trial.state == optuna.trial.TrialState.FAIL and "deduced" in trial.user_attrs
    # and it is right: measured for real, an implied strategy (inductor's, unless inductor was
    # the one measured) fails in Dynamo too
    first = Measurement.from_dict(search.store.measurement(search.name, implied[0]).payload)
    real = parent.measure(search.spec.model, search.spec.workload, first.strategy,
                          search.spec.settings)  # fmt: skip
    assert real.status == "failed" and real.stage == "dynamo"
    assert search.measured() == {measured}  # one measured, all the others implied
    assert search.coord.tally(search.keys).settled >= search.keys  # 3 settled: exhausted


def test_graph_breaks_imply_fullgraph_fails_with_every_backend(in_tmp: Path) -> None:
    spec = fast_spec(model="tests.models:graph_break", layers=None, options="none")
    plain = Strategy.create("full", "eager", None, None, False)
    broken = parent.measure(spec.model, spec.workload, plain, spec.settings)
    assert broken.ok and broken.graphs is not None and broken.graphs.breaks == 1
    members = [Strategy.create("full", b, None, d, f) for b in ("eager", "aot_eager", "inductor")
               for d in (None, True) for f in (False, True)]  # fmt: skip
    implied = deduction.implied_failures(broken, members)
    assert {s.key for s in implied} == {
        "full/eager/-/dynamic=auto/fullgraph", "full/aot_eager/-/dynamic=auto/fullgraph",
        "full/inductor/default/dynamic=auto/fullgraph",
    }  # fmt: skip
    told = deduction.deduced(broken, implied[1], "implied")
    assert told.status == "failed" and told.stage == "dynamo" and "1 graph break(s)" in told.reason
    real = parent.measure(spec.model, spec.workload, implied[1], spec.settings)
    assert real.status == "failed" and real.stage == "dynamo"  # and it is right


def _one_trial(folder: Path, model: str, **space: object) -> tuple[Search, str, Measurement]:
    """A search with equivalence on that measures one strategy (besides eager): the search,
    that strategy's key and its measurement."""
    search = _search(folder, model, backend="eager", dynamic="none,false", trials=1,
                     equivalence=True, **space)  # fmt: skip
    run(search)
    (key,) = search.measured() - {"none"}
    return search, key, Measurement.from_dict(search.store.measurement(search.name, key).payload)


def test_no_recompile_makes_dynamic_none_and_false_one_measurement(in_tmp: Path) -> None:
    search, key, source = _one_trial(in_tmp, "tests.models:flat", granularity="full",
                                     fullgraph="false,true")  # fmt: skip
    assert source.graphs is not None and source.graphs.recompiles == 0 and not source.graphs.breaks
    first = _trial(search, key)
    others = [s.key for s in search.members if s.key not in ("none", key)]
    assert len(others) == 3  # the other dynamic, the other fullgraph, and both
    for other in others:
        row = search.store.measurement(search.name, other)
        assert row is not None and row.deduced_from == key
        trial = _trial(search, other)
        assert trial.user_attrs["repeat_of"] == first.number and trial.values == first.values
        assert "same compile as" in trial.user_attrs["deduced"]
    assert {p.key for p in candidates(search.store.measurements(search.name))} == {"none", key}


def test_a_recompile_keeps_dynamic_none_and_false_apart(in_tmp: Path) -> None:
    """Per-layer int attributes make regional compilation recompile once per block: then
    dynamic=None and dynamic=False may compile differently, and neither is told the other's."""
    search, key, m = _one_trial(in_tmp, "tests.models:int_attrs", granularity="regional",
                                fullgraph="false")  # fmt: skip
    assert m.graphs is not None and m.graphs.recompiles > 0
    other = next(s.key for s in search.members if s.key not in ("none", key))
    assert search.store.measurement(search.name, other) is None  # left to be measured
    assert deduction.equivalents(m, search.members) == []


def _measured(strategy: Strategy, graphs: Graphs | None, status: str = "ok") -> Measurement:
    return Measurement(strategy.to_dict(), {}, {}, status, graphs=graphs)


@pytest.mark.parametrize(
    ("graphs", "expected"),
    [
        (Graphs(count=1), {"full/eager/-/dynamic=false/breaks-ok",
                           "full/eager/-/dynamic=auto/fullgraph",
                           "full/eager/-/dynamic=false/fullgraph"}),
        (Graphs(count=2, breaks=1), {"full/eager/-/dynamic=false/breaks-ok"}),
        (Graphs(count=1, recompiles=1), {"full/eager/-/dynamic=auto/fullgraph"}),
        (Graphs(count=1, eager_blocks=2), {"full/eager/-/dynamic=false/breaks-ok"}),
        (Graphs(count=1, limit_hit="recompile limit"), set()),
        (Graphs(count=0), set()),
        (None, set()),
    ],
)  # fmt: skip
def test_equivalents_need_their_proof(graphs: Graphs | None, expected: set[str]) -> None:
    source = Strategy.create("full", "eager", None, None, False)
    members = [Strategy.create("full", b, None, d, f) for b in ("eager", "aot_eager")
               for d in (None, True, False) for f in (False, True)]  # fmt: skip
    assert {s.key for s in deduction.equivalents(_measured(source, graphs), members)} == expected


def test_a_dynamo_failure_implies_nothing_for_another_buckets_marks_or_stance() -> None:
    stances = ("default", "eager_then_compile")
    members = [Strategy.create("nested", b, dynamic=True, marks="seq-unbacked", stance=st)
               for b in ("eager", "aot_eager") for st in stances]  # fmt: skip
    failed = _measured(members[1], None, "failed")  # eager_then_compile failed in Dynamo
    failed.stage = "dynamo"
    assert {s.key for s in deduction.implied_failures(failed, members)} == {
        "nested/aot_eager/-/dynamic=true/breaks-ok/marks=seq-unbacked/stance=eager_then_compile"
    }  # the same stance with another backend; never the default stance


def test_dynamic_true_and_failures_have_no_equivalents() -> None:
    members = [Strategy.create("full", "eager", None, d, f)
               for d in (None, True, False) for f in (False, True)]  # fmt: skip
    dynamic = Strategy.create("full", "eager", None, True, False)
    assert {s.key for s in deduction.equivalents(_measured(dynamic, Graphs(count=1)), members)} \
        == {"full/eager/-/dynamic=true/fullgraph"}  # fmt: skip
    failed = _measured(Strategy.create("full", "eager"), Graphs(count=1), "failed")
    assert deduction.equivalents(failed, members) == []
    assert deduction.implied_failures(failed, members) == []  # not Dynamo's: nothing implied
