"""The dashboard: its data from real studies, the page in real Chromium, optuna-dashboard."""

from __future__ import annotations

import io
import json
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import optuna
import pytest

from autotune import dashboard
from autotune.cli import main
from autotune.dashboard import data, figures, page
from autotune.search import Search, open_search, run
from autotune.storage import Store
from autotune.strategy import Strategy
from tests.browser import ARTIFACTS, CHROMIUM, chromium, console_errors, rendered_plots
from tests.helpers import S, hand_built, point

PLOTS = 7


def test_data_from_a_real_study(toy_study: Search) -> None:
    d = dashboard.load(toy_study.store, toy_study.name)
    info = data.pareto_info(d)
    assert info.front and info.chosen and info.chosen[2] == d.chosen.key  # type: ignore[union-attr]
    assert info.eager is not None and info.eager[0] == 0.0
    hovers = [(p.key, figures.hover(p.trial)) for p in info.points]
    assert all(key in text and "latency" in text for key, text in hovers)
    header = data.header_info(d)
    assert sum(header.counts.values()) == len(toy_study.store.measurements(toy_study.name))
    assert header.eager_ms and header.torch and header.model == "toy-64"
    samples = dict(data.latency_info(d))
    assert all(len(v) == 3 for v in samples.values())
    speedups = [r.speedup for r in data.speedup_info(d)]
    assert speedups == sorted(speedups, reverse=True)
    assert data.phases_info(d) and all(r.dynamo_s > 0 for r in data.phases_info(d))
    par = data.parallel_info(d)
    assert len(par.compile_s) == len(par.granularity) >= 10


def test_pareto_data_on_a_hand_built_study(tmp_path: Path) -> None:
    """none (0 s, 10 ms), A (1 s, 5 ms) and B (10 s, 2 ms) form the front; C is slower than
    eager and E is dominated by A; D gives wrong answers; the knee is A."""
    d = dashboard.load(hand_built(tmp_path), "hand", "knee")
    info = data.pareto_info(d)
    a, b = S["A"].key, S["B"].key
    assert info.front == [(0.0, 10.0, "none"), (1.0, 5.0, a), (10.0, 2.0, b)]
    assert info.chosen == (1.0, 5.0, a) and info.eager == (0.0, 10.0)
    shown = {p.key: p.on_front for p in info.points}
    assert shown == {"none": True, a: True, b: True, S["C"].key: False, S["E"].key: False}


def test_importances_read_the_latency_objective_wherever_it_stands(in_tmp: Path) -> None:
    """With --objectives latency,compile the latency is values[0], not values[1]."""
    import warnings

    from tests.helpers import fast_spec

    spec = fast_spec(trials=8, sampler="random", objectives="latency,compile",
                     granularity="none,full,regional,nested")  # fmt: skip
    search = open_search(spec, None)
    run(search)
    got = data.importance_info(search.store, search.name, ("latency", "compile"))
    study = optuna.load_study(study_name=search.name, storage=search.store.url)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        latency = optuna.importance.get_param_importances(study, target=lambda t: t.values[0])
        compile_ = optuna.importance.get_param_importances(study, target=lambda t: t.values[1])
    assert got and got == latency and latency != compile_


def test_break_even_crossings_on_a_hand_built_study(tmp_path: Path) -> None:
    d = dashboard.load(hand_built(tmp_path), "hand", "knee")
    info = data.breakeven_info(d)
    # eager 10 ms; A: 1 s to save 5 ms a call; B: 10 s to save 8 ms a call
    assert info.crossings[S["A"].key] == pytest.approx(200)
    assert info.crossings[S["B"].key] == pytest.approx(1250)
    calls = info.calls
    a, eager = info.lines[S["A"].key], info.lines["none"]
    assert all((x < y) == (n > 200) for n, x, y in zip(calls, a, eager, strict=True) if n != 200)
    assert d.chosen is not None and d.chosen.key == S["A"].key


def test_issues_table_shows_failures_breaks_and_wrong_answers(tmp_path: Path) -> None:
    store = hand_built(tmp_path)
    broken = Strategy.create("nested", "aot_eager")
    store.add_measurement("hand", broken.key, 7, {
        **point(broken, 1.0, 1.0), "status": "failed", "latency": None,
        "reason": "Unsupported: data-dependent branch",
    })  # fmt: skip
    breaks = Strategy.create("full", "eager", dynamic=True)
    payload = point(breaks, 0.2, 9.0)
    payload["graphs"] = {"count": 3, "breaks": 2, "break_reasons": ["print() in forward", "x"],
                         "recompiles": 1, "recompile_reasons": ["size of x changed"]}  # fmt: skip
    store.add_measurement("hand", breaks.key, 8, payload)
    rows = {r.key: r for r in data.issues_info(dashboard.load(store, "hand"))}
    assert rows[S["D"].key].status == "wrong answers"
    assert rows[S["D"].key].reasons[0].startswith("wrong answers: ")
    assert rows[broken.key].status == "failed"
    assert rows[broken.key].reasons == ["Unsupported: data-dependent branch"]
    assert (rows[breaks.key].status, rows[breaks.key].breaks, rows[breaks.key].recompiles) == (
        "ok", 2, 1)  # fmt: skip
    assert "print() in forward" in rows[breaks.key].reasons
    assert "size of x changed" in rows[breaks.key].reasons
    assert S["A"].key not in rows and "none" not in rows  # clean trials have no row
    order = list(rows)
    assert order.index(breaks.key) > order.index(broken.key)  # failures first


def test_reasons_fold_and_options_show(tmp_path: Path) -> None:
    store = hand_built(tmp_path)
    raw = "BackendCompilerFailed: inductor raised CppCompileError\n" + "g++ error line\n" * 400
    frozen = Strategy.create("full", "inductor", "default", None, False, ["freezing"])
    store.add_measurement("hand", frozen.key, 7, {
        **point(frozen, 1.0, 1.0), "status": "failed", "reason": raw, "latency": None,
    })  # fmt: skip
    tuned = Strategy.create("regional", "inductor", "default", None, False, ["cpp_wrapper"])
    store.add_measurement("hand", tuned.key, 8, point(tuned, 3.0, 2.0))
    d = dashboard.load(store, "hand")
    html = page.render(d, {})
    summary = "<details><summary>BackendCompilerFailed: inductor raised CppCompileError</summary>"
    assert summary in html and html.count("g++ error line") == 400  # all of it, folded
    assert "options cpp_wrapper" in figures.hover(d.trial(tuned.key))
    assert "cpp_wrapper" in data.parallel_info(d).options
    assert page.folded("one line") == "<div>one line</div>"


def _one_and_many(folder: Path) -> tuple[Store, Store]:
    """A study with only the eager baseline, and one with 200 measured strategies."""
    one = Store(f"sqlite:///{folder}/one.db")
    one.add_study("one", {"model": {"name": "toy-64"}}, {"torch": "t"})
    one.add_measurement("one", "none", 0, point(S["none"], 0.0, 10.0))
    many = Store(f"sqlite:///{folder}/many.db")
    many.add_study("many", {"model": {"name": "toy-64"}}, {"torch": "t"})
    many.add_measurement("many", "none", 0, point(S["none"], 0.0, 10.0))
    grans, backends = ("full", "regional", "nested"), ("inductor", "aot_eager", "eager")
    for i in range(1, 200):
        s = Strategy.create(grans[i % 3], backends[i // 3 % 3], dynamic=i % 2 == 0)
        many.add_measurement("many", f"s{i}", i, point(s, 0.1 * i, 10 - i * 0.04, ok=i % 7 > 0))
    return one, many


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_page_renders_in_real_chromium(toy_study: Search, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page = dashboard.write(toy_study.store, toy_study.name, str(tmp_path / "toy.html"))
    text = page.read_text()
    assert "<script src" not in text and len(text) > 3_000_000  # plotly.js is inlined
    dom, log = chromium(page.as_uri(), ARTIFACTS / "dashboard-toy-64.png")
    assert 'data-errors="' not in dom, "a script error was raised on the page"
    assert console_errors(log) == []
    assert rendered_plots(dom) == PLOTS
    one, many = _one_and_many(tmp_path)
    for store, name in ((one, "one"), (many, "many")):
        page = dashboard.write(store, name, str(tmp_path / f"{name}.html"))
        dom, log = chromium(page.as_uri())  # the DOM is the check; one screenshot is enough
        assert 'data-errors="' not in dom and console_errors(log) == []
        assert rendered_plots(dom) == PLOTS, name


def test_cli_dashboard_and_search_dashboard(in_tmp: Path, capsys) -> None:
    code = main(["search", "--model", "toy-64", "--layers", "2", "--backend", "eager",
                 "--granularity", "none,full", "--dynamic", "none", "--fullgraph", "false",
                 "--iters", "2", "--no-progress", "--dashboard", "--study", "d"])  # fmt: skip
    assert code == 0
    assert (in_tmp / "dashboards" / "d.html").is_file()
    assert main(["dashboard", "--study", "d", "-o", "x.html"]) == 0
    assert "wrote x.html" in capsys.readouterr().out
    assert main(["dashboard", "--study", "missing"]) == 2
    assert "no study named 'missing'" in capsys.readouterr().err


def test_optuna_dashboard_serves_the_study(toy_study: Search) -> None:
    from optuna_dashboard import wsgi

    app = wsgi(toy_study.store.url)

    def get(path: str) -> dict:
        environ: dict = {}
        setup_testing_defaults(environ)
        environ.update(PATH_INFO=path, REQUEST_METHOD="GET", **{"wsgi.input": io.BytesIO()})
        status: list[str] = []
        body = b"".join(app(environ, lambda s, h, *_: status.append(s)))
        assert status[0].startswith("200"), status
        return json.loads(body)

    studies = get("/api/studies")["study_summaries"]
    ours = next(s for s in studies if s["study_name"] == toy_study.name)
    detail = get(f"/api/studies/{ours['study_id']}")
    assert len(detail["trials"]) >= 10
    attrs = [{a["key"]: a["value"] for a in t["user_attrs"]} for t in detail["trials"]]
    assert all("key" in a and "status" in a["autotune"] for a in attrs)


def test_large_studies_keep_per_trial_charts_readable(tmp_path: Path) -> None:
    _, many = _one_and_many(tmp_path)
    d = dashboard.load(many, "many")
    fig = figures.speedup_figure(data.speedup_info(d))
    assert len(fig.data[0].y) == figures.MAX_ROWS
    assert f"{figures.MAX_ROWS} of {len(data.speedup_info(d))}" in fig.layout.title.text
