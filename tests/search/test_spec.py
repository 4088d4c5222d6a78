"""A stored spec read back as a StudySpec (``StudySpec.from_dict``): the spec as it was, an
older one with the documented defaults, another version's keys left alone, and a garbled
value named with its study and key."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.search.spec import StudySpec
from autotune.strategy import Space
from autotune.workload import Workload
from tests.helpers import fast_spec

TOY = {"model": {"name": "toy-64"}}


def test_a_stored_spec_reads_back_as_it_was_stored() -> None:
    spec = fast_spec(trials=3, objectives="compile,latency,memory", max_memory="2GiB",
                     policy="fastest", layers=2, seq_len="8,16")  # fmt: skip
    stored = json.loads(json.dumps(spec.to_dict()))  # as the store keeps it
    kept = copy.deepcopy(stored)
    read = StudySpec.from_dict(stored, "s")
    assert read == spec and read.unread == "" and read.check() is read
    assert json.dumps(read.to_dict()) == json.dumps(spec.to_dict())  # exports stay byte-equal
    assert (read.model.name, read.model.layers) == ("toy-64", 2)
    assert read.workload.traffic == spec.workload.traffic != ()  # its requests, as drawn
    assert (read.policy, read.trials, read.max_memory_mb) == ("fastest", 3, 2048.0)
    assert read.objectives == ("compile", "latency", "memory")
    assert read.space.backend == ("eager", "aot_eager") and read.settings == spec.settings
    assert stored == kept  # read, never changed


@pytest.mark.parametrize(
    ("raw", "kind", "objectives"),
    [
        (TOY, "inference", ("compile", "latency")),
        ({**TOY, "workload": {"kind": "generate"}, "objectives": []}, "generate",
         ("compile", "decode")),
        ({"model": {"name": "toy-64", "revision": "x"}, "workload": {"kind": "train", "steps": 3},
          "settings": {"iters": 5, "gone": 1}, "space": {"later": ["x"]}, "gone": 1}, "train",
         ("compile", "latency")),  # keys of another version are left alone
    ],
)  # fmt: skip
def test_an_old_stored_spec_reads_with_the_documented_defaults(
    raw: dict, kind: str, objectives: tuple[str, ...]
) -> None:
    kept = copy.deepcopy(raw)
    old = StudySpec.from_dict(raw, "old").check()
    assert old.workload.kind == kind and old.objectives == objectives
    defaults = Workload(kind=kind)
    w = old.workload
    assert (w.device, w.dtype, w.batch_size, w.seq_len) == (
        defaults.device, defaults.dtype, defaults.batch_size, defaults.seq_len) == (
        "cpu", "float32", 1, 32)  # fmt: skip
    assert (old.policy, old.trials, old.max_memory_mb) == ("knee", 30, None)
    assert old.model.layers is None
    assert (old.space, w.traffic, old.sampler, old.rungs) == (Space(), (), "surrogate", "cheap")
    assert raw == kept


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ([["model", "toy-64"]], "it is list, not a table"),
        ({}, "model: the model name is empty"),
        ({**TOY, "workload": "inference"}, "workload: 'inference': expected a table"),
        ({**TOY, "workload": {"kind": "serve"}}, "bad workload 'serve'"),
        ({**TOY, "workload": {"kind": 7}}, "workload: kind = 7: expected text"),
        ({**TOY, "workload": {"batch_size": "1..8"}}, "batch_size = '1..8'"),  # no spread drawn
        ({**TOY, "workload": {"traffic": "/etc/hosts"}}, "traffic = '/etc/hosts'"),  # no file
        ({**TOY, "objectives": 5}, "objectives: bad objectives 5"),
        ({**TOY, "policy": ["knee"]}, "policy: bad policy ['knee']"),
        ({**TOY, "max_memory_mb": "lots"}, "max_memory_mb: bad memory size 'lots'"),
        ({"model": {"name": "toy-64", "layers": 0}}, "model: --layers must be"),
        ({**TOY, "settings": {"iters": 0}}, "settings: iters = 0"),
    ],
)
def test_a_garbled_value_of_what_was_measured_says_which_study_and_key(
    raw: object, where: str
) -> None:
    """What the answer depends on (model, workload, settings, objectives, policy, memory
    limit) is never replaced by a default: the spec is not read."""
    with pytest.raises(ConfigError, match=r"study 'old': its stored spec cannot be read: .*"
                       + re.escape(where)):  # fmt: skip
        StudySpec.from_dict(raw, "old")


@pytest.mark.parametrize(
    ("raw", "where", "default"),
    [
        ({"trials": "30"}, "trials = '30': expected a whole number", ("trials", 30)),
        ({"sampler": "cmaes"}, "sampler = 'cmaes': expected one of", ("sampler", "surrogate")),
        ({"rungs": 2}, "rungs = 2: expected text", ("rungs", "cheap")),
        ({"time_budget_s": "soon"}, "time_budget_s: bad duration 'soon'", ("time_budget_s", None)),
        ({"space": {"granularity": [1]}}, "space: granularity = [1]", ("space", Space())),
        ({"space": "all"}, "space: 'all': expected a table", ("space", Space())),
    ],
)
def test_a_garbled_value_only_a_search_runs_by_is_left_out_and_no_search_runs_on_it(
    raw: dict, where: str, default: tuple[str, object]
) -> None:
    """The study still shows and exports (its answer does not depend on it), with the value's
    default in its place; a search (a worker joining, a run resuming) refuses it."""
    spec = StudySpec.from_dict({**TOY, "policy": "fastest", **raw}, "old")
    assert getattr(spec, default[0]) == default[1] and spec.policy == "fastest"
    assert where in spec.unread and spec.unread.startswith("study 'old'")
    with pytest.raises(ConfigError, match=r"study 'old': its stored spec cannot be read: .*"
                       + re.escape(where)):  # fmt: skip
        spec.check()
    assert "unread" not in spec.to_dict()


def test_a_continuous_spec_reads_its_arrivals_from_a_spec_file_and_back_from_the_store(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('[model]\nname = "toy-64"\n[workload]\nkind = "continuous"\nrate = 40\n'
                    'seq_len = "4..60"\nnew_tokens = "4..16"\nrequests = 12\n'
                    'slo = "ttft=500ms,tpot=50ms"\n')  # fmt: skip
    spec = StudySpec.from_sources(str(toml))
    w = spec.workload
    assert (w.kind, w.rate, len(w.arrivals)) == ("continuous", 40.0, 12)
    assert w.slo == "ttft=500ms,tpot=50ms"
    assert spec.objectives == ("compile", "ttft")
    read = StudySpec.from_dict(json.loads(json.dumps(spec.to_dict())), "s")
    assert read == spec and read.workload.arrivals == w.arrivals
    flagged = StudySpec.from_sources(None, model="toy-64", workload="continuous", concurrency=3)
    assert (flagged.workload.concurrency, flagged.workload.arrivals) == (3, ())
    with pytest.raises(ConfigError, match="not both"):  # a flag beside the file's rate
        StudySpec.from_sources(str(toml), concurrency=3)
