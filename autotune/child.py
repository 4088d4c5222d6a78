"""The child side of a trial: build, compile, time and check one strategy; return a dict.

:mod:`autotune.runner` starts :func:`entry` in a fresh process forked from a server that has only
imported torch (never compiled anything), with empty compile caches of its own. It can also run
as ``python -m autotune.child SPEC.json RESULT.json``. It knows nothing of Optuna or SQL.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from autotune import metrics, recompiles
from autotune.errors import AutotuneError, NotApplicable
from autotune.measurement import Latency, Measurement, Memory
from autotune.strategy import Strategy
from autotune.timing import interleave, wall
from autotune.workload import Workload


def _loss(output: Any) -> Any:
    first = metrics.tensors(output)[0]
    return first.float().pow(2).mean()


def make_step(model: Any, inputs: tuple, kind: str, mark_steps: bool = False) -> Callable[[], Any]:
    """One call of the workload: a no-grad forward, or forward + backward + optimizer step.

    With ``mark_steps`` (CUDA graphs), each call first tells torch that a new step begins, so
    that the graphs of one call never read outputs that the next call overwrites (regional
    compilation chains one graph per block)."""
    import torch

    mark = torch.compiler.cudagraph_mark_step_begin if mark_steps else (lambda: None)
    if kind == "inference":

        def forward() -> Any:
            mark()
            with torch.no_grad():
                return model(*inputs)

        return forward
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def train_step() -> Any:
        mark()
        optimizer.zero_grad(set_to_none=True)
        loss = _loss(model(*inputs))
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def use_device(device: str) -> None:
    """Make ``device`` the current CUDA device, where CUDA events and graphs are recorded."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))


def _grads(model: Any) -> list[Any]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def begin(spec: dict[str, Any]) -> tuple[float, dict[str, float], Strategy, Workload, Any,
                                         Measurement]:  # fmt: skip
    """What every trial starts with: its clock and start-up time, the strategy, workload and
    model parsed, the RNG seeded, the device made current, and an empty measurement."""
    import torch
    import torch._dynamo.utils

    from autotune import catalog
    from autotune.environment import fingerprint

    start = time.perf_counter()
    timings = {"startup_s": time.time() - spec.get("launched", time.time())}
    strategy = Strategy.from_dict(spec["strategy"])
    workload = Workload.from_dict(spec["workload"])
    ref = catalog.ModelRef.from_dict(spec["model"])
    torch.manual_seed(spec.get("seed", 0))
    use_device(workload.device)
    torch._dynamo.utils.set_compilation_metrics_limit(1_000_000)
    result = Measurement(
        strategy.to_dict(), ref.to_dict(), workload.to_dict(), "ok",
        environment=fingerprint(workload.device),
    )  # fmt: skip
    return start, timings, strategy, workload, ref, result


def measure(spec: dict[str, Any]) -> Measurement:
    """Measure one strategy as ``spec`` says (model, workload, strategy, iters, warmup)."""

    from autotune import artifact, catalog, compile, starts

    if spec["workload"].get("kind") == "generate":
        from autotune import generate

        return generate.measure(spec)
    start, timings, strategy, workload, ref, result = begin(spec)

    model, inputs = catalog.build(ref, workload)
    timings["build_s"] = time.perf_counter() - start
    eager_model = copy.deepcopy(model) if workload.kind == "train" else model
    if spec.get("load_artifact"):  # a portable start: the saved caches, then the compile
        result.load_s = artifact.load(spec["load_artifact"])
    compiled = compile.apply(model, strategy)
    result.regions = compile.count_regions(compiled)
    graphs = strategy.uses_cuda_graphs()
    eager_step = make_step(eager_model, inputs, workload.kind)
    compiled_step = make_step(compiled, inputs, workload.kind, mark_steps=graphs)

    memory = metrics.PeakMemory(workload.device)
    result.eager_first_s, expected = wall(eager_step, workload.device)
    memory.reset()
    first_s, actual = wall(compiled_step, workload.device)
    if graphs:  # CUDA graphs are recorded on the second call: that is compiling too
        recording_s, actual = wall(compiled_step, workload.device)
        first_s += recording_s
        timings["cuda_graph_recording_s"] = recording_s
    result.compile_s = 0.0 if strategy.granularity == "none" else first_s
    compile_peak = memory.peak_mb()
    expected, actual = metrics.tensors(expected), metrics.tensors(actual)
    if workload.kind == "train":  # the step's loss, then every gradient it produced
        expected, actual = expected + _grads(eager_model), actual + _grads(model)
    result.accuracy = metrics.compare(expected, actual, workload.dtype)
    del expected, actual

    peaks = [0.0, 0.0]  # peak memory of each step, read around the warm-up calls
    t = time.perf_counter()
    for _ in range(max(1, spec["warmup"])):
        for i, step in enumerate((eager_step, compiled_step)):
            memory.reset()
            step()
            peaks[i] = max(peaks[i], memory.peak_mb())
    result.memory = Memory(memory.kind, peaks[0], peaks[1], compile_peak)
    timings["warmup_s"] = time.perf_counter() - t
    t = time.perf_counter()
    samples = interleave(
        {"eager": eager_step, "compiled": compiled_step},
        spec["iters"], 0, workload.device, spec.get("seed", 0),
    )  # fmt: skip
    timings["timing_s"] = time.perf_counter() - t
    result.eager_latency = Latency.from_samples(samples["eager"])
    result.latency = Latency.from_samples(samples["compiled"])
    result.speedup = result.eager_latency.median_ms / result.latency.median_ms

    result.graphs = metrics.graphs()
    if strategy.granularity != "none":
        result.graphs = recompiles.describe(result.graphs, model, {"call": compiled_step})
    result.phases = metrics.phases()
    result.cache = starts.cache_counters()
    if spec.get("save_artifact"):  # for a portable start, and for export to ship
        result.artifact = artifact.save(spec["save_artifact"], workload.device)
    timings["child_s"] = time.perf_counter() - start
    result.timings = timings
    return result


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure, turning every Python-level failure into a status with its reason."""
    try:
        return measure(spec).to_dict()
    except BaseException as exc:  # the parent gets a reason for anything short of a crash
        status = "not-applicable" if isinstance(exc, NotApplicable) else "failed"
        message = str(exc).strip() or repr(exc)
        reason = message if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: {message}"
        return Measurement(
            spec["strategy"], spec["model"], spec["workload"], status, reason=reason,
            stage=metrics.failure_stage(exc),
            log_tail="" if isinstance(exc, AutotuneError) else traceback.format_exc()[-4000:],
        ).to_dict()  # fmt: skip


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    result = run(spec)
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return 0


def entry(spec_path: str, result_path: str, log_path: str, cwd: str, paths: list[str],
          env: dict[str, str]) -> None:  # fmt: skip
    """A trial process: its own session, named ``autotune-trial``, dying with its parent."""
    import ctypes
    import signal
    from multiprocessing import forkserver, resource_tracker

    os.setsid()  # its own process group: a timeout kills it with any compile workers
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:  # the server outlives its children's copies of this pipe: drop ours,
        with contextlib.suppress(OSError):  # so the server ends with the search, and we with it
            os.close(alive)
    if sys.platform.startswith("linux"):  # elsewhere the process group and timeout suffice
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the server that forked it
        libc.prctl(15, b"autotune-trial")  # PR_SET_NAME: what ps, top and pgrep show
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    # a tracker of its own, started on first use with this log as its stderr: what the trial
    # leaves (inductor's worker semaphores) is cleaned up and reported there, not in the search
    tracker = resource_tracker._resource_tracker = resource_tracker.ResourceTracker()
    for name in ("ensure_running", "register", "unregister", "getfd"):  # bound at its import
        setattr(resource_tracker, name, getattr(tracker, name))
    os.chdir(cwd)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    os.environ.update(env)
    code = main([spec_path, result_path])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the result is on disk: skip the interpreter's slow teardown


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
