"""Check 8 of the GPU acceptance run (bench/gpu.py), on a CPU: an export whose cache artefact was
made at TF32 (``high``), as a float32 study's trials on a GPU make it, is loaded by a fresh
process with autotune's warnings as errors and must hit; an export that ships none fails."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

MAKE = """
import json, sys, torch
from pathlib import Path
import autotune
from autotune import catalog
from autotune.catalog import ModelRef
from autotune.starts import artifact
from autotune.strategy import Strategy
from autotune.workload import Workload

torch.set_float32_matmul_precision("high")  # as a float32 trial on a GPU runs (device.tf32_for)
folder = Path(sys.argv[1])
ref, workload = ModelRef("toy-64", layers=2), Workload(device="cpu")
strategy = Strategy.create("full", "inductor")
model, inputs = catalog.build(ref, workload)
with torch.no_grad():
    autotune.apply(model, strategy)(*inputs)
made = str(folder / "made.bin")
block, note = artifact.ship(artifact.keep(made, artifact.save(made, "cpu")), folder / "best.json")
assert block is not None, note
data = {"autotune": {"strategy": strategy.to_dict(), "key": strategy.key, "model": ref.to_dict(),
                     "workload": workload.to_dict(), "cache_artifact": block}}
(folder / "best.json").write_text(json.dumps(data))
"""


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "bench" / "gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_portable_check_loads_a_tf32_artefact_and_fails_an_export_without_one(
    tmp_path: Path,
) -> None:
    """The check's loading process never set the precision and turned every warning into an
    error: ``autotune.apply`` saw ``high`` against ``highest``, its CacheWarning raised, and the
    check exited 1; and it printed ``hit`` whether or not the cache hit, passing an eager pick
    that shipped nothing."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_ARTIFACTS": str(tmp_path / "kept"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "made-cache")}  # fmt: skip
    made = subprocess.run([sys.executable, "-c", MAKE, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    best = tmp_path / "best.json"
    data = json.loads(best.read_text())
    assert data["autotune"]["cache_artifact"]["fingerprint"]["float32_matmul_precision"] == "high"
    gpu = bench()
    found = gpu.portable_verdict(tmp_path, "cpu")
    assert found.passed, found.lines
    assert found.figures["fxgraph_cache_hit"] >= 1 and found.figures["fxgraph_cache_miss"] == 0
    del data["autotune"]["cache_artifact"]  # an eager pick, or a compile that saved nothing
    best.write_text(json.dumps(data))
    nothing = gpu.portable_verdict(tmp_path, "cpu")
    assert not nothing.passed and "ships no cache artefact" in nothing.lines[0]
