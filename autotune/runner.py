"""The parent side of a trial: one strategy measured in a fresh child process.

The child gets empty Inductor and Triton cache directories (so every compile is cold and
nothing is inherited) and a wall-clock timeout. Whatever way the child ends (an exception, an
abort, a segfault, an out-of-memory kill, a hang), the parent gets a ``Measurement`` back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import ConfigError, NotApplicable
from autotune.measurement import Measurement
from autotune.strategy import Strategy
from autotune.workload import Workload

if TYPE_CHECKING:
    from autotune.catalog import ModelRef

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Settings:
    """How a trial is timed: timed calls, warm-up calls, the child's timeout, the RNG seed."""

    iters: int = 20
    warmup: int = 3
    timeout_s: float = 1200.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.iters < 1 or self.warmup < 0:
            raise ConfigError("--iters must be at least 1 and --warmup at least 0")
        if self.timeout_s <= 0:
            raise ConfigError("--timeout must be positive")


def _child_env(cache_root: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_root, "inductor")
    env["TRITON_CACHE_DIR"] = os.path.join(cache_root, "triton")
    env["PYTHONUNBUFFERED"] = "1"
    paths = [_PACKAGE_ROOT, os.getcwd(), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when its parent dies, even by SIGKILL, so none outlives it."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the child and any compile workers it started


def _tail(path: str, chars: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _ended(returncode: int) -> str:
    if returncode < 0:
        name = signal.Signals(-returncode).name
        hint = " (killed: out of memory?)" if name == "SIGKILL" else ""
        return f"child died of signal {name}{hint}"
    return f"child exited with code {returncode} without a result"


def measure(
    model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings = Settings()
) -> Measurement:
    """Measure ``strategy`` on ``model`` and ``workload`` cold, in a fresh process.

    Bad input raises ``ConfigError``; everything that goes wrong in the child is a status.
    """
    strategy = strategy.canonical()
    base = (strategy.to_dict(), model.to_dict(), workload.to_dict())
    try:
        strategy.check_applicable(workload.device)
    except NotApplicable as exc:
        return Measurement(*base, "not-applicable", reason=str(exc))
    work = tempfile.mkdtemp(prefix="autotune-trial-")
    spec_path, result_path = os.path.join(work, "spec.json"), os.path.join(work, "result.json")
    log_path = os.path.join(work, "child.log")
    spec = dict(zip(("strategy", "model", "workload"), base, strict=True))
    spec.update(iters=settings.iters, warmup=settings.warmup, seed=settings.seed)
    spec["launched"] = time.time()
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    start = time.perf_counter()
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.child", spec_path, result_path],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=_child_env(work), start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        try:
            proc.wait(timeout=settings.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            return Measurement(
                *base, "timeout", reason=f"no result within {settings.timeout_s:g} s",
                wall_s=time.perf_counter() - start, log_tail=_tail(log_path),
            )  # fmt: skip
        finally:
            _kill_group(proc)  # Ctrl-C or not, nothing of the child outlives the trial
        wall_s = time.perf_counter() - start
        if not os.path.exists(result_path):
            return Measurement(
                *base, "crashed", reason=_ended(proc.returncode), wall_s=wall_s,
                log_tail=_tail(log_path),
            )  # fmt: skip
        with open(result_path) as f:
            result = Measurement.from_dict(json.load(f))
        result.wall_s = wall_s
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)
