"""The device: the one module that touches ``torch.cuda``. Everything else asks it.

- :func:`resolve`: ``auto``, ``cpu``, ``cuda`` and ``cuda:N`` to a concrete device, once, at the
  top: ``cuda`` becomes ``cuda:N`` (``torch.cuda.set_device`` refuses an index-less device);
- :func:`use`: make a CUDA device current, where CUDA events and graphs are recorded;
- :func:`synchronize`, :func:`wall`, :func:`timed` and :class:`StepTimer`: when to wait for the
  device before a timer read (a generation records one event pair per step and synchronises
  once, as gpt-fast does, so the CPU's launches overlap the GPU's work);
- :class:`PeakMemory`: the peak, one kind for every strategy (on a GPU the reserved peak after
  emptying the cache: CUDA graphs' private pools are reserved, not allocated, while a graph
  replays; eager's without those pools);
- :func:`marks_steps` and :func:`mark_step`: CUDA-graph step marks;
- :func:`traits`: the device's part of the environment;
- :func:`count`, :func:`available`: GPUs visible, and memory free for a copy of a model.

What Inductor logs of its CUDA graphs (fallbacks, recordings) is read by the trial, in
:mod:`autotune.trial.cudagraph_logs`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from autotune.errors import ConfigError

USAGE = "use auto, cpu, cuda or cuda:N"


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def count() -> int:
    """CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve(device: str) -> str:
    """A concrete device: ``auto`` -> ``cuda:0`` or ``cpu``; ``cuda`` -> ``cuda:N`` (the current
    device); ``cuda:N`` checked against the devices this process sees."""
    if device == "cpu":
        return device
    if device != "auto" and device != "cuda" and not device.startswith("cuda:"):
        raise ConfigError(f"bad device {device!r}: {USAGE}")
    index = device.partition(":")[2]
    if index and not index.isdigit():
        raise ConfigError(f"bad device {device!r}: {USAGE}")
    seen = count()
    if device == "auto":
        return f"cuda:{_current()}" if seen else "cpu"
    if not seen:
        raise ConfigError(f"--device {device} asked for, but this torch sees no CUDA device")
    if index and int(index) >= seen:
        raise ConfigError(f"--device {device}: only {seen} CUDA device(s) visible")
    return device if index else f"cuda:{_current()}"


def alone(device: str) -> tuple[str, dict[str, str]]:
    """How a child process measures ``device``: a CUDA device as ``cuda:0`` of a process that
    sees that GPU alone (``CUDA_VISIBLE_DEVICES``), so that Inductor's cache keys, which hold the
    device index, match a user's ``cuda:0``. The device the child uses, and the variables it
    needs."""
    if not is_cuda(device):
        return device, {}
    index = int(device.partition(":")[2] or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    mapped = visible.split(",")[index].strip() if visible else str(index)
    return "cuda:0", {"CUDA_VISIBLE_DEVICES": mapped}


def _current() -> int:
    import torch

    return int(torch.cuda.current_device())


def use(device: str) -> None:
    """Make ``device`` the current CUDA device (an index-less ``cuda`` is resolved first), in a
    process that sees the one GPU ``CUDA_VISIBLE_DEVICES`` names, where it names one (a trial's
    child, :func:`alone`): CUDA initialised before the variable was set (in the fork server)
    ignores it, and ``cuda:0`` would silently be GPU 0 whichever GPU was asked for."""
    if is_cuda(device):
        import torch

        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if visible.strip() and "," not in visible and (seen := count()) != 1:
            raise ConfigError(f"CUDA_VISIBLE_DEVICES={visible} names one GPU, but this process "
                              f"sees {seen}: CUDA began before it was set, so {device} would "
                              "not be that GPU")  # fmt: skip
        torch.cuda.set_device(torch.device(resolve(device)))


def synchronize(device: str) -> None:
    """Wait for the device's queued work, so a timer read covers it (gpt-fast's device_sync)."""
    if is_cuda(device):
        import torch

        torch.cuda.synchronize(torch.device(resolve(device)))


def wall(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    """Wall seconds of one synchronized call, and its result (first calls, compiles)."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def timed(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one steady-state call: CUDA events on a GPU, perf_counter on a CPU."""
    timer = StepTimer(device)
    timer.time(fn)
    return timer.elapsed()[0]


class StepTimer:
    """Times many calls with one wait at the end: on a GPU, an event pair per call on the
    device's stream and one synchronize in :meth:`finish`; on a CPU, perf_counter."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.pairs: list[tuple[Any, Any]] = []
        self.seconds: list[float] = []

    def time(self, fn: Callable[[], Any]) -> Any:
        if not is_cuda(self.device):
            start = time.perf_counter()
            out = fn()
            self.seconds.append(time.perf_counter() - start)
            return out
        import torch

        stream = torch.cuda.current_stream(torch.device(resolve(self.device)))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        out = fn()
        end.record(stream)
        self.pairs.append((start, end))
        return out

    def elapsed(self) -> list[float]:
        """Every call's seconds, in order (one wait for the device, at the end)."""
        if self.pairs:
            self.pairs[-1][1].synchronize()
            self.seconds = [s.elapsed_time(e) / 1e3 for s, e in self.pairs]
            self.pairs = []
        return self.seconds


class PeakMemory:
    """Peak memory since the last reset, one kind for every strategy. On a GPU the caching
    allocator's reserved peak, with the cache emptied before each reset: a CUDA graph's memory
    sits in its private pool, which counts as reserved, not allocated, while the graph replays
    (the allocator does not see a replay), and emptying the cache first releases what earlier
    calls (eager's, another side's) left cached, so that only live tensors and live graphs'
    pools carry over. A live pool cannot be emptied: eager, timed in the process where the
    compiled side's graphs live, reads its peak without them (``pools=False``). On a CPU the
    resident set's high-water mark."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.kind = "cuda-max-reserved" if is_cuda(device) else "cpu-rss-hwm"

    def reset(self) -> None:
        if is_cuda(self.device):
            import torch

            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(torch.device(resolve(self.device)))
            return
        # Linux: writing 5 resets the process's peak RSS (VmHWM) to its current RSS
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def peak_mb(self, pools: bool = True) -> float:
        """The peak since the last reset, in MiB; without ``pools``, less what CUDA graphs'
        private pools hold (they do not change while eager runs: nothing outside a capture
        allocates in them)."""
        if is_cuda(self.device):
            import torch

            where = torch.device(resolve(self.device))
            peak = torch.cuda.max_memory_reserved(where)
            return (peak - (0 if pools else self.pools(where))) / 2**20
        with contextlib.suppress(OSError), open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def pools_mb(self) -> float:
        """MiB that CUDA graphs' private pools hold now (0 on a CPU): Inductor's CUDA-graph
        trees record every graph into one pool a device, so this is that pool's size, shared by
        every graph recorded, not a figure per graph (or per bucket)."""
        if not is_cuda(self.device):
            return 0.0
        import torch

        return self.pools(torch.device(resolve(self.device))) / 2**20

    @staticmethod
    def pools(where: Any) -> int:
        """Bytes reserved on ``where`` in private pools (CUDA graphs'): the allocator's segments
        whose owning pool is not the default one, ``(0, 0)``."""
        import torch

        return sum(int(s["total_size"]) for s in torch.cuda.memory_snapshot()
                   if s.get("device", where.index) == where.index
                   and tuple(s.get("segment_pool_id") or (0, 0)) != (0, 0))  # fmt: skip


def marks_steps(device: str, cuda_graphs: bool) -> bool:
    """Whether each call must begin with ``torch.compiler.cudagraph_mark_step_begin()``: a
    strategy that replays CUDA graphs, on a CUDA device."""
    return is_cuda(device) and cuda_graphs


def mark_step() -> None:
    """Tell torch a new step begins: the graphs of one call never read outputs that the next
    call overwrites (regional compiles chain one graph per block)."""
    import torch

    torch.compiler.cudagraph_mark_step_begin()


def mark_each_call(module: Any) -> Any:
    """Mark a CUDA-graph step before every call of ``module`` (a forward pre-hook)."""
    module.register_forward_pre_hook(lambda *_: mark_step())
    return module


def driver_version() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    return None


def matmul_precision(dtype: str | None, device: str) -> str:
    """The float32 matmul precision a trial of ``dtype`` on ``device`` runs with (``high``, TF32,
    for float32 on a GPU: :func:`tf32_for`), without setting it in this process."""
    import torch

    if dtype == "float32" and is_cuda(device):
        return "high"
    return torch.get_float32_matmul_precision()


def traits(device: str, dtype: str | None = None) -> dict[str, Any]:
    """The device's part of the environment: its name, and on a GPU the compute capability, the
    driver, Triton, and the float32 matmul precision (TF32 or not) that a trial of ``dtype``
    runs with (this process's own where no dtype is given)."""
    import torch

    found: dict[str, Any] = {"float32_matmul_precision": matmul_precision(dtype, device)}
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    if is_cuda(device) and count():
        where = torch.device(resolve(device))
        props = torch.cuda.get_device_properties(where)
        found.update(
            device_name=torch.cuda.get_device_name(where),
            capability=f"{props.major}.{props.minor}",
            driver=driver_version(),
        )
    return found


def native_bfloat16(device: str) -> bool:
    """Whether the GPU ``device`` computes in bfloat16 natively: compute capability 8.0 on
    (Ampere), or ROCm; never by a bfloat16 tensor's emulation."""
    import torch

    return bool(torch.version.hip) or torch.cuda.get_device_properties(device).major >= 8


def available(device: str) -> int:
    """Bytes of memory free for a new copy of a model on ``device`` (the CPU's MemAvailable)."""
    if is_cuda(device):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(resolve(device)))
        return int(free)
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def tf32_matmuls(dtype: str | None, device: str) -> bool:
    """Whether a trial of ``dtype`` on ``device`` runs its float32 matmuls in TF32 in this
    process: float32, on a GPU, at a float32 matmul precision below ``highest`` (``high``, as
    :func:`tf32_for` sets it; ``medium`` is TF32 too on CUDA)."""
    import torch

    return (dtype == "float32" and is_cuda(device)
            and torch.get_float32_matmul_precision() != "highest")  # fmt: skip


def tf32_for(dtype: str, device: str) -> None:
    """Float32 studies on a GPU run with TF32 matmuls, as PyTorch's own benchmark harness and
    most users' code do (``set_float32_matmul_precision("high")``); the fingerprint says so."""
    if dtype == "float32" and is_cuda(device):
        import torch

        torch.set_float32_matmul_precision(matmul_precision(dtype, device))
