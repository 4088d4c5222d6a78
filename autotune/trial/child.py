"""The child side of a trial: build, compile, time and check one strategy; return a dict.

:mod:`autotune.trial.parent` starts :func:`entry` in a fresh process forked from a server that
has only imported torch (never compiled anything), with empty compile caches of its own. It can
also run as ``python -m autotune.trial.child SPEC.json RESULT.json``. It knows nothing of Optuna
or SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from autotune.errors import AutotuneError, NotApplicable, where
from autotune.trial import metrics
from autotune.trial.measurement import Measurement
from autotune.trial.request import Request
from autotune.trial.scenarios import (
    Continuous,
    Generate,
    Generations,
    Inference,
    Scenario,
    TrafficTrial,
    Train,
    begin,
)

DYNAMO_ADVICE = ("Set TORCHDYNAMO_VERBOSE=1", "For even more developer context")  # not a reason
SCENARIOS: dict[str, type[Scenario]] = {"inference": Inference, "train": Train,
                                        "generate": Generate, "traffic": TrafficTrial,
                                        "generations": Generations,
                                        "continuous": Continuous}  # fmt: skip


def fulfil(request: Request, keep: Callable[[Measurement], None] | None = None) -> Measurement:
    """Do what ``request`` asks, by its kind: measure one strategy with the scenario of its
    workload; compute the study's higher-precision reference; time a confirmation's
    strategies against eager in one process; or serve a traffic in a plain server loop. A
    trial that builds artefacts hands its measurement to ``keep`` before each build (with
    the builds before it), so that a build that fails, crashes or outlasts the timeout costs
    only its own start."""
    if request.kind == "reference":
        return make_reference(request)
    if request.kind == "serve":  # a confirmation's self-check: a plain server loop
        from autotune.trial import server_loop

        return server_loop.serve(request)
    ctx = begin(request)
    if request.kind == "confirm" and not ctx.workload.traffic:
        from autotune.trial import rounds

        return rounds.run(ctx)  # over a traffic, a rival's own trial times its rounds (served)
    w = ctx.workload
    by_traffic = {"generate": "generations", "continuous": "continuous"}
    kind = by_traffic.get(w.kind, "traffic") if w.traffic else w.kind
    scenario = SCENARIOS[kind](ctx)
    m = scenario.run()
    for kind, path in request.build_ahead.items() if m.ok else ():
        if keep is not None:  # what is measured and built so far is safe before each build
            keep(m)
        m.precompiled[kind] = _build(scenario, kind, path)
    return m


def _build(scenario: Scenario, kind: str, path: str) -> dict[str, Any]:
    """One artefact of a start that skips the compiler, or its ``error``: a build's own
    failure costs only its start."""
    try:
        return scenario.build(kind, path)
    except Exception as exc:
        return {"error": f"{kind} build failed: {describe(exc)}"}


def describe(exc: BaseException) -> str:
    """A failure in one line: ``Type: message (at file:line in function; ...)``, the frames
    where it arose outside autotune and the standard library; an ``AutotuneError`` is its
    message alone. Dynamo's advice on how to see more is dropped (``--debug`` shows it)."""
    message = " ".join(
        line for line in str(exc).splitlines() if not line.startswith(DYNAMO_ADVICE)
    ).strip() or repr(exc)
    if isinstance(exc, AutotuneError):
        return message
    at = where(exc)
    return f"{type(exc).__name__}: {message}" + (f" (at {at})" if at else "")


def make_reference(request: Request) -> Measurement:
    """The reference (:mod:`autotune.trial.precise`), saved to ``reference_out``, on
    its device made current first, as a trial's is (:func:`autotune.device.use`); the
    measurement says only whether it worked (``reason``: why there is none)."""
    from autotune import device
    from autotune.trial import precise
    from autotune.trial.accuracy import save_reference

    assert request.reference_out is not None
    device.use(request.workload.device)
    data = precise.compute(request.model, request.workload, request.seed)
    save_reference(request.reference_out, data)
    return Measurement(*request.base(), "ok", reason=data["reason"])


def run(data: dict[str, Any], keep: Callable[[Measurement], None] | None = None) -> dict[str, Any]:
    """Measure the request ``data`` (``Request.to_dict``), turning every Python-level failure
    into a status with its reason."""
    try:
        return fulfil(Request.from_dict(data), keep).to_dict()
    except BaseException as exc:  # the parent gets a reason for anything short of a crash
        status = "not-applicable" if isinstance(exc, NotApplicable) else "failed"
        return Measurement(
            data.get("strategy", {}), data.get("model", {}), data.get("workload", {}), status,
            reason=describe(exc),
            stage=metrics.failure_stage(exc),
            log_tail="" if isinstance(exc, AutotuneError) else traceback.format_exc()[-4000:],
            traceback="" if isinstance(exc, AutotuneError) else traceback.format_exc()[-50_000:],
        ).to_dict()  # fmt: skip


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path) as f:
        asked = json.load(f)
    result = run(asked, lambda m: _write(m.to_dict(), result_path + COLD))
    _write(result, result_path)
    return 0


COLD = ".cold"  # beside the result: the measurement before the builds, kept first


def _write(result: dict[str, Any], path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)


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
    try:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:  # its trial was given up (an interrupt) before it started: nobody waits
        os._exit(1)
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
