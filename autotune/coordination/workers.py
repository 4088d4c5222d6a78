"""Workers on this machine (``search --workers K``), and whether a machine may join a study."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import autotune.device
from autotune import variables
from autotune.errors import ConfigError

COMPARABLE = ("torch", "cuda", "device", "device_name")
ON_CPU = ("cpu_capability", "cpu_bf16")  # where the study recorded them (older studies did not)
# what else must agree between GPU machines (float32 matmuls in TF32 or not)
ON_GPU = ("triton", "capability", "driver", "float32_matmul_precision")


def comparable(environment: dict[str, Any]) -> dict[str, Any]:
    """The fields that must agree, with ``cuda:1`` read as ``cuda`` (the index is no hardware);
    on a GPU also Triton, the compute capability and the driver; torch's CPU capability and the
    CPU's native bfloat16 instructions where recorded (a CPU model name can hide either)."""
    values = {k: environment.get(k) for k in COMPARABLE}
    values["device"] = str(values["device"] or "").partition(":")[0] or None
    if values["device"] == "cuda":
        values.update({k: environment.get(k) for k in ON_GPU})
    values.update({k: environment[k] for k in ON_CPU if k in environment})
    return values


def check_environment(stored: dict[str, Any], here: dict[str, Any], force: bool) -> None:
    """Refuse to mix measurements from another GPU, CPU or torch, unless forced."""
    a, b = comparable(stored), comparable(here)  # what the study recorded must agree
    differ = [k for k in a if a[k] != b.get(k)]
    if differ and not force:
        detail = ", ".join(f"{k}: study {a[k]!r} vs here {b[k]!r}" for k in differ)
        raise ConfigError(
            f"this machine differs from the study's ({detail}); mixed measurements would be "
            "meaningless (use --force to join anyway)"
        )


def worker_env(url: str, device: str, workers: int) -> dict[str, str]:
    """A local worker's environment: the study's storage (which ``ps`` does not show), its one
    GPU as ``CUDA_VISIBLE_DEVICES`` (it measures on ``cuda:0``, so caches it makes load on a
    user's ``cuda:0``), and its share of the CPU for Inductor's compile workers."""
    env = {**os.environ, variables.STORAGE: url, **autotune.device.alone(device)[1]}
    env["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    return env


class Following(Protocol):
    def measured(self, key: str, done: int) -> None: ...


STDERR = 2  # the search's own standard error, as a file descriptor


class LocalWorkers:
    """``search --workers K``: K worker processes on this machine, one per GPU where there
    are GPUs, joined to the study through its storage URL (passed in the environment, which
    ``ps`` does not show). What the workers print goes to the search's standard error: its
    standard output is the search's answer alone (``--json`` is read by programs)."""

    def __init__(self, study: str, url: str, devices: list[str], allow: list[str]) -> None:
        argv = [sys.executable, "-m", "autotune.cli", "worker", "--study", study]
        argv += ["--no-progress", "--spawned"]  # spawned: this search has cleaned the study
        if allow:  # the code the search's own command line named
            argv += ["--allow-code", ",".join(allow)]
        self.procs = [
            subprocess.Popen([*argv, "--device", "cuda:0" if d.startswith("cuda") else d],
                             stdin=subprocess.DEVNULL, stdout=STDERR,
                             env=worker_env(url, d, len(devices)))
            for d in devices
        ]  # fmt: skip

    @staticmethod
    def devices(device: str, count: int, force: bool = False) -> list[str]:
        """One GPU per worker, from the study's (``cuda:3`` and 2 workers: ``cuda:3``,
        ``cuda:4``), never two on one unless forced; the same CPU for every worker."""
        if count < 1:
            raise ConfigError("--workers must be at least 1")
        if not device.startswith("cuda"):
            return [device] * count
        first, seen = int(device.partition(":")[2] or 0), autotune.device.count()
        if first + count > seen and not force:
            raise ConfigError(f"--workers {count} from {device} needs GPUs {first} to "
                              f"{first + count - 1}, and {seen} are visible: one worker per "
                              "GPU (--force shares them, which skews every timing)")  # fmt: skip
        return [f"cuda:{(first + i) % seen}" for i in range(count)]

    def follow(self, done: Callable[[], int], listener: Following) -> str:
        """Wait for the workers to end, telling ``listener`` each time ``done()`` (the study's
        measured strategies) grows; ``finished``, or ``interrupted`` (Ctrl-C stops them all)."""
        seen = -1
        try:
            while self.running():
                if (now := done()) != seen:
                    seen = now
                    listener.measured(f"{len(self.procs)} workers", now)
                time.sleep(2)
        except KeyboardInterrupt:
            self.stop()
            return "interrupted"
        return "finished"

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        """Each worker stops as cleanly as on Ctrl-C."""
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()

    def failures(self) -> list[int]:
        return [p.returncode for p in self.procs if p.returncode != 0]
