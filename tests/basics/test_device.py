"""The device module, on a CPU: only torch's lowest CUDA layer is stood in for (availability,
the device count, ``torch._C``'s calls, the events), never the function under test."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from autotune import device
from autotune.coordination import check_environment
from autotune.errors import ConfigError
from autotune.job.local import LocalWorkers, worker_env
from autotune.ship.formats import MARK_STEPS, caveats
from autotune.strategy import Strategy
from autotune.workload import Workload

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """torch's lowest CUDA layer, as a machine with two GPUs would answer: what was asked of it
    is recorded."""
    calls: dict[str, list] = {"set": [], "reset": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "is_initialized", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_setDevice", calls["set"].append, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_resetPeakMemoryStats", calls["reset"].append,
                        raising=False)  # fmt: skip
    monkeypatch.setattr(torch._C, "_cuda_emptyCache", lambda: calls["reset"].append("empty"),
                        raising=False)  # fmt: skip
    stats = {"allocated_bytes": {"all": {"peak": 3 * 2**20}},
             "reserved_bytes": {"all": {"peak": 8 * 2**20}}}  # fmt: skip
    monkeypatch.setattr(torch._C, "_cuda_memoryStats", lambda index: stats, raising=False)
    return calls


def test_the_default_gpu_is_resolved_to_an_index_before_it_is_made_current(two_gpus) -> None:
    """torch.cuda.set_device(torch.device("cuda")) raises: every trial on --device cuda or
    auto crashed. The device is made concrete once, at the top."""
    assert device.resolve("cuda") == "cuda:0" and device.resolve("auto") == "cuda:0"
    assert Workload.create(device="cuda").device == "cuda:0"
    device.use("cuda")
    device.use("cuda:1")
    assert two_gpus["set"] == [0, 1]
    with pytest.raises(ConfigError, match="only 2 CUDA device"):
        device.resolve("cuda:2")


def test_every_strategy_s_peak_is_the_reserved_peak_after_emptying_the_cache(two_gpus) -> None:
    """One kind of number for every strategy: a CUDA graph's memory sits in its private pool,
    reserved, not allocated, while it replays; and reserved memory never shrinks by itself, so
    the cache is emptied before the reset (what eager left cached does not count)."""
    peak = device.PeakMemory("cuda:0")  # whether or not the strategy replays CUDA graphs
    peak.reset()
    assert two_gpus["reset"] == ["empty", 0]  # emptied, then the peak reset
    assert peak.peak_mb() == 8.0 and peak.kind == "cuda-max-reserved"  # not allocated's 3
    assert device.PeakMemory("cpu").kind == "cpu-rss-hwm"


def test_the_reference_child_makes_its_device_current_first(two_gpus, tmp_path) -> None:
    """A reference on cuda:1 made no device current: torch's CUDA state (its context, cuBLAS's
    handles) went to GPU 0. It is made current as a trial's is, before anything else; the
    stand-in CUDA layer then fails the build, which is the child's failed measurement."""
    from autotune.catalog import ModelRef
    from autotune.trial import child
    from autotune.trial.request import Request

    request = Request("reference", Strategy("none"), ModelRef("toy-64", layers=1),
                      Workload(device="cuda:1"), reference_out=str(tmp_path / "r.pt"))  # fmt: skip
    result = child.run(request.to_dict())
    assert two_gpus["set"][:1] == [1], result["reason"]
    assert result["status"] == "failed", result  # no real GPU behind the stand-in


def test_local_workers_get_one_gpu_each_and_a_share_of_the_cpu(two_gpus, monkeypatch) -> None:
    assert LocalWorkers.devices("cuda:0", 2) == ["cuda:0", "cuda:1"]
    assert LocalWorkers.devices("cuda:1", 1) == ["cuda:1"]  # a study made for cuda:1 keeps it
    with pytest.raises(ConfigError, match="one worker per GPU"):
        LocalWorkers.devices("cuda", 3)
    assert LocalWorkers.devices("cuda", 3, force=True) == ["cuda:0", "cuda:1", "cuda:0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    env = worker_env("sqlite:///x.db", "cuda:1", 2)
    assert env["CUDA_VISIBLE_DEVICES"] == "5"  # the worker sees its one GPU as cuda:0
    cores = __import__("os").cpu_count() or 1
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == str(max(1, cores // 2))


class FakeEvent:
    """torch.cuda.Event as the driver would answer: a clock read at record, a count of waits."""

    waits = 0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self, stream: object = None) -> None:
        import time

        self.at = time.perf_counter()

    def synchronize(self) -> None:
        FakeEvent.waits += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3


def test_many_steps_are_timed_with_one_wait(two_gpus, monkeypatch) -> None:
    """A generation records one event pair per step and waits once at its end."""
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda where=None: None)
    FakeEvent.waits = 0
    timer = device.StepTimer("cuda:0")
    for _ in range(7):
        timer.time(lambda: sum(range(1000)))
    seconds = timer.elapsed()
    assert len(seconds) == 7 and all(s >= 0 for s in seconds) and FakeEvent.waits == 1


def test_one_skipped_region_is_not_a_plain_inductor_compile() -> None:
    from autotune.cli.report import summary
    from autotune.trial.measurement import Graphs, Measurement

    skipped = ["graph 1/0 forward (toy.py:25): skipping cudagraphs due to mutated inputs"]
    strategy = Strategy.create("regional", "inductor", "reduce-overhead")

    def measured(count: int, skips: int) -> Measurement:
        graphs = Graphs(count=count, cudagraph_skips=skips, cudagraph_skipped=skipped[:skips])
        return Measurement(strategy.to_dict(), {}, {}, "ok", graphs=graphs)

    part, whole, none = measured(3, 1), measured(1, 1), measured(3, 0)
    assert (part.without_cuda_graphs, whole.without_cuda_graphs) == ("1 of 3 graphs", "all")
    assert none.without_cuda_graphs == ""
    assert "plain Inductor" not in summary(part) and skipped[0] in summary(part)
    assert "1 of 3 graphs" in summary(part) and "plain Inductor" in summary(whole)


def test_a_trial_records_cuda_graph_fallbacks_only_for_cuda_graphs_on_a_gpu() -> None:
    """On a CPU a reduce-overhead regional compile has graphs with no CUDA device: Inductor
    counts them as skips, and the trial used to label the strategy NO GRAPHS."""
    from autotune.catalog import ModelRef
    from autotune.trial.request import Request
    from autotune.trial.scenarios import Inference, begin

    strategy = Strategy.create("regional", "inductor", "reduce-overhead")
    request = Request("trial", strategy, ModelRef("toy-64", layers=2), Workload(), iters=1,
                      warmup=0)  # fmt: skip
    torch._dynamo.reset()
    m = Inference(begin(request)).run()
    assert m.ok and m.graphs is not None and m.graphs.count >= 2, m.reason
    assert m.graphs.cudagraph_skips == 0 and m.without_cuda_graphs == ""


def test_cuda_graph_steps_are_marked_before_every_call(monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("mark"))

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append("call")
            return x

    model = device.mark_each_call(Model())
    model(torch.ones(1))
    model(torch.ones(1))
    assert calls == ["mark", "call", "mark", "call"]
    overhead = Strategy.create("regional", "inductor", "reduce-overhead")
    assert device.marks_steps("cuda:0", overhead.uses_cuda_graphs())
    assert not device.marks_steps("cpu", overhead.uses_cuda_graphs())
    assert not device.marks_steps("cuda:0", Strategy.create("full").uses_cuda_graphs())
    for fmt in ("accelerate", "accelerate-yaml", "torch", "transformers"):
        assert MARK_STEPS in caveats(overhead, fmt)


def test_the_fingerprint_names_what_a_gpu_number_depends_on(two_gpus, monkeypatch, tmp_path):
    props = SimpleNamespace(major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda where: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda where: "NVIDIA H100 80GB HBM3")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 570.86.15\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    found = device.traits("cuda:0")
    assert found["capability"] == "9.0" and found["driver"] == "570.86.15"
    assert found["device_name"] == "NVIDIA H100 80GB HBM3" and "triton" in found
    base = {"torch": "2.13.0", "cuda": "12.8", "device": "cuda", **found}
    check_environment(base, {**base, "device": "cuda:1"}, force=False)
    for key, other in (("capability", "8.0"), ("driver", "550.1"), ("triton", "0.0")):
        with pytest.raises(ConfigError, match=key):
            check_environment(base, {**base, key: other}, force=False)
    precision = torch.get_float32_matmul_precision()
    try:
        device.tf32_for("float32", "cuda:0")
        assert torch.get_float32_matmul_precision() == "high"  # TF32, as PyTorch's harness
        assert device.traits("cpu")["float32_matmul_precision"] == "high"
    finally:
        torch.set_float32_matmul_precision(precision)


def test_only_the_device_module_touches_torch_cuda() -> None:
    found = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if re.search(r"torch\.cuda\b", p.read_text()) and p.name != "device.py"]  # fmt: skip
    assert found == []


@pytest.mark.slow
def test_the_gpu_acceptance_run_s_plan_parses_and_builds() -> None:
    """bench/gpu.py --dry-run: every command of the plan parses, every model builds at one
    layer (what CI can check of a run that needs a GPU)."""
    import subprocess
    import sys

    root = PACKAGE.parent
    out = subprocess.run([sys.executable, str(root / "bench" / "gpu.py"), "--dry-run"],
                         cwd=root, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "dry run: the plan is sound" in out.stdout
    logging.getLogger(__name__).info(out.stdout)


def test_generate_counts_cuda_graph_recording_in_its_compile() -> None:
    """CUDA graphs record on a function's second call: the second decode step records decode's
    graph, the second generation's prefill records prefill's. Both belong to the compile,
    counted where Inductor's log says a graph recorded (a backend that records as CUDA-graph
    trees do, 0.5 s each)."""
    from autotune.catalog import ModelRef
    from autotune.trial.request import Request
    from autotune.trial.scenarios import Generate, begin
    from tests.models import RECORD_S

    gen = Workload(device="cpu", batch_size=2, seq_len=8, kind="generate", new_tokens=4)
    recording = Strategy.create("full", "tests.models:recording_backend")
    spec = {"kind": "trial", "strategy": recording.to_dict(), "iters": 1, "warmup": 0,
            "workload": gen.to_dict(),
            "model": ModelRef("tests.models:tiny_llama").to_dict()}  # fmt: skip
    m = Generate(begin(Request.from_dict(spec))).run()
    recorded = m.timings["cuda_graph_recording_s"]
    assert recorded >= 2 * RECORD_S and m.compile_s is not None and m.compile_s > recorded


def test_the_study_records_the_matmul_precision_its_trials_run_with() -> None:
    """A float32 study on a GPU runs its trials at TF32 ("high"); the environment the parent
    records says so without changing the parent's own precision, and workers must agree."""
    import torch

    from autotune.coordination import comparable
    from autotune.environment import fingerprint

    before = torch.get_float32_matmul_precision()
    gpu32 = fingerprint("cuda:0", "float32")
    assert gpu32["float32_matmul_precision"] == "high"
    assert fingerprint("cuda:0", "bfloat16")["float32_matmul_precision"] == before
    assert fingerprint("cpu", "float32")["float32_matmul_precision"] == before
    assert torch.get_float32_matmul_precision() == before  # the parent's own is untouched
    other = {**gpu32, "float32_matmul_precision": "highest"}
    assert comparable(gpu32) != comparable(other)  # a worker at full float32 may not join


def test_a_cuda_child_measures_its_gpu_as_cuda_0_seen_alone(tmp_path, monkeypatch) -> None:
    """Inductor's cache keys hold the device index: a trial on cuda:1 runs in a child that sees
    that GPU alone as cuda:0, so its artefacts hit on a user's cuda:0; the measurement still
    says cuda:1, the device the study asked for."""
    from autotune.catalog import ModelRef
    from autotune.trial.process import run_child
    from autotune.trial.request import Request
    from autotune.workload import Settings

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert device.alone("cuda:1") == ("cuda:0", {"CUDA_VISIBLE_DEVICES": "5"})
    assert device.alone("cpu") == ("cpu", {})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device.alone("cuda:2") == ("cuda:0", {"CUDA_VISIBLE_DEVICES": "2"})
    request = Request("trial", Strategy.create("full", "eager"), ModelRef("toy-64", layers=2),
                      Workload(device="cuda:1"), iters=1, warmup=0)  # fmt: skip
    m = run_child(request, str(tmp_path), "cold", str(tmp_path / "caches"), Settings())
    assert m.workload is not None and m.workload.device == "cuda:1"
    assert m.status == "failed" and "cuda:0" in m.reason  # what the child was asked to use


def test_a_machine_with_a_gpu_preloads_nothing_that_initialises_cuda(
    two_gpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test suite's ``$AUTOTUNE_PRELOAD`` (Inductor's and transformers' modules) initialised
    CUDA in the fork server on an H100 (torch 2.11): every trial forked from it failed with
    "Cannot re-initialize CUDA in forked subprocess"."""
    from autotune.trial import process

    monkeypatch.setenv("AUTOTUNE_PRELOAD", "compilers,transformers")
    assert process.preloaded() == process.PRELOAD  # torch and Dynamo alone, as the bench ran
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "torch._inductor.compile_fx" in process.preloaded()  # a CPU machine keeps them
    monkeypatch.setenv("AUTOTUNE_PRELOAD", "everything")
    with pytest.raises(ConfigError, match="everything"):
        process.preloaded()


def test_a_trial_s_child_refuses_a_gpu_it_was_not_given(two_gpus, monkeypatch) -> None:
    """A trial's child sees its GPU alone through ``CUDA_VISIBLE_DEVICES``, set after the fork:
    where the fork server had begun CUDA, the variable is ignored and the child still sees two,
    so that a ``cuda:1`` trial would run on GPU 0 silently. It is refused in one line; one GPU
    seen, as the variable says, is made current."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=1 names one GPU, but this "
                       "process sees 2"):  # fmt: skip
        device.use("cuda:0")
    assert two_gpus["set"] == []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    device.use("cuda:0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # a user's own list: theirs to set
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    device.use("cuda:1")
    assert two_gpus["set"] == [0, 1]
