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


def test_the_study_records_the_cpu_s_capability_and_refuses_another() -> None:
    """Two CPUs of one model name can differ in what torch runs on them (a VM that hides
    AVX-512, say): a study recorded on one refuses a worker on the other; a study recorded
    before these fields existed still takes this machine."""
    from autotune.coordination import check_environment
    from autotune.environment import cpu_bf16, fingerprint
    from autotune.errors import ConfigError

    here = fingerprint("cpu", "bfloat16")
    assert here["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert here["cpu_bf16"] == cpu_bf16() and here["cpu_bf16"]
    check_environment(dict(here), here, force=False)  # the same machine joins
    other = "AVX2" if here["cpu_capability"] != "AVX2" else "DEFAULT"
    with pytest.raises(ConfigError, match="cpu_capability"):
        check_environment({**here, "cpu_capability": other}, here, force=False)
    with pytest.raises(ConfigError, match="cpu_bf16"):
        check_environment({**here, "cpu_bf16": "amx_bf16,avx512_bf16" if here["cpu_bf16"]
                           == "none" else "none"}, here, force=False)  # fmt: skip
    older = {k: v for k, v in here.items() if k not in ("cpu_capability", "cpu_bf16")}
    check_environment(older, here, force=False)
