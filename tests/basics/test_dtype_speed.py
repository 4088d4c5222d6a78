"""A dtype that is slow on this CPU is named before the first trial (autotune/environment.py)."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pytest
import torch

from autotune.environment import BF16_FLAGS, SLOW, auto_dtype, cpu_flags, matmul_ratio, slow_dtype
from autotune.workload import Workload

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2"}  # fmt: skip  # a CPU without native bfloat16


def test_a_slow_bfloat16_is_named_with_its_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN off sends bfloat16 matmuls down torch's fallback GEMM, as a CPU without native
    bfloat16 does (38x slower than float32 on an AVX-512 BF16 CPU here)."""
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)  # restored after the test
    line = slow_dtype("bfloat16", "cpu")
    assert line.startswith("note: bfloat16 matmuls run ") and "x slower than float32" in line
    assert "--dtype float32" in line and "--dtype auto" in line and "CPU capability" in line
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


def test_auto_serves_float32_where_bfloat16_is_slow_and_bfloat16_where_it_is_native(
    monkeypatch: pytest.MonkeyPatch, in_tmp: Path
) -> None:
    """``--dtype auto`` is the dtype a user serves in here: float32 where bfloat16 matmuls take
    the fallback (oneDNN off), bfloat16 where the CPU has them natively, each with its line."""
    native = matmul_ratio("bfloat16") < SLOW / 2
    if native:
        dtype, line, _ = astuple(auto_dtype("cpu"))
        assert dtype == "bfloat16" and line.startswith("dtype auto: bfloat16: native ")
        assert Workload.create(device="cpu", dtype="auto").dtype == "bfloat16"
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)  # restored after the test
    dtype, line, _ = astuple(auto_dtype("cpu"))
    assert dtype == "float32", line
    # the first check that fails here says why: no flag, torch's capability below AVX-512
    # (an AVX2 CPU, or ATEN_CPU_CAPABILITY=avx2), or else oneDNN switched off
    capability = torch.backends.cpu.get_cpu_capability()
    why = ("no amx_bf16 or avx512_bf16 flag" if not set(BF16_FLAGS) & cpu_flags()
           else f"but torch's CPU capability is {capability}"
           if not capability.startswith("AVX512") else "but oneDNN is switched off")  # fmt: skip
    assert line.startswith("dtype auto: float32: ") and why in line, line
    assert "CPU capability" in line and float(line.split(" run ")[1].split("x")[0]) >= SLOW
    assert Workload.create(device="cpu", dtype="auto").dtype == "float32"
    assert Workload.create(device="cpu", dtype="bfloat16").dtype == "bfloat16"  # asked: kept


def test_auto_on_a_gpu_is_bfloat16_from_ampere_on_else_float16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU side read from the device's own properties (torch's lowest layer stands in: a
    compute capability 7.5 card, then 9.0), never by a bfloat16 tensor's emulation."""
    import types

    monkeypatch.setattr(torch.version, "hip", None)
    for major, want in ((7, "float16"), (9, "bfloat16")):
        card = types.SimpleNamespace(major=major, minor=0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device, c=card: c)
        dtype, line, _ = astuple(auto_dtype("cuda:0"))
        assert dtype == want and line.startswith(f"dtype auto: {want}")


@pytest.mark.slow
def test_the_search_says_what_auto_chose_and_names_it_in_the_study(in_tmp) -> None:
    """End to end on a CPU restricted to AVX2: ``--dtype auto`` measures float32 and says why
    before the first trial; ``--dtype bfloat16`` there measures bfloat16 and names it slow."""
    import os
    import subprocess
    import sys

    def search(dtype: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers", "1",
             "--dtype", dtype, "--trials", "1", "--iters", "2", "--warmup", "1", "--backend",
             "eager", "--granularity", "none", "--no-progress", "--no-confirm"],
            cwd=in_tmp, capture_output=True, text=True, env={**os.environ, **AVX2}, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout

    chose = search("auto")
    assert "-float32-cpu" in chose.splitlines()[0]
    assert "dtype auto: float32: " in chose.splitlines()[1]
    assert "but torch's CPU capability is AVX2" in chose.splitlines()[1]
    asked = search("bfloat16")
    assert "-bfloat16-cpu" in asked.splitlines()[0]
    assert asked.splitlines()[1].startswith("note: bfloat16 matmuls run")
