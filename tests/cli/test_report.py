"""What a person reads of one measurement (autotune/cli/report.py): its header says what was
served, a continuous workload's arrivals among it."""

from __future__ import annotations

from autotune.cli.report import summary
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.workload import Workload


def test_a_continuous_measurement_s_header_says_how_its_requests_arrive() -> None:
    w = Workload(kind="continuous", rate=40.0, seq_len="4..40", new_tokens="2..8", requests=8,
                 slo="ttft=500ms")  # fmt: skip
    m = Measurement(Strategy.create(backend="eager").to_dict(), {"name": "tiny"}, w.to_dict(),
                    "failed", reason="x")  # fmt: skip
    head = summary(m).splitlines()[0]
    assert "continuous over a traffic of 8 requests" in head
    assert head.endswith("Poisson arrivals at 40/s · SLO ttft=500ms")
    closed = Workload(kind="continuous", concurrency=2, seq_len="4..40", new_tokens="2..8",
                      requests=8)  # fmt: skip
    m = Measurement(Strategy.create(backend="eager").to_dict(), {}, closed.to_dict(), "failed",
                    reason="x")  # fmt: skip
    assert summary(m).splitlines()[0].endswith("closed loop of 2 in flight")
