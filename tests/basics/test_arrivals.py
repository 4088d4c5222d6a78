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


def _search_refused(tmp_path: Path, traffic: Path) -> subprocess.CompletedProcess[str]:
    """``autotune search`` over a continuous traffic file, through the real CLI, refused in one
    line with exit 2."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}  # this checkout's autotune
    out = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "search", "--model", "tests.models:tiny_llama",
         "--workload", "continuous", "--traffic", str(traffic), "--no-progress"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    return out


def test_a_bad_arrival_file_through_the_real_cli_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"arrival_s": 1, "seq_len": 8, "new_tokens": 4}\n'
                   '{"arrival_s": 0, "seq_len": 8, "new_tokens": 4}\n')  # fmt: skip
    out = _search_refused(tmp_path, bad)
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


# A few rows of each published LLM serving trace, as its file spells them
AZURE_2023 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
              "2023-11-16 18:15:51.2646720,879,162\n")  # fmt: skip
AZURE_2024 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2024-05-10 00:00:00.009930+00:00,2162,5\n"
              "2024-05-10 00:00:00.018311+00:00,1245,19\n"
              "2024-05-10 00:00:02.509930+00:00,4371,102\n")  # fmt: skip
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,251,1338,Conversation log\n"
            "118,GPT-4,417,276,693,API log\n")  # fmt: skip
MOONCAKE = [
    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14, 15]},
    {"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28]},
    {"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]},
]


def mooncake(tmp_path: Path, stamp: str = "timestamp") -> Path:
    """Mooncake's trace as published (its stamps in ms, under ``timestamp``), or renamed."""
    path = tmp_path / f"mooncake-{stamp}.jsonl"
    rows = [{stamp if k == "timestamp" else k: v for k, v in r.items()} for r in MOONCAKE]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("name", "text", "requests", "expected"),
    [  # (prompt, answer, arrival in seconds from the first row)
        ("azure2023.csv", AZURE_2023, None,
         [(374, 44, 0.0), (396, 109, 4.314579), (879, 162, 4.584082)]),
        ("azure2024.csv", AZURE_2024, None,
         [(2162, 5, 0.0), (1245, 19, 0.008381), (4371, 102, 2.5)]),
        ("BurstGPT_1.csv", BURSTGPT, 2, [(472, 18, 0.0), (1087, 251, 40.0)]),
        ("arrival_ms.jsonl", '{"arrival_ms": 250, "Input Length": 9, "OutputLength": 3}\n'
         '{"arrival_ms": 1500.5, "Input Length": 7, "OutputLength": 4}\n', None,
         [(9, 3, 0.25), (7, 4, 1.5005)]),
    ],
)  # fmt: skip
def test_a_published_trace_s_arrivals_read_in_seconds(
    tmp_path: Path, name: str, text: str, requests: int | None,
    expected: list[tuple[int, int, float]],
) -> None:  # fmt: skip
    """Azure's ContextTokens and GeneratedTokens, BurstGPT's "Request tokens" and seconds from
    its start, were no prompt ("no seq_len"); each now reads as published."""
    path = tmp_path / name
    path.write_text(text)
    w = continuous(traffic=str(path), requests=requests)
    assert w.traffic == tuple((1, p) for p, _, _ in expected)
    assert w.answers == tuple(n for _, n, _ in expected)
    assert w.arrivals == pytest.approx([a for *_, a in expected], abs=1e-6)


def test_mooncake_s_milliseconds_read_under_timestamp_ms(tmp_path: Path) -> None:
    w = continuous(traffic=str(mooncake(tmp_path, "timestamp_ms")))
    assert w.traffic == tuple((1, r["input_length"]) for r in MOONCAKE)
    assert w.answers == tuple(r["output_length"] for r in MOONCAKE)
    assert w.arrivals == (0.0, 0.0, 3.052, 27.482)


def test_arrivals_longer_than_a_trial_replays_are_refused_in_one_line(tmp_path: Path) -> None:
    """Mooncake's stamps are ms under "timestamp", read as seconds: its first 4 requests span
    7.6 hours, and each trial would replay them at least 20 times until its timeout. Refused
    in one line, after --requests cuts the file, naming both fixes."""
    raw = mooncake(tmp_path)
    with pytest.raises(ConfigError) as exc:
        continuous(traffic=str(raw))
    said = one_line(exc)
    assert said.startswith(f"--traffic {raw}: its 4 requests arrive over 27,482 s, longer "
                           "than the 60 s a trial can replay")  # fmt: skip
    assert "--requests 2 takes the first 2, which fit" in said and "timestamp_ms" in said
    assert continuous(traffic=str(raw), requests=2).arrivals == (0.0, 0.0)  # the first N fit
    with pytest.raises(ConfigError) as exc:
        continuous(traffic=str(raw), requests=3)
    assert "its 3 requests arrive over 3,052 s" in one_line(exc)
    burst = tmp_path / "BurstGPT_1.csv"
    burst.write_text(BURSTGPT)  # seconds from its start: 113 s, past the limit
    with pytest.raises(ConfigError) as exc:
        continuous(traffic=str(burst))
    assert "arrive over 113 s" in one_line(exc) and "--requests 2 takes" in one_line(exc)
    edge = tmp_path / "edge.jsonl"
    for last, fits in ((arrivals.MAX_SPAN_S, True), (arrivals.MAX_SPAN_S + 0.5, False)):
        edge.write_text('{"arrival_s": 0, "seq_len": 8, "new_tokens": 4}\n'
                        f'{{"arrival_s": {last}, "seq_len": 8, "new_tokens": 4}}\n')  # fmt: skip
        if fits:
            w = continuous(traffic=str(edge))
            stored = {**w.to_dict(), "arrivals": [0.0, 600.0]}  # a study's, as it played them
            assert Workload.from_dict(stored).arrivals == (0.0, 600.0)
        else:
            with pytest.raises(ConfigError, match=r"arrive over 60\.5 s"):
                continuous(traffic=str(edge))
    with pytest.raises(ConfigError) as exc:  # Poisson arrivals at 0.5/s: 48 over ~100 s
        continuous(rate=0.5, seq_len=8, new_tokens=4)
    assert one_line(exc).startswith("--rate 0.5: its 48 requests arrive over")
    assert "a higher --rate, or --requests" in one_line(exc)


def test_a_mooncake_trace_through_the_real_cli_is_one_line(tmp_path: Path) -> None:
    raw = mooncake(tmp_path)
    out = _search_refused(tmp_path, raw)
    assert "arrive over 27,482 s" in out.stderr and "timestamp_ms" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "studies").exists()


def test_a_burstgpt_failure_through_the_cli_is_one_line(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    burst = in_tmp / "BurstGPT_1.csv"
    burst.write_text(BURSTGPT.replace("45,ChatGPT,1087,251,1338", "45,ChatGPT,1087,0,1087"))
    code = main(["search", "--model", "tests.models:tiny_llama", "--workload", "continuous",
                 "--traffic", str(burst), "--requests", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "line 3: Response tokens = 0" in err, err
    assert "keep the rows of at least 2" in err and not (in_tmp / "studies").exists()
