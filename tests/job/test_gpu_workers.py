"""``search --workers K --json``, on a CPU: the answer on standard output is the search's alone,
as the GPU acceptance run (and any program) reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long
def test_search_with_local_workers_prints_only_its_json_on_stdout(tmp_path: Path) -> None:
    """Each local worker inherited the search's standard output and printed its own lines
    there before the search's JSON: ``json.loads`` of ``search --workers 2 --json`` raised
    (check 9 of bench/gpu.py failed on any machine with two GPUs)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_STORAGE", None)
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "toy-64", "--layers", "1",
         "--backend", "eager", "--granularity", "none,full", "--dynamic", "none", "--fullgraph",
         "false", "--options", "none", "--iters", "3", "--warmup", "1", "--workers", "2",
         "--no-progress", "--no-confirm", "--json", "--study", "two"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)  # the whole of it: nothing before or after
    assert result["study"] == "two" and result["measured"] == 2
    assert out.stderr.count(" on study two in ") == 2  # what each worker said, where it goes
