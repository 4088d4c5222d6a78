"""The environment: what a measurement's numbers depend on besides the strategy (the
fingerprint), and the dtype a model is served in here (``--dtype auto``'s decision, and the
note on a slow one).

On a CPU, bfloat16 is served where torch computes its matmuls natively (:func:`native_bf16`):
the CPU's own flags (``amx_bf16``, ``avx512_bf16``), with torch's CPU capability at AVX-512 and
oneDNN switched on and not capped below them (``ONEDNN_MAX_CPU_ISA``); else float32. The flags
decide; a timing confirms them (:func:`matmul_ratio`: a matmul in bfloat16 against float32 in
interleaved pairs, the quickest of each side, since a burst of load only ever adds time).
Where the timing disagrees (bfloat16 :data:`SLOW` times slower or more though the flags say
native, or quicker though they say not), it is measured again; where it still disagrees, the
timing is followed, and the line says both. A GPU: bfloat16 where it has it, else float16.

The decision is recorded per machine (:func:`resolve_dtype`: ``decisions.json`` in the studies
folder, under a key of everything it depends on), and ``--dtype auto`` on the same machine
takes it again "as before", so that the same command continues the same study.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import autotune.device
from autotune import variables
from autotune.errors import ConfigError


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


ISAS = (("avx512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}), ("avx2", {"avx2", "fma"}),
        ("sve", {"sve"}), ("neon", {"asimd"}))  # fmt: skip  # the vector ISAs Inductor targets


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags, from /proc/cpuinfo (or a file like it; empty where there is
    none)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_isa() -> str:
    """The best vector instruction set this CPU has of those Inductor compiles for (from the
    CPU's own flags: no compiler is run), else the machine's architecture."""
    flags = cpu_flags()
    return next((name for name, need in ISAS if need <= flags), platform.machine())


BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # native bfloat16 matmul instructions, best first


def cpu_bf16() -> str:
    """The CPU's native bfloat16 matmul instructions (``amx_bf16,avx512_bf16``), or "none":
    without them torch's bfloat16 GEMMs take a fallback that can be 100x slower."""
    flags = cpu_flags()
    return ",".join(f for f in BF16_FLAGS if f in flags) or "none"


SLOW = 4.0  # a dtype whose matmuls run this many times slower than float32's is named
PAIRS = 15  # interleaved pairs a timing takes; the quickest call of each side is compared
# oneDNN's CPU ISA caps below native bfloat16 (ONEDNN_MAX_CPU_ISA): its fallback runs then
BELOW_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
              "AVX512_CORE_VNNI")  # fmt: skip
_RATIOS: dict[tuple[Any, ...], float] = {}  # one timing a process, per GEMM kind
_DECIDED: dict[str, DtypeChoice] = {}  # this process's decisions, by machine key


@dataclass(frozen=True)
class DtypeChoice:
    """What ``--dtype auto`` serves in, and the line that says why."""

    dtype: str
    line: str
    timed: tuple[float, ...] = ()  # the ratios measured, bfloat16's time over float32's


def _where() -> str:
    import torch

    return (f"{cpu_model()}, torch's CPU capability "
            f"{torch.backends.cpu.get_cpu_capability()}")  # fmt: skip


def native_bf16(flags: set[str] | None = None) -> tuple[bool, str]:
    """Whether torch computes bfloat16 matmuls natively on this CPU, and why, from the CPU's
    ``flags`` (``/proc/cpuinfo``'s where not given), torch's CPU capability, the oneDNN switch
    and ``ONEDNN_MAX_CPU_ISA``."""
    import torch

    flags = cpu_flags() if flags is None else flags
    have = ",".join(f for f in BF16_FLAGS if f in flags)
    if not have:
        return False, "no amx_bf16 or avx512_bf16 flag"
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX512"):
        return False, f"{have}, but torch's CPU capability is {capability}"
    if not torch.backends.mkldnn.enabled:
        return False, f"{have}, but oneDNN is switched off"
    cap = (variables.onednn_max_isa() or "").upper()
    if cap in BELOW_BF16:
        return False, f"{have}, but ONEDNN_MAX_CPU_ISA caps oneDNN at {cap}"
    return True, f"native {have}"


def matmul_ratio(dtype: str = "bfloat16", fresh: bool = False) -> float:
    """How many times longer a 64x1024 @ 1024x1024 matmul takes in ``dtype`` than in float32
    here: :data:`PAIRS` interleaved pairs after a warm-up, the quickest of each side. Timed
    once a process for each dtype, oneDNN switch and thread count, unless ``fresh``."""
    import torch

    key = (dtype, torch.backends.mkldnn.enabled, torch.get_num_threads())
    if key in _RATIOS and not fresh:
        return _RATIOS[key]
    wide = torch.randn(64, 1024), torch.randn(1024, 1024)
    sides = {"float32": wide, dtype: tuple(t.to(getattr(torch, dtype)) for t in wide)}
    quickest = dict.fromkeys(sides, float("inf"))
    for a, b in sides.values():
        a @ b  # warm-up
    for _ in range(PAIRS):
        for name, (a, b) in sides.items():
            start = time.perf_counter()
            a @ b
            quickest[name] = min(quickest[name], time.perf_counter() - start)
    _RATIOS[key] = quickest[dtype] / quickest["float32"]
    return _RATIOS[key]


def auto_dtype(where: str, flags: set[str] | None = None,
           timing: Callable[[bool], float] | None = None) -> DtypeChoice:  # fmt: skip
    """``--dtype auto`` on device ``where``, decided now (see the module's text); ``flags``
    and ``timing`` (``timing(fresh)``: the ratio of bfloat16's matmul time to float32's)
    stand in for the CPU's own in a test."""
    if autotune.device.is_cuda(where):
        if autotune.device.native_bfloat16(where):
            return DtypeChoice(
                "bfloat16", "dtype auto: bfloat16 (this GPU computes in it natively)"
            )
        return DtypeChoice("float16", "dtype auto: float16 (this GPU has no native bfloat16)")
    timed = timing or (lambda fresh: matmul_ratio("bfloat16", fresh))
    is_native, why = native_bf16(flags)
    ratios = [timed(False)]
    if (ratios[0] < SLOW) != is_native:  # measured again before it can overrule the flags
        ratios.append(timed(True))
    measured = ratios[-1]
    quick = measured < SLOW
    speed = (f"bfloat16 matmuls take {measured:.2g}x float32's time" if quick
             else f"bfloat16 matmuls run {measured:.0f}x slower than float32")  # fmt: skip
    dtype = "bfloat16" if quick else "float32"
    if quick == is_native:
        again = f" (timed again: the first timing, {ratios[0]:.2g}x, disagreed)" if (
            len(ratios) > 1) else ""  # fmt: skip
        return DtypeChoice(dtype, f"dtype auto: {dtype}: {why}; {speed} here{again} ({_where()})",
                        tuple(ratios))  # fmt: skip
    return DtypeChoice(dtype, f"dtype auto: {dtype}, as timed twice, though the flags say "
                           f"{'not ' if not is_native else ''}native ({why}): {speed} here "
                           f"({_where()})", tuple(ratios))  # fmt: skip


def machine_key(where: str) -> str:
    """What a decision depends on, hashed: torch, the CPU and its flags, torch's capability,
    the oneDNN switch and cap, the thread count, the device."""
    import torch

    env = fingerprint("cpu")
    parts = [env["torch"], env["cpu"], env["cpu_capability"], env["cpu_bf16"],
             torch.backends.mkldnn.enabled, variables.onednn_max_isa() or "",
             torch.get_num_threads(), autotune.device.resolve(where)]  # fmt: skip
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def resolve_dtype(where: str) -> DtypeChoice:
    """``--dtype auto`` on device ``where`` as this machine decided it: decided once a
    process, recorded in ``decisions.json`` in the studies folder, and read back there by a
    later run ("as before"), so that the same command continues the same study."""
    key = machine_key(where)
    if key in _DECIDED:
        return _DECIDED[key]
    path = variables.studies() / "decisions.json"
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    stored = kept.get(key) if isinstance(kept, dict) else None
    if isinstance(stored, dict) and stored.get("dtype") in ("bfloat16", "float16", "float32"):
        dtype, when = stored["dtype"], stored.get("at", "an earlier run")
        found = DtypeChoice(dtype, f"dtype auto: {dtype}, as before on this machine (decided "
                                f"{when}: {stored.get('why', '')})")  # fmt: skip
    else:
        found = auto_dtype(where)
        at = time.strftime("%Y-%m-%d %H:%M", time.localtime())
        why = found.line.split(": ", 2)[-1]
        _keep(path, {**(kept if isinstance(kept, dict) else {}),
                     key: {"dtype": found.dtype, "at": at, "why": why}})  # fmt: skip
    _DECIDED[key] = found
    return found


def _keep(path: Any, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` whole or not at all (a folder that cannot be written keeps
    nothing: the next run decides again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def slow_dtype(dtype: str, where: str) -> str:
    """One line when ``dtype``'s matmuls run :data:`SLOW` times slower than float32's on this
    CPU, with the measured ratio and what to try; "" otherwise (and on a GPU)."""
    if where != "cpu" or dtype not in ("bfloat16", "float16"):
        return ""
    measured = matmul_ratio(dtype)
    if measured < SLOW:
        return ""
    return (f"note: {dtype} matmuls run {measured:.0f}x slower than float32 here ({_where()}): "
            f"every call this search times will; try --dtype float32 (or --dtype auto), or a "
            f"machine with native {dtype} (AMX or AVX-512 BF16)")  # fmt: skip


def dtype_line(asked: str | None, dtype: str, where: str) -> str:
    """What a search says of its dtype before its first trial: what ``--dtype auto`` chose and
    why, or that the dtype asked for is slow here (:func:`slow_dtype`); "" when neither."""
    if asked == "auto":
        return resolve_dtype(where).line
    return slow_dtype(dtype, where)


def fingerprint(device: str = "cpu", dtype: str | None = None) -> dict[str, Any]:
    """torch and CUDA versions, the device (name; on a GPU its compute capability, driver,
    Triton and the float32 matmul precision a trial of ``dtype`` runs with), CPU model, torch's
    CPU capability, native bfloat16 instructions and core count, Python."""
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "device_name": cpu_model(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": cpu_bf16(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    return {**env, **autotune.device.traits(device, dtype)}


# The transformers a generate strategy's padded prefill is written against (5.24): a static
# cache's layers that ``crop`` by moving their ``cumulative_length`` in place (their tensors keep
# their addresses), and the 4-D causal mask its ``prepare_inputs_for_generation`` builds for a
# static cache, which the padding pads. Its ``cache=`` keyword is adapted to (earlier ones take
# ``past_key_values``: :func:`autotune.strategy.kv_cache.cache_keyword`); the rest of the
# generate workload runs on 5.0 on. A lent GPU's 5.17 was below it.
PADDED_PREFILL_TRANSFORMERS = (5, 24)


def check_padded_prefill(version: str | None = None) -> None:
    """Raise ConfigError (one line) where the installed transformers (or ``version``) is older
    than :data:`PADDED_PREFILL_TRANSFORMERS`: a generate strategy with buckets refuses it
    rather than run paths it does not have."""
    from packaging.version import InvalidVersion, Version

    if version is None:
        import transformers

        version = transformers.__version__
    try:
        release = Version(version).release
    except InvalidVersion:
        return  # a build of its own: nothing to say
    if tuple(release[:2]) < PADDED_PREFILL_TRANSFORMERS:
        need = ".".join(map(str, PADDED_PREFILL_TRANSFORMERS))
        raise ConfigError(f"transformers {version} is older than the {need} that a generate "
                          f"prefill padded to buckets needs (a static cache cropped in place, "
                          f"the 4-D mask): pip install 'transformers>={need}', or --buckets "
                          f"none")  # fmt: skip
