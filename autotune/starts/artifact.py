"""The compile-cache artefact: torch's "mega-cache" of one compiled strategy, kept and shipped.

A trial's cold process saves what it compiled with ``torch.compiler.save_cache_artifacts()``;
the parent keeps the bytes by checksum in ``$AUTOTUNE_ARTIFACTS`` (default ``autotune/artifacts``
in ``$XDG_CACHE_HOME``, else in ``~/.cache``); ``autotune export`` copies the chosen one beside
the JSON (``best.json`` + ``best.cache.bin``) with its checksum and the fingerprint it needs
(torch, Triton and CUDA versions, device name); :func:`prepare` loads it with
``torch.compiler.load_cache_artifacts()`` before ``autotune.apply`` compiles, or says in one
line why not. The file is exactly torch's bytes: plain torch loads it too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune import variables
from autotune.errors import CacheWarning
from autotune.start_kinds import BY_NAME

SUFFIX = BY_NAME["portable"].suffix


def requirements(device: str = "cpu") -> dict[str, Any]:
    """What an artefact needs to load and hit: torch, Triton and CUDA versions, the device's
    name, compute capability and index, the CPU's vector ISA, and the float32 matmul precision
    (the last three are part of Inductor's cache key)."""
    import torch

    import autotune.device
    from autotune.environment import cpu_isa, cpu_model

    found = autotune.device.traits(device)
    cuda = autotune.device.is_cuda(device)
    return {"torch": torch.__version__, "triton": found.get("triton"), "cuda": torch.version.cuda,
            "device": "cuda" if cuda else device.split(":")[0],
            "device_name": found.get("device_name", cpu_model()),
            "capability": found.get("capability"), "cpu_isa": cpu_isa(),
            "device_index": int(device.partition(":")[2] or 0) if cuda else None,
            "float32_matmul_precision": found["float32_matmul_precision"]}  # fmt: skip


FIELDS = {"torch": "torch", "triton": "Triton", "cuda": "CUDA", "device_name": "device",
          "capability": "compute capability", "cpu_isa": "CPU ISA",
          "float32_matmul_precision": "float32 matmul precision",
          "device_index": "device index"}  # fmt: skip  # what must agree, with its label


def differences(wanted: dict[str, Any], here: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each field an artefact recorded that differs here: (as made, here). A field it did not
    record (an older export) is no difference."""
    return {key: (wanted[key], here.get(key)) for key in FIELDS
            if wanted.get(key) is not None and wanted[key] != here.get(key)}  # fmt: skip


def save(path: str, device: str) -> dict[str, Any] | None:
    """Save this process's compile artefacts to ``path``; its size and fingerprint, or None."""
    import torch

    saved = torch.compiler.save_cache_artifacts()
    if saved is None or not saved[0]:
        return None
    Path(path).write_bytes(saved[0])
    return {"bytes": len(saved[0]), "fingerprint": requirements(device)}


def load(path: str) -> float:
    """Load a saved artefact into this process's (empty) caches; the seconds it took."""
    import torch

    start = time.perf_counter()
    torch.compiler.load_cache_artifacts(Path(path).read_bytes())
    return time.perf_counter() - start


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def folder() -> Path:
    """Where the parent keeps artefacts by checksum, for ``autotune export`` to ship."""
    where = variables.artifacts()
    return Path(where) if where else variables.cache_home() / "artifacts"


def keep(path: str, meta: dict[str, Any], suffix: str = SUFFIX) -> dict[str, Any]:
    """Keep the artefact at ``path`` under its checksum; ``meta`` plus ``sha256``."""
    data = Path(path).read_bytes()
    digest = sha256(data)
    target = folder() / f"{digest}{suffix}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
    except OSError as exc:  # the measurement stands without it; export will say so
        return {**meta, "sha256": digest, "bytes": len(data), "kept": False,
                "note": f"not kept in {target.parent}: {exc.strerror}"}  # fmt: skip
    return {**meta, "sha256": digest, "bytes": len(data), "kept": True}


def ship(
    meta: dict[str, Any] | None, json_path: Path, suffix: str = SUFFIX
) -> tuple[dict[str, Any] | None, str]:
    """Copy a kept artefact beside an exported file; its block (file, checksum, size,
    fingerprint), or a note."""
    if not meta or not meta.get("sha256"):
        return None, ""
    kept = folder() / f"{meta['sha256']}{suffix}"
    if not kept.exists():
        return None, (f"no {suffix[1:]} artefact written: {kept.name} is not in "
                      f"{kept.parent} on this machine (measured elsewhere?); a start will "
                      "compile cold")  # fmt: skip
    target = json_path.with_name(json_path.stem + suffix)
    try:
        shutil.copyfile(kept, target)
    except OSError as exc:
        return None, f"no {suffix[1:]} artefact written: cannot write {target}: {exc.strerror}"
    block = {"file": target.name, "sha256": meta["sha256"], "bytes": meta["bytes"],
             "fingerprint": meta.get("fingerprint", {})}  # fmt: skip
    return block, ""


def mismatch(wanted: dict[str, Any], here: dict[str, Any]) -> str:
    """Why an artefact made under ``wanted`` cannot load or hit ``here`` ("" when it can): the
    first field that differs."""
    for key, (made, found) in differences(wanted, here).items():
        if key == "float32_matmul_precision":
            return (f"it was made with float32 matmul precision {made!r}, this process runs "
                    f"{found!r}: call torch.set_float32_matmul_precision({made!r}) before "
                    "autotune.apply")  # fmt: skip
        return f"it was made with {FIELDS[key]} {made}, this is {found}"
    return ""


TRUST_ENV = variables.TRUST
OPT_IN = (f"loading it runs code from the file (torch's cache is pickled): pass "
          f"trust_artifact=True to autotune.apply, or set {TRUST_ENV}=1, if you made it or trust "
          "who did")  # fmt: skip


def trusted(trust: bool | None) -> bool:
    """The caller's word, else ``$AUTOTUNE_TRUST_ARTIFACTS`` (``1``): never a checksum."""
    return trust if trust is not None else variables.trust_artifacts()


def check(block: Any, json_path: Path) -> tuple[bytes | None, str]:
    """The artefact's bytes if its block is well formed and the file is there, whole and made
    for this machine; else why not. (The checksum sits in the same folder as the file, so it
    tells a damaged file, never who made it.)"""
    if not isinstance(block, dict) or not isinstance(block.get("sha256"), str):
        return None, "the export's cache_artifact block is malformed"
    name = block.get("file", json_path.stem + SUFFIX)
    if not isinstance(name, str) or Path(name).name != name:
        return None, "the export's cache_artifact names no file beside it"
    path = json_path.with_name(name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"cache artefact {path} missing ({exc.strerror})"
    if sha256(data) != block["sha256"]:
        return None, f"cache artefact {path.name} is corrupt (checksum differs)"
    wanted = block.get("fingerprint")
    if not isinstance(wanted, dict) or not wanted.get("torch"):
        return None, f"cache artefact {path.name} says nothing of what it was made with"
    if why := mismatch(wanted, requirements(str(wanted.get("device", "cpu")))):
        return None, f"cache artefact {path.name} does not fit here: {why}"
    return data, ""


def precompiled_blocks(block: dict[str, Any]) -> dict[str, Any]:
    """The artefacts that skip the compiler an export's ``autotune`` block ships, by kind:
    its ``precompiled`` block, or its ``ahead`` block where an older version wrote that name
    ({} where there is neither, or it is not a dict)."""
    found = block.get("precompiled", block.get("ahead"))
    return found if isinstance(found, dict) else {}


def prepare(data: dict[str, Any], json_path: str | Path, trust: bool | None = None) -> bool | None:
    """Load an export's artefact into this process's caches, if the caller trusts it; warn in
    one line where it is not loaded. True: loaded; False: not loaded; None: a load was tried
    and failed, so the compile should run in a fresh cache directory (:func:`isolate`).

    Never raises, and never leaves this process's environment changed.
    """
    found = data.get("autotune") if isinstance(data.get("autotune"), dict) else {}
    block, skipping = found.get("cache_artifact"), precompiled_blocks(found)
    if not trusted(trust):
        names = [b.get("file") for b in [block, *skipping.values()] if isinstance(b, dict)]
        if names := [n for n in names if isinstance(n, str)] or ([SUFFIX] if block else []):
            warnings.warn(f"{', '.join(names)} not loaded: {OPT_IN}; compiling cold",
                          CacheWarning, stacklevel=3)  # fmt: skip
        return False
    if not block:
        return False
    payload, why = check(block, Path(json_path))
    if payload is not None:
        import torch

        quiet = logging.getLogger("torch.compiler")  # torch logs its refusal with a traceback
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            with environ_kept():  # torch's loader sets TORCHINDUCTOR_CACHE_DIR where unset
                loaded = torch.compiler.load_cache_artifacts(payload)
            if loaded is not None:
                return True
            why = f"cache artefact {block.get('file')} failed to load (torch refused it)"
        except Exception as exc:
            why = f"cache artefact {block.get('file')} failed to load ({type(exc).__name__})"
        finally:
            quiet.setLevel(level)
        warnings.warn(f"{why}: compiling cold", CacheWarning, stacklevel=3)
        return None  # whatever it wrote must stay out of the compile
    warnings.warn(f"{why}: compiling cold", CacheWarning, stacklevel=3)
    return False


CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@contextlib.contextmanager
def environ_kept() -> Iterator[None]:
    """Leave ``os.environ`` as it was found, whatever the body set."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(before):
            del os.environ[key]
        for key, value in before.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def isolate(module: Any, method: str = "") -> Any:
    """``module``, whose calls (or calls of its ``method``, e.g. ``generate``, whose forward
    is compiled and must not trace a hook) compile in a fresh, empty Inductor cache directory,
    so that what a failed load wrote stays out of its compile. The directory is Inductor's only
    while a call runs: the process's environment is set for the call and restored after it."""
    import tempfile

    fresh, saved = tempfile.mkdtemp(prefix="autotune-cold-"), []

    def enter(*_: Any) -> None:
        saved.append(os.environ.get(CACHE_ENV))
        os.environ[CACHE_ENV] = fresh

    def leave(*_: Any) -> None:
        old = saved.pop()
        if old is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = old

    if method:
        call = getattr(module, method)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            enter()
            try:
                return call(*args, **kwargs)
            finally:
                leave()

        setattr(module, method, wrapped)  # on this object alone: its class is untouched
        return module
    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave, always_call=True)
    return module
