"""``--dtype auto`` decides the same on one machine, run after run, also under load
(autotune/environment.py): the CPU's flags decide, a timing robust to a burst confirms them, and a
re-run takes the recorded decision and continues its study."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autotune import environment

NATIVE_TORCH = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
BUSY = "while True: pass"
BURSTS = (
    "import time\nwhile True:\n t = time.time()\n while time.time() - t < 0.03: pass\n"
    " time.sleep(0.02)"
)  # busy 30 ms of every 50, the rest asleep


class Under:
    """The functions under test, found when a test runs (so that on the code before them,
    each test fails on its own rather than the whole module failing to collect)."""

    def __getattr__(self, name: str) -> object:
        names = {"native": "native_bf16", "decide": "auto_dtype"}
        return getattr(importlib.import_module("autotune.environment"), names.get(name, name))


def dtypes() -> Under:
    return Under()


def cpuinfo(tmp_path: Path, *flags: str) -> set[str]:
    """A CPU's flags as /proc/cpuinfo gives them, read back from a file."""
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f {' '.join(flags)}\n")
    return environment.cpu_flags(str(path))


class Timing:
    """Stands in for the matmul timing only: the ratios it gives, one per call."""

    def __init__(self, *ratios: float) -> None:
        self.ratios, self.calls = list(ratios), 0

    def __call__(self, fresh: bool) -> float:
        self.calls += 1
        return self.ratios.pop(0)


@pytest.mark.skipif(not NATIVE_TORCH, reason="torch's CPU capability here is below AVX-512")
def test_the_flags_decide_and_a_timing_that_agrees_confirms_them(tmp_path: Path) -> None:
    d = dtypes()
    native, plain = cpuinfo(tmp_path, "avx512_bf16"), cpuinfo(tmp_path)
    assert d.native(native) == (True, "native avx512_bf16")
    timing = Timing(0.3)
    decided = d.decide("cpu", native, timing)
    assert (decided.dtype, timing.calls) == ("bfloat16", 1), decided.line
    assert decided.line.startswith("dtype auto: bfloat16: native avx512_bf16; bfloat16 matmuls "
                                   "take 0.3x float32's time here")  # fmt: skip
    timing = Timing(38.0)
    decided = d.decide("cpu", plain, timing)
    assert (decided.dtype, timing.calls) == ("float32", 1), decided.line
    assert "no amx_bf16 or avx512_bf16 flag; bfloat16 matmuls run 38x slower" in decided.line


@pytest.mark.skipif(not NATIVE_TORCH, reason="torch's CPU capability here is below AVX-512")
def test_a_timing_that_disagrees_once_is_measured_again_and_the_flags_stand(
    tmp_path: Path,
) -> None:
    """One burst of load made bfloat16 look 5x slower (the flip that changed the study): it is
    measured again, and the flags stand where the second timing agrees."""
    d = dtypes()
    timing = Timing(5.0, 0.3)
    decided = d.decide("cpu", cpuinfo(tmp_path, "amx_bf16", "avx512_bf16"), timing)
    assert (decided.dtype, decided.timed) == ("bfloat16", (5.0, 0.3)), decided.line
    assert "native amx_bf16,avx512_bf16" in decided.line and "timed twice" not in decided.line
    assert "(timed again: the first timing, 5x, disagreed)" in decided.line
    timing = Timing(0.3, 38.0)
    assert d.decide("cpu", cpuinfo(tmp_path), timing).dtype == "float32"


@pytest.mark.skipif(not NATIVE_TORCH, reason="torch's CPU capability here is below AVX-512")
def test_a_timing_that_disagrees_twice_is_followed_and_the_line_says_both(tmp_path: Path) -> None:
    d = dtypes()
    timing = Timing(38.0, 41.0)  # flags say native, but torch takes its fallback
    decided = d.decide("cpu", cpuinfo(tmp_path, "avx512_bf16"), timing)
    assert (decided.dtype, timing.calls) == ("float32", 2)
    assert decided.line.startswith("dtype auto: float32, as timed twice, though the flags say "
                                   "native (native avx512_bf16): bfloat16 matmuls run 41x "
                                   "slower")  # fmt: skip
    timing = Timing(0.3, 0.25)  # no flag this autotune knows, but quick
    decided = d.decide("cpu", cpuinfo(tmp_path), timing)
    assert decided.dtype == "bfloat16" and "though the flags say not native" in decided.line


def test_onednn_switched_off_or_capped_below_bfloat16_is_not_native(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oneDNN's own switches, read on any CPU: torch's CPU capability (the ATen kernels' ISA,
    which ``ATEN_CPU_CAPABILITY`` can lower) stands at AVX512 here so that the oneDNN checks
    after it are reached; at AVX2 it decides first, whatever oneDNN allows."""
    d = dtypes()
    flags = cpuinfo(tmp_path, "avx512_bf16")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert d.native(flags) == (False, "avx512_bf16, but torch's CPU capability is AVX2")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert d.native(flags) == (False, "avx512_bf16, but ONEDNN_MAX_CPU_ISA caps oneDNN at AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert d.native(flags) == (True, "native avx512_bf16")
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    assert d.native(flags) == (False, "avx512_bf16, but oneDNN is switched off")


@pytest.mark.long  # two busy processes for half a minute: alone, not beside timed tests
def test_ten_decisions_under_two_busy_processes_are_the_flags_and_the_timing_agrees() -> None:
    """Beside one process busy all the time and one busy 30 ms of every 50 (one decision of
    five said float32 before), ten fresh processes decide what the flags say, and each one's
    timing agreed with them the first time."""
    expected = "bfloat16" if dtypes().native()[0] else "float32"
    load = [subprocess.Popen([sys.executable, "-c", code]) for code in (BUSY, BURSTS)]
    try:
        time.sleep(0.5)
        decisions = []
        for _ in range(10):
            done = subprocess.run(
                [sys.executable, "-c", "from autotune import environment as e; "
                 "d = e.auto_dtype('cpu'); print(len(d.timed), d.line)"],
                capture_output=True, text=True, timeout=120,
                env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"},
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            decisions.append(done.stdout.strip())
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
    assert all(line.startswith(f"1 dtype auto: {expected}: ") for line in decisions), decisions


@pytest.mark.slow
def test_a_re_run_takes_the_recorded_decision_and_continues_its_study(in_tmp: Path) -> None:
    """The same command twice: the second finds the decision the first recorded, says "as
    before", and continues the first's study (one more strategy measured in it)."""

    def search(trials: int) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers", "1",
             "--dtype", "auto", "--trials", str(trials), "--iters", "2", "--warmup", "1",
             "--backend", "eager", "--granularity", "none,full", "--no-progress",
             "--no-confirm"], cwd=in_tmp, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    first, again = search(1), search(2)
    assert first[0] == again[0]  # the same study
    assert first[1].startswith("dtype auto: ") and "as before" not in first[1]
    dtype = first[1].split(":")[1].split(",")[0].strip()
    assert again[1].startswith(f"dtype auto: {dtype}, as before on this machine (decided ")
    assert any("2 strategies measured in this study" in line for line in again), again
