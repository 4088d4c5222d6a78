"""The accuracy gate: element by element, as torch.testing.assert_close checks."""

from __future__ import annotations

import pytest
import torch

from autotune.catalog import ModelRef
from autotune.strategy import Strategy
from autotune.trial.accuracy import TOLERANCES, against_eager
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload


@pytest.mark.parametrize(("dtype", "nudge"), [("float32", 0.03), ("bfloat16", 1.9)])
def test_one_small_element_off_fails_although_the_largest_value_would_hide_it(dtype, nudge):
    """The old gate allowed atol + rtol * max|eager| on every element: 0.04 in float32 and
    2.01 in bf16 here. Each nudge is within that, and far outside the element's own bound."""
    torch.manual_seed(0)
    eager = (torch.randn(64, 256) * 10).to(getattr(torch, dtype))  # RMS about 10
    eager.view(-1)[0] = 40.0  # the largest value
    eager.view(-1)[7] = 0.001
    atol, rtol = TOLERANCES[dtype]
    assert nudge <= atol + rtol * 40.0
    nudged = eager.clone()
    nudged.view(-1)[7] += nudge
    acc = against_eager([eager], [nudged], dtype)
    assert not acc.passed and acc.mismatched == pytest.approx(1 / eager.numel())
    assert "1 of 16384 elements out of tolerance" in acc.detail
    assert against_eager([eager], [eager.clone()], dtype).passed


def test_errors_within_each_elements_bound_pass_and_nan_agrees_with_nan() -> None:
    atol, rtol = TOLERANCES["float32"]
    eager = torch.tensor([0.0, 1.0, -100.0, float("nan"), float("inf")])
    within = eager + torch.tensor([0.9 * atol, 0.9 * (atol + rtol), 0.9 * 100 * rtol, 0, 0])
    acc = against_eager([eager], [within], "float32")
    assert acc.passed and acc.mismatched == 0.0, acc.detail
    beyond = eager + torch.tensor([4 * atol, 0, 0, 0, 0])
    assert not against_eager([eager], [beyond], "float32").passed
    assert not against_eager([eager], [torch.tensor([0.0, 1.0, -100.0, 1.0, float("inf")])],
                       "float32").passed  # fmt: skip


def test_a_backend_that_nudges_one_small_element_is_infeasible() -> None:
    m = measure(ModelRef("tests.models:tiny_toy"), Workload(device="cpu"),
                Strategy.create("full", "tests.models:nudge_backend"),
                Settings(iters=3, warmup=1, timeout_s=120))  # fmt: skip
    assert m.status == "ok" and m.accuracy is not None
    assert not m.accuracy.passed and m.accuracy.mismatched > 0 and not m.feasible
