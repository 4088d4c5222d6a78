"""Workers on this machine (``search --workers K``), and whether a machine may join a study."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from autotune.errors import ConfigError

COMPARABLE = ("torch", "cuda", "device", "device_name")


def comparable(environment: dict[str, Any]) -> dict[str, Any]:
    """The fields that must agree, with ``cuda:1`` read as ``cuda`` (the index is no hardware)."""
    values = {k: environment.get(k) for k in COMPARABLE}
    values["device"] = str(values["device"] or "").partition(":")[0] or None
    return values


def check_environment(stored: dict[str, Any], here: dict[str, Any], force: bool) -> None:
    """Refuse to mix measurements from another GPU, CPU or torch, unless forced."""
    a, b = comparable(stored), comparable(here)
    differ = [k for k in COMPARABLE if a[k] != b[k]]
    if differ and not force:
        detail = ", ".join(f"{k}: study {a[k]!r} vs here {b[k]!r}" for k in differ)
        raise ConfigError(
            f"this machine differs from the study's ({detail}); mixed measurements would be "
            "meaningless (use --force to join anyway)"
        )


class Following(Protocol):
    def measured(self, key: str, done: int) -> None: ...


class LocalWorkers:
    """``search --workers K``: K worker processes on this machine, one per GPU where there
    are GPUs, joined to the study through its storage URL (passed in the environment, which
    ``ps`` does not show)."""

    def __init__(self, study: str, url: str, devices: list[str], allow: list[str]) -> None:
        env = {**os.environ, "AUTOTUNE_STORAGE": url}
        argv = [sys.executable, "-m", "autotune.cli", "worker", "--study", study, "--no-progress"]
        if allow:  # the code the search's own command line named
            argv += ["--allow-code", ",".join(allow)]
        self.procs = [
            subprocess.Popen([*argv, "--device", d], stdin=subprocess.DEVNULL, env=env)
            for d in devices
        ]

    @staticmethod
    def devices(device: str, count: int) -> list[str]:
        """``cuda:0``, ``cuda:1``, … round the visible GPUs; the same CPU for every worker."""
        if count < 1:
            raise ConfigError("--workers must be at least 1")
        if not device.startswith("cuda"):
            return [device] * count
        import torch

        return [f"cuda:{i % torch.cuda.device_count()}" for i in range(count)]

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
