"""The workload (autotune/workload.py): what its stored dict holds for each kind, and the
objectives a kind has unless told."""

from __future__ import annotations

import pytest

from autotune.choice import objectives
from autotune.errors import ConfigError
from autotune.workload import Workload, default_objectives

BASE = {"batch_size": 1, "seq_len": 32, "dtype": "float32", "device": "cpu"}


def test_the_other_workloads_store_as_they_did_before_arrivals() -> None:
    """A study's identity is its stored workload: the continuous workload's fields are left
    out of every other's dict, so their studies keep their names and lookups."""
    assert Workload().to_dict() == {**BASE, "kind": "inference"}
    assert Workload(kind="train").to_dict() == {**BASE, "kind": "train"}
    assert Workload(kind="generate").to_dict() == {**BASE, "kind": "generate", "new_tokens": 32}
    traffic = Workload(kind="generate", seq_len="8,16", new_tokens=4, requests=3).to_dict()
    assert set(traffic) == {*BASE, "kind", "new_tokens", "traffic", "answers"}
    assert Workload(seq_len="8,16", requests=3).to_dict().keys() == {*BASE, "kind", "traffic"}


def test_a_continuous_workload_stores_its_arrivals_and_reads_them_back() -> None:
    w = Workload(kind="continuous", rate=4.0, seq_len="8,16", new_tokens="2..6", requests=5,
                 slo="tpot=50ms")  # fmt: skip
    stored = w.to_dict()
    assert set(stored) == {*BASE, "kind", "new_tokens", "traffic", "answers", "arrivals", "rate",
                           "slo"}  # fmt: skip
    assert stored["arrivals"] == list(w.arrivals) and len(w.arrivals) == 5
    assert Workload.from_dict(stored) == w  # the stored arrivals, never drawn again
    loop = Workload(kind="continuous", concurrency=2, requests=3)
    assert "arrivals" not in loop.to_dict() and loop.to_dict()["concurrency"] == 2
    assert Workload.from_dict(loop.to_dict()) == loop


def test_a_continuous_study_is_timed_by_its_first_token_unless_told() -> None:
    assert default_objectives("continuous") == ("compile", "ttft")
    assert default_objectives("generate") == ("compile", "decode")
    assert default_objectives() == default_objectives("train") == ("compile", "latency")
    for speed in ("ttft", "decode", "latency"):
        objectives.check(("compile", speed), ("cold",), "continuous")
    with pytest.raises(ConfigError, match="need --workload generate or continuous"):
        objectives.check(("compile", "ttft"), ("cold",), "inference")
