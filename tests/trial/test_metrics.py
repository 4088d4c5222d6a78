"""The accuracy gate: element by element, as torch.testing.assert_close checks."""

from __future__ import annotations

from pathlib import Path

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


def test_eager_rounds_far_past_its_first_call_are_flagged_as_contended() -> None:
    """The issue's trial: eager's TTFT 3.0 ms in its first pass, about 236 ms in its rounds,
    while the CPU-share reading said nothing. Rounds near the first call (or quicker, as warm
    calls are) are not flagged; nor are rounds whose own spread covers the gap."""
    from autotune.trial import metrics

    assert metrics.contended(0.003, [236.0, 230.0, 241.0, 238.0]) == pytest.approx(237.0 / 3.0)
    assert metrics.contended(0.003, [2.1, 2.0, 2.2, 1.9]) is None  # warm: quicker than the first
    assert metrics.contended(0.003, [3.5, 3.2, 3.9, 3.1]) is None
    assert metrics.contended(0.003, [1.0, 7.0, 20.0, 1.0]) is None  # their own spread covers it
    assert metrics.contended(0.003, [7.0]) is None  # one round: no spread to read


@pytest.mark.slow
def test_a_trial_pins_torch_s_threads_to_the_cpus_it_may_run_on(tmp_path: Path) -> None:
    """Confined to one CPU (a container's share, taskset), a trial runs torch on one thread
    on both sides, not on torch's default of every core, and records it; OMP_NUM_THREADS, where
    given, is what it runs."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import os, sys, json\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from autotune.catalog import ModelRef\n"
        "from autotune.strategy import Strategy\n"
        "from autotune.trial.parent import measure\n"
        "from autotune.workload import Settings, Workload\n"
        "if __name__ == '__main__':\n"
        "    m = measure(ModelRef('toy-64'), Workload(), Strategy.create('none'),\n"
        "                Settings(iters=2, warmup=1, timeout_s=120))\n"
        "    print(json.dumps(m.timings.get('threads')))\n"
    )
    path = tmp_path / "pinned.py"
    path.write_text(script)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for given, expected in (("", 1.0), ("2", 2.0)):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        env["PYTHONPATH"] = root
        if given:
            env["OMP_NUM_THREADS"] = given
        out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                             env=env, timeout=300, cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == expected, (given, out.stdout)
