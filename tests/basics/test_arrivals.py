"""An arrival traffic (autotune/arrivals.py, and the continuous workload that holds it): a file's
arrivals, the short forms --rate and --concurrency, the SLO, and each refusal in one line."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from autotune import arrivals
from autotune.cli import main
from autotune.errors import ConfigError
from autotune.traffic import DEFAULT_REQUESTS
from autotune.workload import Workload, describe

ROOT = Path(__file__).resolve().parents[2]
GOOD = [  # (arrival_s, prompt, answer)
    (0.0, 12, 4), (0.25, 40, 9), (0.25, 7, 16), (1.5, 60, 2),
]  # fmt: skip


def continuous(**given: object) -> Workload:
    return Workload(kind="continuous", **given)  # type: ignore[arg-type]


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def test_a_good_file_reads_the_same_as_json_lines_and_as_csv(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps({"arrival_s": a, "prompt_tokens": p,
                                         "completion_tokens": n, "user": "x"}) + "\n"
                             for a, p, n in GOOD))  # fmt: skip
    csv = tmp_path / "t.csv"
    csv.write_text(
        "arrival_s,seq_len,new_tokens\n" + "".join(f"{a},{p},{n}\n" for a, p, n in GOOD)
    )
    w, c = continuous(traffic=str(jsonl)), continuous(traffic=str(csv))
    assert w == c
    assert w.traffic == tuple((1, p) for _, p, _ in GOOD)
    assert w.answers == tuple(n for *_, n in GOOD) and w.new_tokens == 16
    assert w.arrivals == (0.0, 0.25, 0.25, 1.5) and w.rate is w.concurrency is None
    assert Workload.from_dict(json.loads(json.dumps(w.to_dict()))) == w
    assert continuous(traffic=str(csv), requests=2).arrivals == (0.0, 0.25)  # the first N
    assert Workload(kind="generate", traffic=str(csv)).arrivals == ()  # its columns left alone


BAD = [  # (rows of a JSON lines file, the line refused, what the line says)
    ([{"arrival_s": 0.0}, {"arrival_s": 2.0}, {"arrival_s": 1.0}], 3, "arrival order"),
    ([{"arrival_s": 0.0}, {"arrival_s": -1.0}], 2, "at least 0"),
    ([{"arrival_s": -0.5}], 1, "at least 0"),
    ([{"arrival_s": "soon"}], 1, "at least 0"),
    ([{"arrival_s": 0.0}, {}, {"arrival_s": 1.0}], 2, "no arrival"),
    ([{"arrival_s": 0.0}, {"arrival_s": None}], 2, "no arrival"),
    ([{"timestamp": "2023-11-16 18:15:46"}, {"timestamp": "yesterday"}], 2, "neither ISO 8601"),
    ([{"timestamp": "2023-11-16 18:15:46"}, {"timestamp": "2023-11-16 18:15:45"}], 2, "order"),
    ([{"arrival_s": 0.0}, {"timestamp": 1.0}], 2, "one spelling"),
    ([{"arrival_s": 0.0, "timestamp": 1.0}], 1, "two spellings"),
    ([{"arrival_s": 0.0}, {"arrival_s": 1.0, "new_tokens": None}], 2, "no answer"),
    ([{"arrival_s": 0.0, "batch_size": 2}], 1, "one sequence"),
]


@pytest.mark.parametrize(("rows", "line", "needle"), BAD)
def test_each_bad_row_is_refused_in_one_line_that_names_it(
    rows: list[dict[str, object]], line: int, needle: str, tmp_path: Path
) -> None:
    answered = [{"seq_len": 8, "new_tokens": 4, **row} for row in rows]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n"
                            for r in answered))  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        continuous(traffic=str(path))
    text = one_line(exc)
    assert f"--traffic {path} line {line}:" in text and needle in text, text
    fixed = [{"arrival_s": float(i), "seq_len": 8, "new_tokens": 4} for i in range(len(rows))]
    path.write_text("".join(json.dumps(r) + "\n" for r in fixed))
    assert len(continuous(traffic=str(path)).arrivals) == len(rows)  # the good side passes


def test_a_csv_row_missing_its_arrival_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,seq_len,new_tokens\n0,8,4\n0.5,8,4\n,8,4\n")
    with pytest.raises(ConfigError) as exc:
        continuous(traffic=str(path))
    assert "line 4: no arrival" in one_line(exc)


def test_iso_and_epoch_timestamps_give_the_same_relative_arrivals(tmp_path: Path) -> None:
    start = datetime(2023, 11, 16, 18, 15, 46, 680590, tzinfo=UTC)
    gaps = (0.0, 0.5, 0.5, 3.25, 10.000001)
    stamps = [start + timedelta(seconds=g) for g in gaps]
    spelled = {
        "space": [s.strftime("%Y-%m-%d %H:%M:%S.%f") for s in stamps],  # no zone: UTC
        "t-z": [s.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for s in stamps],
        "offset": [s.astimezone(timezone(timedelta(hours=-8))).isoformat() for s in stamps],
        "epoch": [s.timestamp() for s in stamps],
        "epoch-text": [str(s.timestamp()) for s in stamps],
    }
    found = {}
    for name, values in spelled.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"timestamp": v, "seq_len": 8, "new_tokens": 4}) + "\n"
                                for v in values))  # fmt: skip
        found[name] = continuous(traffic=str(path)).arrivals
    assert all(a == gaps for a in found.values()), found
    azure = tmp_path / "azure.csv"  # as Azure's LLM inference trace spells it
    azure.write_text("TIMESTAMP,prompt_tokens,completion_tokens\n2023-11-16 18:15:46.6805900,"
                     "374,44\n2023-11-16 18:15:50.0005900,396,109\n")  # fmt: skip
    assert continuous(traffic=str(azure)).arrivals == (0.0, 3.32)


def test_poisson_arrivals_are_seeded_and_come_at_the_rate() -> None:
    drawn = arrivals.poisson(2000, 40.0)
    assert drawn == arrivals.poisson(2000, 40.0) != arrivals.poisson(2000, 40.0, seed=1)
    assert drawn[0] == 0.0 and list(drawn) == sorted(drawn)
    gaps = [b - a for a, b in itertools.pairwise(drawn)]
    assert abs(statistics.mean(gaps) - 1 / 40) < 0.1 / 40
    w = continuous(rate=40.0, seq_len="4..60", new_tokens="4..16", requests=2000)
    assert w == continuous(rate=40.0, seq_len="4..60", new_tokens="4..16", requests=2000)
    assert w.arrivals == drawn and len(w.traffic) == len(w.answers) == 2000
    assert {b for b, _ in w.traffic} == {1} and 4 <= min(w.answers) <= max(w.answers) <= 16
    # the prompts are what a generate traffic of the same spreads draws
    g = Workload(kind="generate", seq_len="4..60", new_tokens="4..16", requests=2000)
    assert (g.traffic, g.answers) == (w.traffic, w.answers)
    one = continuous(rate=2.0, seq_len=32, new_tokens=8)
    assert one.traffic == ((1, 32),) * DEFAULT_REQUESTS and one.answers == (8,) * DEFAULT_REQUESTS


def test_a_closed_loop_has_no_arrivals(tmp_path: Path) -> None:
    w = continuous(concurrency=4, seq_len="8..64", requests=10)
    assert w.arrivals == () and w.concurrency == 4 and len(w.traffic) == 10
    plain = tmp_path / "t.csv"  # a file without arrival columns: its prompts, looped closed
    plain.write_text("seq_len,new_tokens\n8,4\n16,5\n")
    assert continuous(traffic=str(plain), concurrency=2).traffic == ((1, 8), (1, 16))
    assert continuous(traffic=str(plain), rate=2.0).arrivals == arrivals.poisson(2, 2.0)
    assert Workload.from_dict(w.to_dict()) == w


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({}, "needs its arrivals"),
        ({"rate": 2.0, "concurrency": 2}, "not both"),
        ({"traffic": "timed", "rate": 2.0}, "drop --rate"),
        ({"traffic": "timed", "concurrency": 2}, "drop --concurrency"),
        ({"traffic": "plain"}, "needs its arrivals"),
        ({"rate": 2.0, "batch_size": 2}, "one sequence"),
        ({"rate": 2.0, "stop": "eos"}, "--stop and --sampling"),
        ({"rate": 2.0, "sampling": "sample"}, "--stop and --sampling"),
        ({"rate": 2.0, "new_tokens": 1}, "at least 2"),
        ({"rate": 0.0}, "above 0"),
        ({"concurrency": 0}, "at least 1"),
        ({"concurrency": 2, "arrivals": (0.0,)}, "a closed loop has none"),
        ({"rate": 2.0, "seq_len": 8, "requests": 2, "arrivals": (0.0, -1.0)}, "in order"),
    ],
)
def test_a_continuous_workload_takes_exactly_one_source(
    given: dict[str, object], needle: str, tmp_path: Path
) -> None:
    (tmp_path / "timed").write_text('{"arrival_s": 0, "seq_len": 8, "new_tokens": 4}\n')
    (tmp_path / "plain").write_text('{"seq_len": 8, "new_tokens": 4}\n')
    if "traffic" in given:
        given = {**given, "traffic": str(tmp_path / str(given["traffic"]))}
    with pytest.raises(ConfigError) as exc:
        continuous(**given)
    assert needle in one_line(exc)


@pytest.mark.parametrize("given", [{"rate": 2.0}, {"concurrency": 2}, {"slo": "ttft=1s"},
                                   {"arrivals": (0.0,)}])  # fmt: skip
@pytest.mark.parametrize("kind", ["inference", "generate", "train"])
def test_rate_concurrency_and_slo_are_the_continuous_workloads(
    given: dict[str, object], kind: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        Workload(kind=kind, **given)  # type: ignore[arg-type]
    assert "are the continuous workload's" in one_line(exc)


def test_an_slo_reads_in_ms_or_s_and_anything_else_is_one_line() -> None:
    assert arrivals.slo("ttft=500ms,tpot=50ms") == (500.0, 50.0)
    assert arrivals.slo("ttft=0.5s") == (500.0, None)
    assert arrivals.slo(" tpot = 20ms ") == (None, 20.0) and arrivals.slo("") == (None, None)
    for bad, needle in [("ttft=500", "ms or s"), ("ttfb=5ms", "ttfb is no target"),
                        ("ttft=5ms,ttft=6ms", "given twice"), ("ttft=0ms", "above 0"),
                        ("fast", "ms or s"), ("ttft=-5ms", "ms or s")]:  # fmt: skip
        with pytest.raises(ConfigError) as exc:
            arrivals.slo(bad)
        assert needle in one_line(exc) and exc.value.args[0].startswith("--slo = "), bad
    w = continuous(rate=2.0, slo="ttft=500ms,tpot=50ms")
    assert w.slo == "ttft=500ms,tpot=50ms" and Workload.from_dict(w.to_dict()) == w


def test_a_continuous_workload_names_its_arrivals(tmp_path: Path) -> None:
    at_rate = continuous(rate=40.0, seq_len="4..60", requests=12, slo="ttft=1s")
    loop = continuous(concurrency=4, seq_len="4..60", requests=12)
    assert at_rate.slug().startswith("continuous-rate40-traffic12-")
    assert loop.slug().startswith("continuous-c4-traffic12-")
    assert "Poisson arrivals at 40/s" in describe(at_rate) and "SLO ttft=1s" in describe(at_rate)
    assert "closed loop of 4 in flight" in describe(loop)
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "seq_len": 8}\n{"arrival_s": 2.5, "seq_len": 9}\n')
    from_file = continuous(traffic=str(path), new_tokens=4)
    assert from_file.slug().startswith("continuous-traffic2-")
    assert "arrivals over 2.5 s" in describe(from_file)
    path.write_text('{"arrival_s": 0, "seq_len": 8}\n{"arrival_s": 0.5, "seq_len": 9}\n')
    assert continuous(traffic=str(path), new_tokens=4).slug() != from_file.slug()  # sooner
    view = at_rate.at((1, 7))  # one request's inputs: a generate request's
    assert (view.kind, view.seq_len, view.traffic, view.arrivals) == ("generate", 7, (), ())


def test_a_bad_arrival_file_through_the_real_cli_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"arrival_s": 1, "seq_len": 8, "new_tokens": 4}\n'
                   '{"arrival_s": 0, "seq_len": 8, "new_tokens": 4}\n')  # fmt: skip
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}  # this checkout's autotune
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:tiny_llama",
         "--workload", "continuous", "--traffic", str(bad), "--no-progress"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "line 2: arrives 1 s before the row above it" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "studies").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--rate", "5"], "are the continuous workload's"),
        (["--workload", "continuous"], "needs its arrivals"),
        (["--workload", "continuous", "--rate", "5", "--slo", "ttft=5"], "ms or s"),
        (["--workload", "continuous", "--rate", "fast"], "invalid float value"),
    ],
)
def test_a_search_refuses_a_bad_continuous_command_in_one_line(
    argv: list[str], needle: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["search", "--model", "tests.models:tiny_llama", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert "Traceback" not in err and not (in_tmp / "studies").exists()
