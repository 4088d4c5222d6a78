"""pad=auto's trial (autotune/trial/auto_padding.py): a pilot padded to intervals fitted to the
traffic records eager's batches, the intervals of least lifetime cost are chosen from them, and
the trial measures those, with the cost it predicted beside the cost it measured."""

from __future__ import annotations

import pytest

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial import auto_padding
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload

LLAMA = ModelRef("tests.models:tiny_llama")
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)
POISSON = {"kind": "continuous", "rate": 40.0, "seq_len": "4..40", "new_tokens": "2..8",
           "requests": 8}  # fmt: skip


def test_the_pilot_pads_to_the_traffic_s_longest_prompt_and_request() -> None:
    w = Workload(**POISSON)
    s = Strategy.create(backend="eager", batching="pad=auto+tokens=256")
    pilot = auto_padding.pilot_of(s, w)
    longest = max(p + a for (_, p), a in zip(w.traffic, w.answers, strict=True))
    q, kv = (1 << (max(p for _, p in w.traffic) - 1).bit_length(), 1 << (longest - 1).bit_length())
    assert pilot.batching == f"q={q}+kv={kv}+tokens=256" and pilot.edges is None
    assert auto_padding.is_auto(s) and not auto_padding.is_auto(pilot)


@pytest.mark.slow
def test_pad_auto_measures_the_intervals_its_pilot_priced() -> None:
    w = Workload(**POISSON)
    m = measure(LLAMA, w, Strategy.create(backend="eager", batching="pad=auto"), QUICK)
    assert m.ok, m.reason
    auto, c = m.traffic["auto"], m.traffic["continuous"]
    q, kv = auto["intervals"]
    assert m.strategy.edges == ((q,), (kv,)) and m.strategy.batching == "pad=auto"
    assert (c["config"]["q_padding_interval_size"], c["config"]["kv_padding_interval_size"]) == (
        q, kv)  # fmt: skip
    assert auto["pilot"]["status"] == "ok" and auto["batches"] > len(w.traffic)
    assert sum(n for _, _, n, _ in c["batches"]) > len(w.traffic)  # eager's, kept by the trial
    assert auto["calls"] == 40 * 3600  # the hour's requests at the arrival rate
    # what the pilot's own intervals would cost, priced alike, is not below the choice's
    assert auto["predicted"]["total_s"] <= auto["pilot"]["cost"]["total_s"] * 1.000001 or (
        auto["pilot"]["batching"].split("+")[:2] != [f"q={q}", f"kv={kv}"])  # fmt: skip
    assert auto["measured"]["total_s"] > m.compile_s  # its stalls and the hour's requests
    assert m.accuracy.passed


def test_a_pilot_that_fails_fails_the_trial_in_one_line() -> None:
    hurried = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=2)  # the pilot times out
    m = measure(LLAMA, Workload(**POISSON), Strategy.create(backend="eager", batching="pad=auto"),
                hurried)  # fmt: skip
    assert m.status == "failed" and m.reason.startswith("pad=auto: the pilot q=")
    assert "timeout" in m.reason and "\n" not in m.reason


def test_measure_says_how_pad_auto_chose_and_what_it_cost() -> None:
    from autotune.cli.traffic_lines import intervals_lines

    auto = {"intervals": [16, 128], "lifetime_s": 3600.0, "batches": 27, "stall_s": 0.68,
            "predicted": {"total_s": 427.0}, "measured": {"total_s": 1408.0},
            "model": {"base": 9.7e-4, "per_token": 4.1e-5, "per_pair": 0.0},
            "pilot": {"batching": "q=64+kv=64", "cost": {"total_s": 1700.0}},
            "note": "the measured cost over 1 h, 1408 s, is 230% above the predicted"}  # fmt: skip
    first, note = intervals_lines(auto)
    assert first.startswith("  padding  auto intervals: q 16, kv 128, chosen by their cost")
    assert "(predicted 427 s, measured 1,408 s; the pilot's q=64+kv=64 1,700 s)" in first
    assert "from eager's 27 batches: a padded shape's compiles 0.68 s, a batch 0.970 ms" in first
    assert note.strip() == auto["note"]
    assert intervals_lines(None) == [] and intervals_lines({"edges": [[1], [8]]}) == []
