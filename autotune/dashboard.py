"""The dashboard: one self-contained HTML file that shows which strategy to pick and why.

Each plot's data comes from a pure ``*_info`` function over the stored measurements (testable
on its own); the figure builders below them only draw. plotly.js is inlined, so the page
works offline from ``file://``.
"""

from __future__ import annotations

import html
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.export import Point, candidates, pareto, pick
from autotune.measurement import Measurement
from autotune.store import Store, mask
from autotune.strategy import Strategy

CALLS = [10**e for e in range(0, 9)]  # the break-even plot's x axis, calls made after compiling
MIN_TRIALS_FOR_IMPORTANCE = 6
MAX_ROWS = 40  # per-trial bar and box charts show at most this many rows (the best ones)


def _shown(rows: list, what: str) -> tuple[list, str]:
    """The first MAX_ROWS rows, and a title suffix that says when some were left out."""
    if len(rows) <= MAX_ROWS:
        return rows, ""
    return rows[:MAX_ROWS], f" ({what} {MAX_ROWS} of {len(rows)})"


@dataclass
class Trial:
    """One measured strategy of the study, as the dashboard shows it."""

    key: str
    strategy: Strategy
    measurement: Measurement
    trial_number: int | None

    @property
    def feasible(self) -> bool:
        m = self.measurement
        return m.feasible or (self.key == "none" and m.ok)


@dataclass
class StudyData:
    """Everything the page shows, read once from the store."""

    name: str
    storage: str
    spec: dict[str, Any]
    environment: dict[str, Any]
    trials: list[Trial]
    points: list[Point]
    chosen: Point | None
    policy: str
    counts: dict[str, int] = field(default_factory=dict)


def load(store: Store, study: str, policy: str | None = None) -> StudyData:
    """Read a study: its spec, every measurement, the candidates and the chosen point."""
    row = store.study(study)
    if row is None:
        raise ConfigError(f"no study named {study!r} in {mask(store.url)}")
    trials = [
        Trial(
            r.key,
            Strategy.from_dict(r.payload["strategy"]),
            Measurement.from_dict(r.payload),
            r.trial_number,
        )
        for r in store.measurements(study)
    ]
    exports = store.exports(study)
    policy = policy or (exports[-1].policy if exports else row.spec.get("policy", "knee"))
    points = candidates(store, study, row.spec.get("max_memory_mb"))
    try:
        objectives = tuple(row.spec.get("objectives") or ("compile", "latency"))
        chosen = pick(points, policy, objectives) if points else None
    except Exception:  # a policy no point meets (an impossible latency budget): show none
        chosen = None
    counts: dict[str, int] = {}
    for t in trials:
        status = t.measurement.status
        if status == "ok" and not t.feasible:
            status = "wrong answers"
        counts[status] = counts.get(status, 0) + 1
    return StudyData(
        study, mask(store.url), row.spec, row.environment, trials, points, chosen, policy, counts
    )


# ----- pure data, one function per plot -----


def header_info(d: StudyData) -> dict[str, Any]:
    """The header: what was studied where, trial counts, the baseline and the choice."""
    w = d.spec.get("workload", {})
    baseline = next((t for t in d.trials if t.key == "none"), None)
    eager_ms = (
        baseline.measurement.latency.median_ms
        if baseline and baseline.measurement.latency
        else None
    )
    return {
        "study": d.name,
        "storage": d.storage,
        "model": (d.spec.get("model") or {}).get("name"),
        "workload": f"{w.get('kind')} · batch {w.get('batch_size')} · seq {w.get('seq_len')} · "
        f"{w.get('dtype')}",
        "device": f"{w.get('device')} · {d.environment.get('device_name')}",
        "torch": d.environment.get("torch"),
        "counts": dict(sorted(d.counts.items())),
        "eager_ms": eager_ms,
        "chosen": d.chosen.key if d.chosen else None,
        "policy": d.policy,
    }


def pareto_info(d: StudyData) -> dict[str, Any]:
    """Every feasible point, the front (joined in order), eager, and the chosen point."""
    front = pareto(d.points)
    by_key = {t.key: t for t in d.trials}
    rows = []
    for p in d.points:
        s = by_key[p.key].strategy if p.key in by_key else Strategy.from_dict(p.strategy)
        rows.append(
            {
                "key": p.key,
                "compile_s": p.compile_s,
                "latency_ms": p.latency_ms,
                "granularity": s.granularity,
                "backend": s.backend,
                "speedup": p.speedup,
                "on_front": p in front,
                "hover": hover(by_key.get(p.key)),
            }
        )
    eager = next((p for p in d.points if p.key == "none"), None)
    return {
        "points": rows,
        "front": [(p.compile_s, p.latency_ms, p.key) for p in front],
        "eager": (eager.compile_s, eager.latency_ms) if eager else None,
        "chosen": (d.chosen.compile_s, d.chosen.latency_ms, d.chosen.key) if d.chosen else None,
    }


def breakeven_info(d: StudyData) -> dict[str, Any]:
    """Total time against calls for the front and eager, and where each beats eager."""
    front = pareto(d.points)
    eager = next((p for p in d.points if p.key == "none"), None)
    lines = {p.key: [p.total_s(n) for n in CALLS] for p in front}
    if eager is not None:
        lines.setdefault("none", [eager.total_s(n) for n in CALLS])
    crossings = {}
    for p in front:
        if eager is None or p.key == "none":
            continue
        gain_s = (eager.latency_ms - p.latency_ms) / 1e3
        crossings[p.key] = p.compile_s / gain_s if gain_s > 0 else math.inf
    return {"calls": CALLS, "lines": lines, "crossings": crossings}


def speedup_info(d: StudyData) -> list[tuple[str, float, bool]]:
    """Speedup over eager of each feasible compiled trial, best first, and whether the
    interleaved rounds show it (sign test)."""
    rows = [
        (t.key, t.measurement.speedup or 0.0, t.measurement.gain() != 1.0)
        for t in d.trials
        if t.feasible and t.key != "none"
    ]
    return sorted(rows, key=lambda r: -r[1])


def latency_info(d: StudyData) -> list[tuple[str, list[float]]]:
    """The raw latency samples of each trial that ran (eager first), for box plots."""
    rows = [(t.key, t.measurement.latency.samples_ms) for t in d.trials if t.measurement.latency]
    return sorted(rows, key=lambda r: (r[0] != "none", sorted(r[1])[len(r[1]) // 2]))


def parallel_info(d: StudyData) -> dict[str, list[Any]]:
    """Strategy fields and both objectives, one column per axis, for the trials that ran."""
    ran = [t for t in d.trials if t.measurement.ok and t.measurement.latency]
    return {
        "granularity": [t.strategy.granularity for t in ran],
        "backend": [t.strategy.backend for t in ran],
        "mode": [t.strategy.mode or "-" for t in ran],
        "dynamic": [str(t.strategy.dynamic) for t in ran],
        "fullgraph": [str(t.strategy.fullgraph) for t in ran],
        "compile_s": [t.measurement.compile_s for t in ran],
        "latency_ms": [t.measurement.latency.median_ms for t in ran],  # type: ignore[union-attr]
    }


def phases_info(d: StudyData) -> list[dict[str, float | str]]:
    """Compile time split into dynamo and the backend (inductor's codegen within it)."""
    rows = []
    for t in d.trials:
        ph = t.measurement.phases
        if t.key == "none" or not ph:
            continue
        backend = ph.get("backend_s", 0.0)
        codegen = min(ph.get("codegen_s", 0.0), backend)
        rows.append(
            {
                "key": t.key,
                "dynamo_s": ph.get("dynamo_s", 0.0),
                "backend_s": backend - codegen,
                "codegen_s": codegen,
            }
        )
    return rows


def issues_info(d: StudyData) -> list[dict[str, Any]]:
    """Graph breaks, recompiles and failures, with their reasons, worst first."""
    rows = []
    for t in d.trials:
        m = t.measurement
        g = m.graphs
        if (m.ok and m.feasible and not (g and (g.breaks or g.recompiles))) or t.key == "none":
            continue
        reasons = ([m.reason] if m.reason else []) + (
            g.break_reasons + g.recompile_reasons if g else []
        )
        if m.ok and m.accuracy and not m.accuracy.passed:
            reasons.insert(0, f"wrong answers: {m.accuracy.detail}")
        rows.append(
            {
                "key": t.key,
                "status": "wrong answers" if m.ok and not t.feasible else m.status,
                "breaks": g.breaks if g else 0,
                "recompiles": g.recompiles if g else 0,
                "reasons": reasons,
            }
        )
    return sorted(rows, key=lambda r: (r["status"] == "ok", -r["breaks"] - r["recompiles"]))


def importance_info(store: Store, study: str) -> dict[str, float]:
    """Optuna's parameter importances for latency, once there are enough completed trials."""
    import optuna

    from autotune.trials import quiet_optuna

    quiet_optuna()
    try:
        s = optuna.load_study(study_name=study, storage=store.url)
    except KeyError:  # autotune's tables without Optuna's study (written by hand or a tool)
        return {}
    done = [t for t in s.trials if t.state.name == "COMPLETE" and "repeat_of" not in t.user_attrs]
    if len(done) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PED-ANOVA's reminder that lower is better: it is
            return optuna.importance.get_param_importances(s, target=lambda t: t.values[1])
    except (ValueError, RuntimeError):  # a parameter that never varied, too few trials, ...
        return {}


def hover(t: Trial | None) -> str:
    """The full strategy and its measurements, for a point's hover box."""
    if t is None:
        return ""
    m, s = t.measurement, t.strategy
    lines = [
        f"<b>{s.key}</b>",
        f"mode {s.mode or '-'} · dynamic {s.dynamic} · fullgraph {s.fullgraph}",
    ]
    if m.latency and m.compile_s is not None:
        lines.append(
            f"compile {m.compile_s:.2f} s · latency {m.latency.median_ms:.3f} ms "
            f"(p10 {m.latency.p10_ms:.3f}, p90 {m.latency.p90_ms:.3f})"
        )
    if m.speedup:
        lines.append(f"speedup {m.speedup:.2f}x vs eager in the same process")
    if m.memory:
        lines.append(f"peak memory {m.memory.compiled_peak_mb:.0f} MiB ({m.memory.kind})")
    if m.graphs:
        lines.append(
            f"{m.graphs.count} graphs · {m.graphs.breaks} breaks · "
            f"{m.graphs.recompiles} recompiles"
        )
    if t.trial_number is not None:
        lines.append(f"trial {t.trial_number}")
    return "<br>".join(lines)


# ----- thin figure builders -----

SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "x", "pentagon", "hexagon"]
COLOURS = {"none": "#444444", "full": "#1f77b4", "regional": "#2ca02c", "nested": "#d62728"}


def _empty(fig: Any, text: str) -> Any:
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def pareto_figure(info: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    backends = sorted({p["backend"] for p in info["points"]})
    for g in ("none", "full", "regional", "nested"):
        pts = [p for p in info["points"] if p["granularity"] == g]
        if pts:
            fig.add_trace(
                go.Scatter(
                    x=[p["compile_s"] for p in pts],
                    y=[p["latency_ms"] for p in pts],
                    mode="markers",
                    name=g,
                    hovertext=[p["hover"] for p in pts],
                    hovertemplate="%{hovertext}<extra></extra>",
                    marker={
                        "size": 11,
                        "color": COLOURS[g],
                        "line": {"width": 1, "color": "white"},
                        "symbol": [SYMBOLS[backends.index(p["backend"]) % 8] for p in pts],
                    },
                )
            )
    if info["front"]:
        xs, ys, keys = zip(*info["front"], strict=True)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name="Pareto front",
                text=keys,
                line={"color": "#888", "dash": "dot"},
                hoverinfo="text",
            )
        )
    if info["eager"]:
        fig.add_trace(
            go.Scatter(
                x=[info["eager"][0]],
                y=[info["eager"][1]],
                mode="markers",
                name="eager (reference)",
                hoverinfo="name",
                marker={"symbol": "star", "size": 18, "color": "black"},
            )
        )
    if info["chosen"]:
        fig.add_trace(
            go.Scatter(
                x=[info["chosen"][0]],
                y=[info["chosen"][1]],
                mode="markers",
                name=f"chosen: {info['chosen'][2]}",
                hoverinfo="name",
                marker={
                    "symbol": "circle-open",
                    "size": 28,
                    "color": "#ff7f0e",
                    "line": {"width": 3},
                },
            )
        )
    fig.update_layout(
        title="Pareto front: cold compile time vs median latency",
        xaxis_title="cold compile (s)",
        yaxis_title="median latency (ms)",
    )
    if not info["points"]:
        _empty(fig, "no feasible trial yet")
    return fig


def breakeven_figure(info: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for key, totals in info["lines"].items():
        cross = info["crossings"].get(key)
        label = (
            key
            if cross is None
            else (
                f"{key} (beats eager after {cross:,.0f} calls)"
                if math.isfinite(cross)
                else f"{key} (never beats eager)"
            )
        )
        dash = "dash" if key == "none" else "solid"
        fig.add_trace(
            go.Scatter(
                x=info["calls"], y=totals, mode="lines+markers", name=label, line={"dash": dash}
            )
        )
    fig.update_layout(
        title="Break-even: after how many calls does compiling pay off?",
        xaxis_title="calls after start-up",
        yaxis_title="compile + calls × latency (s)",
        xaxis_type="log",
        yaxis_type="log",
    )
    return fig if info["lines"] else _empty(fig, "no feasible trial yet")


def speedup_figure(rows: list[tuple[str, float, bool]]) -> Any:
    import plotly.graph_objects as go

    rows, more = _shown(rows, "the best")
    fig = go.Figure(
        go.Bar(
            x=[r[1] for r in rows][::-1],
            y=[r[0] for r in rows][::-1],
            orientation="h",
            marker_color=[
                "#bbbbbb" if not r[2] else "#2ca02c" if r[1] >= 1 else "#d62728" for r in rows
            ][::-1],
        )
    )
    fig.add_vline(x=1.0, line_dash="dash", annotation_text="eager")
    fig.update_layout(
        title=f"Speedup vs eager (same process, interleaved; grey: not shown by the rounds){more}",
        xaxis_title="×",
        height=max(320, 26 * len(rows) + 120),
        margin={"l": 360},
    )
    return fig if rows else _empty(fig, "no compiled trial has run yet")


def latency_figure(rows: list[tuple[str, list[float]]]) -> Any:
    import plotly.graph_objects as go

    rows, more = _shown(rows, "the fastest")
    fig = go.Figure(
        [
            go.Box(x=samples, name=key, boxpoints="outliers", orientation="h")
            for key, samples in rows[::-1]
        ]
    )
    fig.update_layout(
        title=f"Latency distribution per trial (raw samples){more}",
        showlegend=False,
        xaxis_title="ms per call",
        height=max(320, 26 * len(rows) + 120),
        margin={"l": 360},
    )
    return fig if rows else _empty(fig, "no trial has run yet")


def parallel_figure(info: dict[str, list[Any]]) -> Any:
    import plotly.graph_objects as go

    dims = []
    for name, values in info.items():
        if name in ("compile_s", "latency_ms"):
            dims.append({"label": name, "values": values})
            continue
        levels = sorted(set(values))
        dims.append(
            {
                "label": name,
                "values": [levels.index(v) for v in values],
                "tickvals": list(range(len(levels))),
                "ticktext": levels,
            }
        )
    latency = info["latency_ms"]
    fig = go.Figure(
        go.Parcoords(
            dimensions=dims,
            line={"color": latency, "colorscale": "Viridis", "showscale": bool(latency)},
        )
    )
    fig.update_layout(title="Strategy fields and objectives (colour: latency)")
    return fig if latency else _empty(fig, "no trial has run yet")


def importance_figure(importances: dict[str, float]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=list(importances.values()), y=list(importances), orientation="h"))
    fig.update_layout(title="Optuna parameter importances for latency", xaxis_title="importance")
    if not importances:
        _empty(fig, f"needs at least {MIN_TRIALS_FOR_IMPORTANCE} completed trials that vary")
    return fig


def phases_figure(rows: list[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    rows, more = _shown(sorted(rows, key=lambda r: r["dynamo_s"] + r["backend_s"]
                               + r["codegen_s"]), "the quickest")  # fmt: skip
    keys = [r["key"] for r in rows]
    fig = go.Figure(
        [
            go.Bar(y=keys, x=[r[f] for r in rows], name=label, orientation="h")
            for f, label in (
                ("dynamo_s", "dynamo"),
                ("backend_s", "backend (AOT, inductor)"),
                ("codegen_s", "inductor codegen"),
            )
        ]
    )
    fig.update_layout(
        title=f"Compile-time breakdown{more}",
        barmode="stack",
        xaxis_title="s",
        height=max(320, 26 * len(rows) + 120),
        margin={"l": 360},
    )
    return fig if rows else _empty(fig, "no compile phases recorded yet")


# ----- the page -----

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:16px}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:10px 14px;min-width:160px}
.card b{display:block;font-size:12px;color:#666;font-weight:normal}
.choice{border-color:#ff7f0e;border-width:2px}
.plot{background:#fff;border:1px solid #ddd;border-radius:8px;margin-bottom:16px;padding:4px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
"""


def _card(label: str, value: Any, extra: str = "") -> str:
    return f'<div class="card {extra}"><b>{html.escape(label)}</b>{html.escape(str(value))}</div>'


def render(d: StudyData, importances: dict[str, float]) -> str:
    """The whole page as one HTML string (plotly.js inlined)."""
    from plotly.offline import get_plotlyjs

    h = header_info(d)
    counts = ", ".join(f"{n} {s}" for s, n in h["counts"].items()) or "none yet"
    eager = "—" if h["eager_ms"] is None else f"{h['eager_ms']:.3f} ms"
    cards = "".join(
        [
            _card("model", h["model"]),
            _card("workload", h["workload"]),
            _card("device", h["device"]),
            _card("torch", h["torch"]),
            _card("trials", counts),
            _card("eager baseline", eager),
            _card(f"chosen ({h['policy']})", h["chosen"] or "nothing feasible yet", "choice"),
        ]
    )
    figures = [
        pareto_figure(pareto_info(d)),
        breakeven_figure(breakeven_info(d)),
        speedup_figure(speedup_info(d)),
        latency_figure(latency_info(d)),
        parallel_figure(parallel_info(d)),
        importance_figure(importances),
        phases_figure(phases_info(d)),
    ]
    plots = "".join(
        '<div class="plot">'
        + f.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"plot-{i}",
            config={"displaylogo": False},
        )
        + "</div>"
        for i, f in enumerate(figures)
    )
    rows = "".join(
        f"<tr><td>{html.escape(r['key'])}</td><td>{html.escape(r['status'])}</td>"
        f"<td>{r['breaks']}</td><td>{r['recompiles']}</td><td>"
        + "<br>".join(html.escape(x) for x in r["reasons"][:6])
        + "</td></tr>"
        for r in issues_info(d)
    )
    table = (
        "<table><tr><th>strategy</th><th>status</th><th>graph breaks</th><th>recompiles</th>"
        f"<th>reasons</th></tr>{rows or '<tr><td colspan=5>none</td></tr>'}</table>"
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>autotune · {html.escape(d.name)}</title>
<style>{_CSS}</style>
<script>window.autotuneErrors=[];window.addEventListener("error",e=>{{
window.autotuneErrors.push(String(e.message));document.documentElement.dataset.errors=
window.autotuneErrors.length;}});</script>
<script>{get_plotlyjs()}</script></head>
<body><h1>autotune · {html.escape(d.name)}</h1>
<div class="sub">storage {html.escape(d.storage)}</div>
<div class="cards">{cards}</div>
{plots}
<h2>Graph breaks, recompiles and failures</h2>{table}
</body></html>
"""


def write(store: Store, study: str, out: str | None = None, policy: str | None = None) -> Path:
    """Render the study's dashboard to ``out`` (default ``dashboards/<study>.html``)."""
    page = render(load(store, study, policy), importance_info(store, study))
    path = Path(out) if out else Path("dashboards") / f"{study}.html"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    return path
