"""Warm and portable starts: measured in fresh processes, shipped with the export, applied."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune import cli, start_kinds
from autotune.catalog import ModelRef
from autotune.errors import ConfigError
from autotune.ship import export
from autotune.starts import artifact
from autotune.storage import Store
from autotune.strategy import Strategy
from autotune.trial.measurement import Measurement
from autotune.trial.parent import Settings, measure
from autotune.workload import Workload

# a module-scoped fixture is built once: every test that shares it runs on one xdist worker
pytestmark = pytest.mark.xdist_group("starts")

ROOT = Path(__file__).resolve().parents[2]
CPU = Workload(device="cpu")
QUICK = Settings(iters=5, warmup=1, timeout_s=300)
TOY = ModelRef("toy-64", layers=4)


def test_every_stage_reads_one_start_kind_table() -> None:
    """Each start's cost reaches the objectives, the policies and the front table through the
    table in autotune.start_kinds, so a new start is one row."""
    from autotune.choice import objectives
    from autotune.choice.selection import Point
    from autotune.cli.report import front_table
    from autotune.trial.measurement import Latency, Start

    assert tuple(k.objective for k in start_kinds.TABLE) == objectives.START_COSTS
    assert all(objectives.METRICS[k.objective] == k.metric for k in start_kinds.TABLE)
    lat = Latency(1.0, 0.9, 1.1, 5)
    cost = {kind: 10.0 - i for i, kind in enumerate(start_kinds.KINDS)}  # distinct per start
    m = Measurement(Strategy.create("full").to_dict(), {}, {}, "ok", compile_s=cost["cold"],
                    latency=lat, eager_latency=lat, speedup=1.0,
                    starts={k: Start(k, compile_s=cost[k])
                            for k in start_kinds.LATER})  # fmt: skip
    point = Point.of(m, 0, None)
    for k in start_kinds.TABLE:
        assert objectives.values(point, (k.objective, "latency")) == (cost[k.name], 1.0)
        assert point.total_s(0, starts=2, start=k.objective) == cost["cold"] + cost[k.name]
    table = front_table([point], point.key, start_kinds.KINDS)
    assert all(k.label in table.splitlines()[0] for k in start_kinds.TABLE)
    assert f"{cost['aot']:.2f} s" in table


def test_starts_parse_and_travel_with_the_settings() -> None:
    assert start_kinds.parse("cold") == ("cold",)
    assert start_kinds.parse(" cold, warm ") == ("cold", "warm")
    assert start_kinds.parse("cold,aot,portable") == ("cold", "portable", "aot")  # KINDS' order
    for bad in ("warm", "warm,cold", "cold,warm,hot", "cold,warm,warm", ""):
        with pytest.raises(ConfigError, match="bad starts"):
            start_kinds.parse(bad)
    settings = Settings(starts=["cold", "warm"])  # as a study's stored spec gives it back
    assert settings.starts == ("cold", "warm")
    assert Settings(**json.loads(json.dumps(dataclasses.asdict(settings)))) == settings
    assert Settings().starts == ("cold", "warm", "portable")


def test_bad_starts_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["measure", "--model", "toy-64", "--starts", "cold,hot"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("autotune: error: bad starts") and "\n" not in err


@pytest.mark.slow
def test_a_backend_without_a_cache_records_cold_for_every_start() -> None:
    m = measure(TOY, CPU, Strategy.create("full", "aot_eager"), QUICK)
    assert m.ok, m.reason + m.log_tail
    assert set(m.starts) == {"cold", "warm", "portable"}
    for kind in ("warm", "portable"):
        s = m.starts[kind]
        assert not s.measured and s.compile_s == m.compile_s == m.start_s(kind)
        assert "aot_eager" in s.note and "no compile cache" in s.note
    assert m.artifact is None  # nothing saved, no child spent on it
    only_cold = measure(
        TOY, CPU, Strategy.create("none"), dataclasses.replace(QUICK, starts=("cold",))
    )
    assert set(only_cold.starts) == {"cold"} and only_cold.start_s("warm") is None


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("artefacts")
    old = os.environ.get("AUTOTUNE_ARTIFACTS")
    os.environ["AUTOTUNE_ARTIFACTS"] = str(folder)
    yield folder
    if old is None:
        del os.environ["AUTOTUNE_ARTIFACTS"]
    else:
        os.environ["AUTOTUNE_ARTIFACTS"] = old


@pytest.fixture(scope="module")
def inductor_trial(artefacts: Path) -> Measurement:
    """One toy-64 (4 blocks) inductor trial with its three starts."""
    m = measure(TOY, CPU, Strategy.create("full", "inductor"), QUICK)
    assert m.ok, m.reason + m.log_tail
    return m


@pytest.mark.slow
def test_cache_counter_names_still_count(inductor_trial: Measurement) -> None:
    """Dynamo's counters are private: if torch renames them, these read 0 and this fails."""
    cold = inductor_trial.starts["cold"].cache
    assert cold["fxgraph_cache_miss"] >= 1 and cold["autograd_cache_miss"] >= 1, cold
    assert inductor_trial.starts["warm"].cache["fxgraph_cache_hit"] >= 1


@pytest.mark.slow
def test_warm_start_hits_the_fx_graph_cache_and_is_quicker(inductor_trial: Measurement) -> None:
    warm = inductor_trial.starts["warm"]
    assert warm.status == "ok" and warm.measured and warm.load_s == 0.0
    assert warm.cache["fxgraph_cache_hit"] >= 1 and warm.cache["fxgraph_cache_miss"] == 0
    assert "missed" not in warm.note
    assert inductor_trial.start_s("warm") is not None and inductor_trial.compile_s is not None
    assert inductor_trial.start_s("warm") < inductor_trial.compile_s
    assert warm.phases.get("dynamo_s", 0) > 0 and "backend_s" in warm.phases
    assert warm.latency is not None and len(warm.latency.samples_ms) == 5 and warm.speedup


@pytest.mark.slow
def test_portable_start_loads_the_artefact_into_empty_caches_and_hits(
    inductor_trial: Measurement, artefacts: Path
) -> None:
    port = inductor_trial.starts["portable"]
    assert port.status == "ok" and port.load_s > 0
    assert port.compile_s is not None and port.compile_s > port.load_s  # the load counts
    assert port.cache["fxgraph_cache_hit"] >= 1 and port.cache["fxgraph_cache_miss"] == 0
    meta = inductor_trial.artifact
    assert meta and meta["kept"] and meta["bytes"] > 1000
    kept = artefacts / f"{meta['sha256']}{artifact.SUFFIX}"
    assert artifact.sha256(kept.read_bytes()) == meta["sha256"]
    assert meta["fingerprint"]["torch"] == __import__("torch").__version__


@pytest.mark.slow
def test_starts_round_trip_through_the_store(inductor_trial: Measurement, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/s.db")
    store.add_study("s", {"model": TOY.to_dict()}, {})
    store.add_measurement("s", "full-inductor", 0, inductor_trial.to_dict())
    row = store.measurement("s", "full-inductor")
    assert row is not None and Measurement.from_dict(row.payload) == inductor_trial


@pytest.fixture(scope="module")
def exported(inductor_trial: Measurement, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("export")
    store = Store(f"sqlite:///{folder}/e.db")
    store.add_study("e", {"model": TOY.to_dict()}, inductor_trial.environment)
    key = inductor_trial.strategy.key
    store.add_measurement("e", key, 0, inductor_trial.to_dict())
    path, chosen, notes = export.export(store, "e", "fastest", out=str(folder / "best.json"))
    assert chosen.key == key and not notes
    return path


@pytest.mark.slow
def test_export_writes_the_artefact_beside_the_json(
    exported: Path, inductor_trial: Measurement
) -> None:
    block = json.loads(exported.read_text())["autotune"]
    ship = block["cache_artifact"]
    assert ship["file"] == "best.cache.bin" and ship["sha256"] == inductor_trial.artifact["sha256"]
    assert artifact.sha256((exported.parent / "best.cache.bin").read_bytes()) == ship["sha256"]
    assert set(ship["fingerprint"]) >= {"torch", "triton", "cuda", "device_name"}
    assert block["start_s"]["warm"] == inductor_trial.start_s("warm")


APPLY = """
import json, sys, warnings, torch
import autotune
from autotune import catalog
from autotune.starts import artifact
from autotune.starts import later
from autotune.catalog import ModelRef
from autotune.workload import Workload

layers = int(sys.argv[4]) if len(sys.argv) > 4 else 4
model, inputs = catalog.build(ModelRef("toy-64", layers=layers), Workload(device="cpu"))
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    compiled = autotune.apply(model, sys.argv[1], trust_artifact=sys.argv[2] == "trust")
    expected = model(*inputs)
    actual = compiled(*inputs) if sys.argv[3] == "call" else expected
ours = [str(w.message) for w in caught
        if issubclass(w.category, autotune.AutotuneWarning)]
print(json.dumps({"warnings": ours, "cache": later.cache_counters(),
                  "equal": torch.allclose(expected, actual, atol=1e-5, rtol=1e-3)}))
"""


def apply_in_fresh_process(
    json_path: Path, tmp_path: Path, trust: bool = True, call: bool = True, layers: int = 4
) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty-cache"),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    env.pop("AUTOTUNE_TRUST_ARTIFACTS", None)
    out = subprocess.run(
        [sys.executable, "-c", APPLY, str(json_path), "trust" if trust else "no",
         "call" if call else "no", str(layers)], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_apply_loads_the_artefact_and_matches_eager(exported: Path, tmp_path: Path) -> None:
    result = apply_in_fresh_process(exported, tmp_path)
    assert result["warnings"] == [] and result["equal"]
    assert result["cache"]["fxgraph_cache_hit"] >= 1 and result["cache"]["fxgraph_cache_miss"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["corrupt", "other-torch"])
def test_a_bad_artefact_is_one_line_then_a_cold_compile(
    exported: Path, tmp_path: Path, damage: str
) -> None:
    folder = tmp_path / "ship"
    folder.mkdir()
    data = json.loads(exported.read_text())
    blob = (exported.parent / "best.cache.bin").read_bytes()
    if damage == "corrupt":
        blob = blob[: len(blob) // 2]
    else:
        data["autotune"]["cache_artifact"]["fingerprint"]["torch"] = "2.0.0"
    (folder / "best.json").write_text(json.dumps(data))
    (folder / "best.cache.bin").write_bytes(blob)
    result = apply_in_fresh_process(folder / "best.json", tmp_path)
    [line] = result["warnings"]
    expected = "is corrupt" if damage == "corrupt" else "made with torch 2.0.0"
    assert expected in line and line.endswith("compiling cold") and "\n" not in line
    assert result["cache"]["fxgraph_cache_miss"] >= 1 and result["cache"]["fxgraph_cache_hit"] == 0
    assert result["equal"]


def _poisoned(blob: bytes, marker: Path) -> bytes:
    """The artefact with every entry replaced by a pickle whose ``__reduce__`` writes
    ``marker``: an attacker's file in torch's own framing (so torch parses it). Built with
    torch's private serializer: this is a test's attack, not autotune's code."""
    import dataclasses
    import pickle

    from torch.compiler import _cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    class Boom:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (exec, (f"open({str(marker)!r}, 'w').write('ran')",))

    _cache.CacheArtifactManager._ensure_cache_artifacts_registered()
    found = AppendingByteSerializer.to_list(blob, deserialize_fn=_cache._deserialize_single_cache)
    out = AppendingByteSerializer(serialize_fn=_cache._serialize_single_cache)
    out.extend([(kind, [dataclasses.replace(a, content=pickle.dumps(Boom())) for a in found_])
                for kind, found_ in found])  # fmt: skip
    return out.to_bytes()


@pytest.mark.slow
def test_a_poisoned_artefact_runs_nothing_unless_trusted(exported: Path, tmp_path: Path) -> None:
    """The attacker rewrites the checksum beside the file, so only trust can gate the load.
    Untrusted: nothing runs, and one line says how to opt in. Trusted: the file's code runs (the
    danger is real), and the failed load still compiles, cold, to eager's outputs."""
    from autotune.starts.artifact import sha256

    marker = tmp_path / "PWNED"
    folder = tmp_path / "ship"
    folder.mkdir()
    blob = _poisoned((exported.parent / "best.cache.bin").read_bytes(), marker)
    data = json.loads(exported.read_text())
    data["autotune"]["cache_artifact"]["sha256"] = sha256(blob)
    (folder / "best.json").write_text(json.dumps(data))
    (folder / "best.cache.bin").write_bytes(blob)
    untrusted = apply_in_fresh_process(folder / "best.json", tmp_path, trust=False, call=False)
    assert not marker.exists()
    [line] = untrusted["warnings"]
    assert "not loaded" in line and "AUTOTUNE_TRUST_ARTIFACTS=1" in line
    trusted = apply_in_fresh_process(folder / "best.json", tmp_path / "again", trust=True)
    assert marker.exists()  # what trust_artifact=True allows
    [line] = trusted["warnings"]
    assert "failed to load" in line and trusted["equal"]  # and the compile did not break


@pytest.mark.slow
def test_a_loaded_artefact_that_misses_says_so(exported: Path, tmp_path: Path) -> None:
    """An artefact for another graph (made on another device index, or for another model)
    loads, then misses: the first call compiles cold, and one line says so."""
    result = apply_in_fresh_process(exported, tmp_path, layers=2)
    [line] = result["warnings"]
    assert "missed the FX graph cache" in line and result["equal"]


@pytest.mark.slow
def test_check_passes_an_export_made_here_and_names_each_field_that_differs(
    exported: Path, tmp_path: Path, capsys
) -> None:
    """autotune check: the export made on this machine will hit; each fingerprint field
    changed in turn will not, and the line names that field; a damaged file will not load."""
    assert cli.main(["check", str(exported)]) == 0
    assert "cache artefact best.cache.bin: will load and hit here" in capsys.readouterr().out
    blob = (exported.parent / "best.cache.bin").read_bytes()
    changed = {"torch": "2.0.0", "triton": "3.9.9", "cuda": "12.4", "device_name": "NVIDIA H100",
               "capability": "9.0", "cpu_isa": "sve", "float32_matmul_precision": "medium",
               "device_index": 3}  # fmt: skip
    for key, value in changed.items():
        data = json.loads(exported.read_text())
        data["autotune"]["cache_artifact"]["fingerprint"][key] = value
        folder = tmp_path / key
        folder.mkdir()
        (folder / "best.json").write_text(json.dumps(data))
        (folder / "best.cache.bin").write_bytes(blob)
        assert cli.main(["check", str(folder / "best.json")]) == 1, key
        out = capsys.readouterr().out
        assert f"will miss: {artifact.FIELDS[key]}: made with {value!r}" in out, out
        assert out.count(";") == 0  # that field alone
    (folder / "best.cache.bin").write_bytes(blob[:-1])
    assert cli.main(["check", str(folder / "best.json")]) == 1
    assert "checksum differs" in capsys.readouterr().out


def test_check_refuses_what_is_not_an_export_in_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "not.json").write_text("{")
    (tmp_path / "plain.json").write_text('{"backend": "inductor"}')
    (tmp_path / "none.json").write_text('{"autotune": {"strategy": {}}}')
    for name, needle in (("missing.json", "no such file"), ("not.json", "not an autotune JSON"),
                         ("plain.json", "no autotune block")):  # fmt: skip
        assert cli.main(["check", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert (
        cli.main(["check", str(tmp_path / "none.json")]) == 0
    )  # nothing shipped: nothing to miss
    assert "ships no artefact" in capsys.readouterr().out
