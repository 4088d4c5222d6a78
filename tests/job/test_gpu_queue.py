"""Which GPU studies a queue worker takes, on a CPU: two fingerprints, the study's and the
worker's, compared as ``autotune queue-worker`` compares them."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from autotune.environment import fingerprint
from autotune.job.queue import Queue
from autotune.job.worker import allowed_by, device_for
from autotune.search.studies import StudyRecord
from autotune.storage import Store


def queue_worker(tmp_path: Path) -> Queue:
    """The queue as ``autotune queue-worker --device cuda:0`` builds it (job.worker.work_queue)."""
    store = Store(f"sqlite:///{tmp_path}/q.db")
    return Queue(store, device_for("cuda:0"), functools.cache(fingerprint), allowed_by([]))


def study(name: str, dtype: str, environment: dict) -> StudyRecord:
    spec = {"model": {"name": "toy-64"}, "workload": {"device": "cuda:0", "dtype": dtype}}
    return StudyRecord(name, spec, environment, None)


def test_a_queue_worker_takes_a_float32_gpu_study(tmp_path: Path) -> None:
    """A float32 study's environment records the precision its trials run with on a GPU (TF32,
    ``high``); the queue compared it with this process's own (``highest``), so every queue
    worker after the first passed the study by and sat idle."""
    before = torch.get_float32_matmul_precision()
    recorded = fingerprint("cuda:0", "float32")  # what its first worker stored (open_search)
    assert recorded["float32_matmul_precision"] == "high" != before
    queue = queue_worker(tmp_path)
    assert queue.why_not(study("f32", "float32", recorded)) is None
    bf16 = fingerprint("cuda:0", "bfloat16")  # a bfloat16 study runs at the process's own
    assert queue.why_not(study("bf16", "bfloat16", bf16)) is None
    full = {**recorded, "float32_matmul_precision": "highest"}  # its trials ran at full float32
    assert "differs" in (queue.why_not(study("full", "float32", full)) or "")
    assert torch.get_float32_matmul_precision() == before  # the worker's own is untouched
