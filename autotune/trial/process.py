"""A child process: spawned from a forkserver, given fresh cache directories and a timeout,
killed with everything it started, and always answered with a ``Measurement``.

Children are forked from a multiprocessing forkserver that was started by exec (so it shares
nothing with the parent) and has only imported torch and dynamo: each child skips seconds of
imports, and still starts with no compiled code, no dynamo state and caches of its own.
Whatever way a child ends (an exception, an abort, a segfault, an out-of-memory kill, a hang),
the parent gets a ``Measurement`` back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from autotune import device, variables
from autotune.trial import child
from autotune.trial.measurement import Measurement, reached
from autotune.trial.request import Request
from autotune.workload import Settings

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


PRELOAD = ["torch", "torch._dynamo", "autotune.trial.child"]
_context: Any = None


def fork_server() -> Any:
    """The forkserver context, preloaded once per parent process (its preload is read from
    :func:`autotune.variables.preload` on the first call)."""
    global _context
    if _context is None:
        import multiprocessing

        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(preloaded())
    return _context


def preloaded() -> list[str]:
    """What the fork server imports before it forks a child: torch, Dynamo and the child's
    module, then ``$AUTOTUNE_PRELOAD``'s, except where this machine has a CUDA GPU: there
    importing them initialised CUDA in the fork server (torch 2.11 on an H100), and every
    child forked from it failed ("Cannot re-initialize CUDA in forked subprocess")."""
    extra = variables.preload()  # a bad value is refused on any machine
    return list(PRELOAD) if device.count() else [*PRELOAD, *extra]


def _child_env(cache_root: str) -> dict[str, str]:
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_root, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(cache_root, "triton"),
        "PYTHONUNBUFFERED": "1",
    }


def _paths() -> list[str]:
    """Where the child imports from: autotune, the working folder, $PYTHONPATH, sys.path."""
    extra = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return [p for p in (_PACKAGE_ROOT, os.getcwd(), *extra, *sys.path) if p]


def _kill(proc: Any) -> None:
    """Kill the child and its process group (any compile workers it started), if still there."""
    if proc.pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, signal.SIGKILL)  # not yet its own group leader


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


def _limit(settings: Settings) -> tuple[float, bool]:
    """How long a start's process may run, and whether the search's time budget (its
    ``stop_at``), not the start's own timeout, sets that."""
    if settings.stop_at and settings.stop_at - time.time() < settings.timeout_s:
        return max(0.0, settings.stop_at - time.time()), True
    return settings.timeout_s, False


def run_child(
    request: Request, work: str, kind: str, caches: str, settings: Settings
) -> Measurement:
    """One child process of ``request`` with the cache directories under ``caches`` and the
    settings' timeout; whatever way it ends, a ``Measurement``."""
    spec_path = os.path.join(work, f"{kind}-spec.json")
    result_path, log_path = os.path.join(work, f"{kind}.json"), os.path.join(work, f"{kind}.log")
    base = request.base()
    used, alone = device.alone(request.workload.device)  # a GPU as cuda:0, seen alone
    sent = request.but(launched=time.time(),
                       workload=dataclasses.replace(request.workload, device=used))  # fmt: skip
    with open(spec_path, "w") as f:
        json.dump(sent.to_dict(), f)
    start = time.perf_counter()
    proc = fork_server().Process(
        target=child.entry, name="autotune-trial", daemon=False,
        args=(spec_path, result_path, log_path, os.getcwd(), _paths(),
              {**_child_env(caches), **alone}),
    )  # fmt: skip
    proc.start()
    timed_out = False
    limit, budget = _limit(settings)
    try:
        proc.join(timeout=limit)
        if proc.exitcode is None:
            _kill(proc)
            proc.join()
            timed_out = True
    finally:
        _kill(proc)  # Ctrl-C or not, nothing of the child outlives the trial
        if proc.pid is not None:
            proc.join()
    wall_s = time.perf_counter() - start
    cold = result_path + child.COLD
    if not os.path.exists(result_path) and os.path.exists(cold):  # it died building
        with open(cold) as f:  # the measurement and the builds that finished before
            result = Measurement.from_dict(json.load(f))
        unbuilt(result, request, "timeout" if timed_out else "crashed",
                f"within the trial's {settings.timeout_s:g} s" if timed_out
                else f"({_ended(proc.exitcode)})")  # fmt: skip
    elif timed_out and budget:  # the search's time budget, not the trial, ended it
        log = _tail(log_path, 64_000)
        return Measurement(
            *base, "stopped", wall_s=wall_s, log_tail=log[-4000:],
            reason=f"stopped at the time budget after {wall_s:.0f} s, while {reached(log)}",
        )  # fmt: skip
    elif timed_out:
        return Measurement(
            *base, "timeout", reason=f"no result within {settings.timeout_s:g} s",
            wall_s=wall_s, log_tail=_tail(log_path),
        )  # fmt: skip
    elif not os.path.exists(result_path):
        return Measurement(
            *base, "crashed", reason=_ended(proc.exitcode), wall_s=wall_s,
            log_tail=_tail(log_path),
        )  # fmt: skip
    else:
        with open(result_path) as f:
            result = Measurement.from_dict(json.load(f))
    result.wall_s, result.workload = wall_s, request.workload  # the study's device, as asked
    return result


def unbuilt(result: Measurement, request: Request, status: str, how: str) -> None:
    """Mark the builds a child did not finish (the one it was in, and those after it) with
    ``status`` and why: each costs only its own start; the cold measurement stands."""
    pending = [k for k in request.build_ahead if k not in result.precompiled]
    for kind in pending:
        why = (f"the {kind} build did not finish {how}" if kind == pending[0] else
               f"not built: the {pending[0]} build before it did not finish {how}")  # fmt: skip
        why = f"{why}; the cold measurement stands"
        result.precompiled[kind] = {"error": why, "status": status}
