"""Traffic: many shapes, measured as a server meets them (autotune/traffic/,
trial/scenarios/traffic_trial.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import autotune
from autotune.catalog import ModelRef
from autotune.choice.selection import Point
from autotune.cli import main
from autotune.errors import ConfigError
from autotune.search.deduction import equivalents
from autotune.ship.export import export
from autotune.storage import Store
from autotune.strategy import Strategy
from autotune.strategy.space import Space
from autotune.trial import metrics
from autotune.trial.parent import measure
from autotune.workload import Settings, Workload
from tests import models
from tests.helpers import point

LLAMA = ModelRef("tests.models:tiny_llama")
# 12 lengths, past torch's recompile limit (8) for a static compile of each
LENGTHS = "8,12,16,20,24,28,32,40,48,56,64,72"
pytestmark = pytest.mark.xdist_group("traffic")  # one worker: the trials fixture runs once
QUICK = Settings(iters=4, warmup=1, starts=("cold",), timeout_s=300)


def test_a_traffic_file_reads_as_json_lines_or_csv(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"seq_len": 16}\n{"batch_size": 2, "seq_len": 33, "user": "x"}\n')
    csv = tmp_path / "t.csv"
    csv.write_text("batch_size,seq_len\n1,16\n2,33\n")
    assert Workload(traffic=str(jsonl)).traffic == Workload(traffic=str(csv)).traffic == (
        (1, 16), (2, 33))  # fmt: skip
    w = Workload(traffic=str(jsonl))
    assert (w.batch_size, w.seq_len) == (1, 16)  # its most frequent shape, first come first
    assert Workload.from_dict(w.to_dict()) == w
    assert "traffic" not in Workload().to_dict()  # a one-shape study's identity is as it was


def test_a_long_log_is_read_whole_and_one_past_the_limit_is_refused(tmp_path: Path) -> None:
    """A 12,000-line log lost its last 2,000 requests without a word (here its only long
    shape): the traffic was cut at 10,000. Now all are read; past the limit, one line."""
    from autotune.traffic import files as traffic_file

    log = tmp_path / "t.csv"
    log.write_text("seq_len\n" + "16\n" * 11_999 + "512\n")
    w = Workload(traffic=str(log))
    assert len(w.traffic) == 12_000 and w.traffic[-1] == (1, 512)
    assert len(Workload(traffic=str(log), requests=100).traffic) == 100  # the first N, as asked
    huge = tmp_path / "huge.csv"
    huge.write_text("seq_len\n" + "16\n" * (traffic_file.MAX_REQUESTS + 1))
    with pytest.raises(ConfigError, match="100,001 requests, more than the 100,000"):
        Workload(traffic=str(huge))


@pytest.mark.parametrize("text, needle", [
    ('{"seq_len": 16}\n{"seq_len": -3}\n', "line 2: seq_len = -3"),
    ('{"seq_len": 16}\n\n{"seq_len": 8\n', "line 3: not JSON"),
    ('{"batch_size": 2}\n', "line 1: no seq_len"),
    ("batch_size,seq_len\n1,16\n2,x\n", "line 3: seq_len = 'x'"),
    ("", "holds no requests"),
])  # fmt: skip
def test_bad_traffic_is_refused_naming_its_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        Workload(traffic=str(path))


def test_short_forms_draw_the_same_requests_every_time() -> None:
    a, b = Workload(seq_len="16..512", requests=200), Workload(seq_len="16..512", requests=200)
    assert a.traffic == b.traffic and len(a.traffic) == 200
    lengths = [s for _, s in a.traffic]
    assert min(lengths) >= 16 and max(lengths) <= 512
    assert sum(s < 90 for s in lengths) > sum(s > 90 for s in lengths) / 2  # log-uniform
    listed = Workload(seq_len="32,128", batch_size="1,4")
    assert {s for _, s in listed.traffic} == {32, 128} and {b for b, _ in listed.traffic} == {1, 4}
    with pytest.raises(ConfigError, match="low end is above"):
        Workload(seq_len="512..16")


def test_a_malformed_traffic_file_is_one_line_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "traffic.jsonl"
    bad.write_text('{"seq_len": 16}\n{"seq_len": 24}\n{"seq_len": "long"}\n')
    db = tmp_path / "s.db"
    code = main(["search", "--model", "tests.models:tiny_llama", "--traffic", str(bad),
                 "--storage", f"sqlite:///{db}", "--trials", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "line 3" in err, err
    assert "Traceback" not in err and not db.exists()


def test_a_traffic_beyond_the_models_positions_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["search", "--model", "gpt2", "--layers", "1", "--seq-len", "16,2048",
                 "--storage", f"sqlite:///{tmp_path}/s.db"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "exceeds gpt2's 1024 positions" in err and "traffic request" in err
    assert main(["search", "--model", "toy-64", "--seq-len", "16,32"]) == 2
    assert "does not apply" in capsys.readouterr().err


def test_a_generate_request_past_the_model_s_positions_is_refused_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpt2 has 1,024 positions: a prompt of 32 and 1,100 new tokens ran 77 s, then failed in
    the embedding. Now one line, before anything runs, for one request and for a traffic; 992
    new tokens fit."""
    db = tmp_path / "s.db"
    for flags, said in ((["--new-tokens", "1100"], "the request: seq_len 32 and new_tokens "
                         "1100 make 1132 positions, past gpt2's 1024"),
                        (["--seq-len", "16,64", "--new-tokens", "1000"], ": seq_len 64 and "
                         "new_tokens 1000 make 1064 positions")):  # fmt: skip
        code = main(["search", "--model", "gpt2", "--layers", "1", "--workload", "generate",
                     *flags, "--storage", f"sqlite:///{db}"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
        assert not db.exists()
    from autotune.catalog import check

    check(ModelRef("gpt2"), Workload(kind="generate", seq_len=32, new_tokens=992))


@pytest.mark.parametrize("row", ['{"seq_len": 8, "new_tokens": 0}', '{"seq_len": 8, '
                                 '"new_tokens": 1}', '{"seq_len": 8, "new_tokens": 4, '
                                 '"output_tokens": 4}'])  # fmt: skip
def test_a_traffic_row_s_answer_follows_one_rule_and_one_spelling(tmp_path: Path,
                                                                   row: str) -> None:  # fmt: skip
    """0 new tokens said "at least 1" and 1 said "at least 2"; a row with two spellings of its
    answer took one silently. Now one rule, said once, and two spellings refused."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"seq_len": 8, "new_tokens": 4}\n' + row + "\n")
    with pytest.raises(ConfigError) as caught:
        Workload(kind="generate", traffic=str(path))
    said = str(caught.value)
    assert "line 2" in said, said
    if "output_tokens" in row:
        assert "both new_tokens and output_tokens" in said and "give one" in said
    else:
        assert "expected a whole number of at least 2: the prefill gives the first token" in said
    path.write_text('{"seq_len": 8, "new_tokens": 4}\n{"seq_len": 8, "new_tokens": 2}\n')
    assert Workload(kind="generate", traffic=str(path)).answers == (4, 2)


# A few rows of each published LLM serving trace, as its file spells them
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.2646720,879,162\n")  # fmt: skip
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,251,1338,Conversation log\n"
            "118,GPT-4,417,276,693,API log\n")  # fmt: skip
MOONCAKE = "".join(json.dumps(row) + "\n" for row in (
    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14, 15]},
    {"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28]},
    {"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]},
))  # fmt: skip
TRACES = {  # (file, text, each request's prompt and answer)
    "azure": ("trace.csv", AZURE, ((374, 44), (396, 109), (879, 162))),
    "burstgpt": ("BurstGPT_1.csv", BURSTGPT, ((472, 18), (1087, 251), (417, 276))),
    "mooncake": ("trace.jsonl", MOONCAKE, ((6755, 500), (7319, 490), (7234, 794), (655, 52))),
}


def test_a_column_reads_in_any_case_and_spelling_of_its_words() -> None:
    from autotune.traffic.files import column

    for name, read in [("ContextTokens", "context_tokens"), ("Request tokens", "request_tokens"),
                       ("input-length", "input_length"), ("TIMESTAMP", "timestamp"),
                       (" Response  Tokens ", "response_tokens"), ("seq_len", "seq_len"),
                       ("arrivalMs", "arrival_ms"), ("Log Type", "log_type")]:  # fmt: skip
        assert column(name) == read, name


@pytest.mark.parametrize("trace", sorted(TRACES))
def test_a_published_trace_reads_as_it_is_published(tmp_path: Path, trace: str) -> None:
    """Azure's ContextTokens, BurstGPT's "Request tokens" and Mooncake's input_length were no
    prompt: "no seq_len". Each trace now reads as published, its lengths and its answers."""
    name, text, lengths = TRACES[trace]
    path = tmp_path / name
    path.write_text(text)
    w = Workload(kind="generate", traffic=str(path))
    assert w.traffic == tuple((1, p) for p, _ in lengths)
    assert w.answers == tuple(n for _, n in lengths)


def test_a_trace_s_failed_request_is_refused_saying_which_rows_to_keep(tmp_path: Path) -> None:
    """BurstGPT logs a failed request with Response tokens 0: no answer to replay. One line
    names the row, the file's own column, and the rows to keep."""
    path = tmp_path / "BurstGPT_1.csv"
    path.write_text(BURSTGPT + "130,ChatGPT,1200,0,1200,Conversation log\n")
    with pytest.raises(ConfigError) as caught:
        Workload(kind="generate", traffic=str(path))
    said = str(caught.value)
    assert "\n" not in said and f"--traffic {path} line 5: Response tokens = 0, expected" in said
    assert "keep the rows of at least 2" in said and "BurstGPT_without_fails" in said
    assert len(Workload(kind="generate", traffic=str(path), requests=3).traffic) == 3


def test_requests_takes_the_first_n_of_a_file_past_the_limit(tmp_path: Path) -> None:
    """A week of Azure's 2024 trace is millions of rows: refused as more than a study holds,
    and so it still was with --requests N, which the refusal named as the fix. Now the first
    N are read, and the rows after them are not."""
    from autotune.traffic.files import MAX_REQUESTS

    huge = tmp_path / "week.csv"
    huge.write_text("ContextTokens,GeneratedTokens\n" + "16,4\n" * (MAX_REQUESTS + 1) + "x,y\n")
    w = Workload(kind="generate", traffic=str(huge), requests=5)
    assert w.traffic == ((1, 16),) * 5 and w.answers == (4,) * 5


def test_the_space_opens_buckets_and_marks_only_under_a_traffic() -> None:
    one = Space().for_traffic(())
    assert one.dimensions == Space().dimensions and "buckets" not in one.to_dict()
    many = Space().for_traffic(Workload(seq_len=LENGTHS).traffic)
    assert many.buckets == ("none", "pow2", "quantiles", "auto")
    assert many.marks == ("none", "seq", "seq-unbacked")
    assert many.stance == ("default", "eager_on_recompile", "eager_then_compile")
    keys = {s.key for s in many.strategies()}
    assert "full/inductor/default/dynamic=false/breaks-ok/buckets=pow2" in keys
    assert not any("marks" in k for k in keys if k.startswith("regional"))  # never seen there


@pytest.fixture(scope="module")
def dynamic_trials() -> dict[str, object]:
    """dynamic=False at one shape; dynamic=False, None, and False under the stance
    eager_on_recompile over a traffic of 12 lengths."""
    one, many = Workload(seq_len=16), Workload(seq_len=LENGTHS, requests=24)
    static, auto = (Strategy.create("full", "aot_eager", dynamic=d) for d in (False, None))
    guarded = Strategy.create("full", "aot_eager", dynamic=False, stance="eager_on_recompile")
    return {"one": measure(LLAMA, one, static, QUICK),
            "false": measure(LLAMA, many, static, QUICK),
            "none": measure(LLAMA, many, auto, QUICK),
            "stance": measure(LLAMA, many, guarded, QUICK)}  # fmt: skip


@pytest.mark.slow
def test_dynamic_false_hits_the_recompile_limit_only_under_traffic(dynamic_trials: dict) -> None:
    one, false, auto = dynamic_trials["one"], dynamic_trials["false"], dynamic_trials["none"]
    assert one.ok and not one.limit_hit and one.graphs.count == 1
    # at one shape, dynamic=None compiles exactly as False: the study cannot tell them apart
    auto_key = Strategy.create("full", "aot_eager", dynamic=None).key
    assert auto_key in {
        s.key for s in equivalents(one, Space(backend=("aot_eager",)).strategies())
    }
    assert false.ok and false.limit_hit and false.traffic["ran_eager"]
    assert auto.ok and not auto.limit_hit and not auto.traffic["ran_eager"]
    assert false.graphs.count > auto.graphs.count
    assert false.compile_s > auto.compile_s  # time to ready: every recompile of the first pass
    points = [Point.of(m, None, None) for m in (false, auto)]
    ranked = sorted(points, key=lambda p: p.total_s(10))  # a short life: time to ready rules
    shown = [(p.key, p.compile_s, p.latency_ms) for p in ranked]
    assert ranked[0].key == auto.strategy.key and ranked[1].limit_hit, shown


@pytest.mark.slow
def test_first_pass_counts_agree_with_torchs_own_counters(dynamic_trials: dict) -> None:
    for m in (dynamic_trials["false"], dynamic_trials["none"]):
        t = m.traffic
        assert sum(t["compiles"]) == m.graphs.count  # dynamo's counters["stats"]["unique_graphs"]
        assert len(t["reasons"]) == m.graphs.recompiles  # its compilation metrics' reasons
        assert t["stalls"] == sum(1 for c in t["compiles"] if c) and t["compiles"][0] >= 1
        assert len(t["first_ms"]) == t["requests"] == 24
        assert t["worst_stall_ms"] >= max(t["first_ms"][0] - t["eager_first_ms"][0], 0)
        assert abs(sum(r["weight"] for r in t["steady"]) - 1) < 1e-9


@pytest.mark.slow
def test_eager_on_recompile_compiles_once_and_serves_new_shapes_eager(
    dynamic_trials: dict,
) -> None:
    guarded, false = dynamic_trials["stance"], dynamic_trials["false"]
    assert guarded.ok and guarded.graphs.count == 1 and not guarded.limit_hit
    assert guarded.traffic["stalls"] == 1 and guarded.compile_s < false.compile_s
    requests = guarded.workload.traffic
    served_eager = {n for n, s in enumerate(requests, 1) if s != requests[0]}
    assert set(guarded.traffic["ran_eager"]) == served_eager  # every shape but the first's


def test_unbacked_marks_are_found_where_this_torch_keeps_them() -> None:
    # torch does not export mark_unbacked from torch._dynamo: this fails loudly when it moves
    from autotune.strategy.shapes import unbacked_marker

    assert unbacked_marker() is not None and unbacked_marker().__name__ == "mark_unbacked"


@pytest.mark.slow
def test_a_traffic_studys_dashboard_draws_the_first_pass(dynamic_trials: dict,
                                                          tmp_path: Path) -> None:  # fmt: skip
    from autotune import dashboard

    store = Store(f"sqlite:///{tmp_path}/t.db")
    w = dynamic_trials["false"].workload
    store.add_study(
        "t", {"model": {"name": "toy-64"}, "workload": w.to_dict(), "policy": "amortized:1000"}, {}
    )
    for n, m in enumerate((dynamic_trials["false"], dynamic_trials["none"])):
        store.add_measurement("t", m.strategy.key, n, m.to_dict())
    eager = point(Strategy.create("none"), 0.0, 1.0)
    store.add_measurement("t", "none", 2, {**eager, "workload": w.to_dict(),
                                           "traffic": dynamic_trials["none"].traffic})  # fmt: skip
    text = dashboard.write(store, "t", str(tmp_path / "t.html")).read_text()
    assert "First pass over the traffic" in text and "Steady latency per shape" in text
    assert "recompiled: " in text and "ran eager" in text  # the hover of dynamic=False's spikes
    one = Store(f"sqlite:///{tmp_path}/o.db")
    one.add_study("o", {"model": {"name": "toy-64"}}, {})
    one.add_measurement("o", "none", 0, point(Strategy.create("none"), 0.0, 1.0))
    assert "First pass" not in dashboard.write(one, "o", str(tmp_path / "o.html")).read_text()


@pytest.mark.slow
def test_padding_buckets_pass_the_gate_where_padding_is_safe_and_fail_where_not() -> None:
    many = Workload(seq_len="5,12,20,33", requests=12)  # seeded: all four appear
    bucketed = Strategy.create("full", "aot_eager", buckets="pow2")
    m = measure(LLAMA, many, bucketed, QUICK)  # causal: right padding never reaches a token
    assert m.ok and m.accuracy.passed, m.accuracy
    assert "4 of 4 graphs judged (4 shapes" in m.accuracy.detail  # every bucket, none eager
    quartiles = Strategy.create("full", "aot_eager", buckets="quantiles")
    q = measure(LLAMA, many, quartiles, QUICK)
    assert q.ok and q.accuracy.passed, q.accuracy
    mixed = measure(ModelRef("tests.models:mixing"), many, bucketed, QUICK)
    assert mixed.ok and not mixed.accuracy.passed, mixed.accuracy  # the mean reads the padding
    plain = measure(ModelRef("tests.models:mixing"), many,
                    Strategy.create("full", "aot_eager"), QUICK)  # fmt: skip
    assert plain.accuracy.passed


def test_apply_of_a_bucketed_export_pads_and_compiles_nothing_new_in_a_bucket(
    tmp_path: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path}/b.db")
    store.add_study("b", {"model": {"name": "toy-64"}}, {})
    s = Strategy.create("full", "aot_eager", buckets="pow2")
    store.add_measurement("b", s.key, 0, point(s, 0.0, 1.0))
    path, _, notes = export(store, "b", "fastest", "accelerate", str(tmp_path / "b.json"))
    assert json.loads(path.read_text())["autotune"]["strategy"]["buckets"] == "pow2"
    assert any("buckets" in n for n in notes)  # Accelerate cannot say it
    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    served = autotune.apply(model, path)
    ids = [torch.randint(0, 64, (1, n)) for n in (17, 20, 31, 32)]
    with torch.no_grad():
        first = served(ids[0])
        compiled_once = metrics.compile_counts()[0]
        outs = [served(x) for x in ids[1:]]
        assert metrics.compile_counts()[0] == compiled_once  # 17..32 share the bucket of 32
        assert first.logits.shape[:2] == (1, 17)
        for x, out in zip(ids[1:], outs, strict=True):
            torch.testing.assert_close(out.logits, model(x).logits, atol=1e-4, rtol=1e-4)
        served(torch.randint(0, 64, (1, 33)))  # the next bucket compiles once more
    assert metrics.compile_counts()[0] == compiled_once + 1


def test_quantile_buckets_take_their_edges_from_the_exported_traffic(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/q.db")
    w = Workload(seq_len="10,20,30,40", requests=12)  # quartile edges 10, 20, 30, 40
    store.add_study("q", {"model": {"name": "toy-64"}, "workload": w.to_dict()}, {})
    s = Strategy.create("full", "aot_eager", buckets="quantiles")
    store.add_measurement("q", s.key, 0, point(s, 0.0, 1.0))
    path, _, _ = export(store, "q", "fastest", "accelerate", str(tmp_path / "q.json"))
    torch._dynamo.reset()
    model, _ = models.tiny_llama()
    served = autotune.apply(model, path)
    with torch.no_grad():
        out = served(torch.randint(0, 64, (1, 21)))  # bucket 30
        assert out.logits.shape[:2] == (1, 21)
        compiled_once = metrics.compile_counts()[0]
        served(torch.randint(0, 64, (1, 29)))  # bucket 30 too
        assert metrics.compile_counts()[0] == compiled_once
        served(torch.randint(0, 64, (1, 31)))  # bucket 40 (pow2 would put 21..31 in one)
        assert metrics.compile_counts()[0] == compiled_once + 1
    with pytest.raises(autotune.NotApplicable, match="need the traffic"):
        autotune.apply(model, s)  # a bare strategy carries no traffic
