"""The shipped cache artefact's checks, without compiling anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.starts import artifact

HERE = artifact.requirements("cpu")


def shipped(tmp_path: Path, data: bytes, **fingerprint: object) -> tuple[dict, Path]:
    (tmp_path / "best.cache.bin").write_bytes(data)
    block = {"file": "best.cache.bin", "sha256": artifact.sha256(data), "bytes": len(data),
             "fingerprint": {**HERE, **fingerprint}}  # fmt: skip
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"autotune": {"cache_artifact": block}}))
    return block, path


def test_a_whole_artefact_for_this_machine_passes(tmp_path: Path) -> None:
    block, path = shipped(tmp_path, b"bytes of a cache")
    assert artifact.check(block, path) == (b"bytes of a cache", "")


def test_missing_corrupt_and_foreign_artefacts_say_why(tmp_path: Path) -> None:
    block, path = shipped(tmp_path, b"bytes of a cache")
    (tmp_path / "best.cache.bin").write_bytes(b"bytes of a cach")
    assert artifact.check(block, path) == (None, "cache artefact best.cache.bin is corrupt "
                                           "(checksum differs)")  # fmt: skip
    (tmp_path / "best.cache.bin").unlink()
    data, why = artifact.check(block, path)
    assert data is None and "missing" in why
    for key, value, label in (("torch", "1.13.0", "torch 1.13.0"), ("cuda", "12.4", "CUDA 12.4"),
                              ("device_name", "NVIDIA H100", "device NVIDIA H100")):  # fmt: skip
        block, path = shipped(tmp_path, b"x", **{key: value})
        data, why = artifact.check(block, path)
        assert data is None and f"made with {label}, this is" in why


def test_prepare_warns_in_one_line_and_never_raises(tmp_path: Path) -> None:
    _, path = shipped(tmp_path, b"x", torch="1.13.0")
    data = json.loads(path.read_text())
    with pytest.warns(artifact.CacheWarning) as caught:
        assert artifact.prepare(data, path, trust=True) is False
    [warning] = caught
    message = str(warning.message)
    assert "made with torch 1.13.0" in message and message.endswith("compiling cold")
    assert artifact.prepare({"autotune": {}}, path) is False  # nothing shipped: silent


def test_torch_refusing_the_bytes_is_a_warning_too(tmp_path: Path) -> None:
    _, path = shipped(tmp_path, b"not a mega-cache at all")  # checksum and fingerprint fit
    with pytest.warns(artifact.CacheWarning, match="failed to load"):
        assert artifact.prepare(json.loads(path.read_text()), path, trust=True) is None


def test_an_artefact_made_at_another_matmul_precision_says_how_to_fit_it(tmp_path: Path) -> None:
    """Inductor's FX graph cache key holds the float32 matmul precision: a float32 GPU study's
    trials compile at TF32 ('high'), so a user process at the default misses the cache."""
    other = "high" if HERE["float32_matmul_precision"] != "high" else "highest"
    block, path = shipped(tmp_path, b"bytes", float32_matmul_precision=other)
    data, why = artifact.check(block, path)
    assert data is None and f"torch.set_float32_matmul_precision({other!r})" in why
    block, path = shipped(tmp_path, b"bytes")  # made at this process's precision: it fits
    assert artifact.check(block, path) == (b"bytes", "")
