"""A dtype that is slow on this CPU is named before the first trial (autotune/environment.py)."""

from __future__ import annotations

import pytest
import torch

from autotune.environment import SLOW, matmul_ratio, slow_dtype


def test_a_slow_bfloat16_is_named_with_its_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN off sends bfloat16 matmuls down torch's fallback GEMM, as a CPU without native
    bfloat16 does (38x slower than float32 on an AVX-512 BF16 CPU here)."""
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)  # restored after the test
    line = slow_dtype("bfloat16", "cpu")
    assert line.startswith("note: bfloat16 matmuls run ") and "x slower than float32" in line
    assert "--dtype float32" in line and "CPU capability" in line
    ratio = float(line.split(" run ")[1].split("x")[0])
    assert ratio >= SLOW


def test_a_dtype_that_is_not_slow_is_not_named() -> None:
    assert slow_dtype("float32", "cpu") == ""  # the yardstick itself
    assert slow_dtype("bfloat16", "cuda:0") == ""  # a GPU's bfloat16 is never the slow path
    if matmul_ratio("bfloat16") < SLOW / 2:  # native bfloat16 here (AMX or AVX-512 BF16)
        assert slow_dtype("bfloat16", "cpu") == ""
