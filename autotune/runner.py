"""The parent side of a trial: one strategy measured in a fresh child process.

The child gets empty Inductor and Triton cache directories (so every compile is cold and
nothing is inherited) and a wall-clock timeout. Where the backend caches, up to two more
children follow (:mod:`autotune.starts`): a warm start in the cold child's cache directories,
and a portable start in empty ones that loads the artefact the cold child saved. Whatever way
a child ends (an exception, an abort, a segfault, an out-of-memory kill, a hang), the parent
gets a ``Measurement`` back.

Children are forked from a multiprocessing forkserver that was started by exec (so it shares
nothing with this process) and has only imported torch and dynamo: each trial skips seconds of
imports, and still starts with no compiled code, no dynamo state and caches of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import artifact, child, starts
from autotune.errors import NotApplicable
from autotune.measurement import Measurement
from autotune.strategy import Strategy
from autotune.workload import Settings, Workload

if TYPE_CHECKING:
    from autotune.catalog import ModelRef

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


PRELOAD = ["torch", "torch._dynamo", "autotune.child"]
_context: Any = None


def _server() -> Any:
    """The forkserver context, preloaded once per parent process."""
    global _context
    if _context is None:
        import multiprocessing

        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


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


def _child(
    spec: dict[str, Any], work: str, kind: str, caches: str, settings: Settings,
    base: tuple[dict[str, Any], ...],
) -> Measurement:  # fmt: skip
    """One start in a fresh child with the cache directories under ``caches``."""
    spec_path = os.path.join(work, f"{kind}-spec.json")
    result_path, log_path = os.path.join(work, f"{kind}.json"), os.path.join(work, f"{kind}.log")
    spec = {**spec, "launched": time.time()}
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    start = time.perf_counter()
    proc = _server().Process(
        target=child.entry, name="autotune-trial", daemon=False,
        args=(spec_path, result_path, log_path, os.getcwd(), _paths(), _child_env(caches)),
    )  # fmt: skip
    proc.start()
    try:
        proc.join(timeout=settings.timeout_s)
        if proc.exitcode is None:
            _kill(proc)
            proc.join()
            return Measurement(
                *base, "timeout", reason=f"no result within {settings.timeout_s:g} s",
                wall_s=time.perf_counter() - start, log_tail=_tail(log_path),
            )  # fmt: skip
    finally:
        _kill(proc)  # Ctrl-C or not, nothing of the child outlives the trial
        if proc.pid is not None:
            proc.join()
    wall_s = time.perf_counter() - start
    if not os.path.exists(result_path):
        return Measurement(
            *base, "crashed", reason=_ended(proc.exitcode), wall_s=wall_s,
            log_tail=_tail(log_path),
        )  # fmt: skip
    with open(result_path) as f:
        result = Measurement.from_dict(json.load(f))
    result.wall_s = wall_s
    return result


def cache_folder(keep: str, key: str) -> str:
    """Where the kept compile caches of the strategy ``key`` live under ``keep``."""
    return os.path.join(keep, artifact.sha256(key.encode())[:16])


@dataclass(frozen=True)
class Reference:
    """A study's higher-precision reference (:mod:`autotune.scenarios.reference`): its file,
    kept by checksum, and its dtype; ``dtype`` "" and ``reason`` when there is none."""

    path: str | None
    dtype: str
    reason: str = ""
    sha256: str = ""

    @classmethod
    def none(cls, reason: str) -> Reference:
        return cls(None, "", reason)


def keep_reference(data: bytes) -> Reference:
    """Keep a reference file's bytes under their checksum (a worker's copy of the study's);
    read its dtype and reason (``weights_only``: no code runs)."""
    from autotune.accuracy import load_reference

    digest = artifact.sha256(data)
    path = artifact.folder() / "references" / f"{digest}.pt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    found = load_reference(str(path))
    return Reference(
        str(path) if found["dtype"] else None, found["dtype"], found["reason"], digest
    )


_REFERENCES: dict[str, Reference] = {}  # this process's, by model, workload and seed


def make_reference(
    model: ModelRef, workload: Workload, settings: Settings | None = None
) -> Reference:
    """Compute the reference in a fresh process of its own (its memory is its own), once per
    model, workload and seed in this process."""
    settings = settings or Settings()
    memo = json.dumps([model.to_dict(), workload.to_dict(), settings.seed], sort_keys=True)
    if memo not in _REFERENCES or not _exists(_REFERENCES[memo]):
        _REFERENCES[memo] = _compute_reference(model, workload, settings)
    return _REFERENCES[memo]


def _exists(found: Reference) -> bool:
    return found.path is None or os.path.exists(found.path)


def _compute_reference(model: ModelRef, workload: Workload, settings: Settings) -> Reference:
    base = (Strategy("none").to_dict(), model.to_dict(), workload.to_dict())
    work = tempfile.mkdtemp(prefix="autotune-reference-")
    try:
        out = os.path.join(work, "reference.pt")
        spec = dict(zip(("strategy", "model", "workload"), base, strict=True))
        spec.update(reference_out=out, seed=settings.seed)
        m = _child(spec, work, "reference", os.path.join(work, "caches"), settings, base)
        if not m.ok or not os.path.exists(out):
            return Reference.none(f"no reference: computing it {m.status} ({m.reason[:300]})")
        return keep_reference(Path(out).read_bytes())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(
    model: ModelRef, workload: Workload, strategy: Strategy, settings: Settings | None = None,
    reference: Reference | None = None, later: Callable[[Measurement], bool] | None = None,
    keep: str | None = None,
) -> Measurement:  # fmt: skip
    """Measure ``strategy`` on ``model`` and ``workload`` cold in a fresh process, then its
    warm and portable starts (``settings.starts``) in fresh processes of their own, unless
    ``later`` says, from the cold measurement, that they are not needed. Outputs are judged
    against ``reference`` (computed first, in a process of its own, when not given; eager
    needs none). With ``keep``, the cold start's compile caches of a strategy that ``later``
    wants are kept there, in a folder of its own (a confirmation starts warm from them).

    Bad input raises ``ConfigError``; everything that goes wrong in a child is a status.
    """
    settings = settings or Settings()
    base = (strategy.to_dict(), model.to_dict(), workload.to_dict())
    try:
        strategy.check_applicable(workload.device)
    except NotApplicable as exc:
        return Measurement(*base, "not-applicable", reason=str(exc))
    if reference is None and strategy.granularity != "none":
        reference = make_reference(model, workload, settings)
    work = tempfile.mkdtemp(prefix="autotune-trial-")
    spec = dict(zip(("strategy", "model", "workload"), base, strict=True))
    spec.update(iters=settings.iters, warmup=settings.warmup, seed=settings.seed,
                tolerance=settings.tolerance)  # fmt: skip
    if reference is not None:
        spec.update(reference=reference.path, reference_dtype=reference.dtype,
                    reference_reason=reference.reason)  # fmt: skip
    saved = os.path.join(work, "cache.bin")
    cold_caches, empty_caches = os.path.join(work, "cold"), os.path.join(work, "portable")
    try:
        caching = not starts.no_cache(strategy)
        cold_spec = {**spec, "save_artifact": saved} if caching else spec
        result = _child(cold_spec, work, "cold", cold_caches, settings, base)
        if result.ok and result.artifact and os.path.exists(saved):
            result.artifact = artifact.keep(saved, result.artifact)
        brief = {**spec, "iters": min(settings.iters, starts.BRIEF_ITERS), "warmup": 1}

        def run(kind: str) -> Measurement:
            if kind == "warm":
                return _child(brief, work, kind, cold_caches, settings, base)
            portable = {**brief, "load_artifact": saved}
            return _child(portable, work, kind, empty_caches, settings, base)

        needed = later is None or not result.ok or later(result)
        result.starts = starts.later(result, strategy, settings.starts, run, needed)
        if keep and needed and result.ok and not starts.no_cache(strategy):
            shutil.copytree(cold_caches, cache_folder(keep, strategy.key), dirs_exist_ok=True)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def confirm(
    model: ModelRef, workload: Workload, strategies: list[Strategy], settings: Settings,
    kept: list[str],
) -> Measurement:  # fmt: skip
    """Time ``strategies`` and eager in ``settings.iters`` interleaved rounds in one fresh
    process, its caches the merge of the ``kept`` cache folders (a warm compile where they
    hold the strategy's); the measurement's ``rounds`` holds the milliseconds per round."""
    base = (strategies[0].to_dict(), model.to_dict(), workload.to_dict())
    work = tempfile.mkdtemp(prefix="autotune-confirm-")
    try:
        merged = os.path.join(work, "caches")
        os.makedirs(merged)
        for folder in kept:
            if os.path.isdir(folder):
                shutil.copytree(folder, merged, dirs_exist_ok=True)
        spec = dict(zip(("strategy", "model", "workload"), base, strict=True))
        spec.update(confirm=[s.to_dict() for s in strategies], iters=settings.iters,
                    warmup=settings.warmup, seed=settings.seed)  # fmt: skip
        return _child(spec, work, "confirm", merged, settings, base)
    finally:
        shutil.rmtree(work, ignore_errors=True)
