"""The dashboard's figures: thin Plotly builders over what :mod:`.data` computed, and the
hover text of a point."""

from __future__ import annotations

import html
import math
from typing import Any

from autotune.choice.verdict import noise_floor
from autotune.dashboard.data import (
    MIN_TRIALS_FOR_IMPORTANCE,
    BreakevenInfo,
    LatencyRow,
    ParallelInfo,
    ParetoInfo,
    PhaseRow,
    SpeedupRow,
    Trial,
)
from autotune.errors import shorten
from autotune.start_kinds import LATER

MAX_ROWS = 40  # per-trial bar and box charts show at most this many rows (the best ones)


def _shown(rows: list, what: str) -> tuple[list, str]:
    """The first MAX_ROWS rows, and a title suffix that says when some were left out."""
    if len(rows) <= MAX_ROWS:
        return rows, ""
    return rows[:MAX_ROWS], f" ({what} {MAX_ROWS} of {len(rows)})"


SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "x", "pentagon", "hexagon"]
COLOURS = {"none": "#444444", "full": "#1f77b4", "regional": "#2ca02c", "nested": "#d62728"}


def _empty(fig: Any, text: str) -> Any:
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def hover(t: Trial | None) -> str:
    """The full strategy and its measurements, for a point's hover box (HTML, escaped)."""
    if t is None:
        return ""
    m, s = t.measurement, t.strategy
    lines = [
        f"<b>{html.escape(s.key)}</b>",
        html.escape(
            f"mode {s.mode or '-'} · options {'+'.join(s.options) or 'none'} · "
            f"dynamic {s.dynamic} · fullgraph {s.fullgraph}"
        ),
    ]
    if m.deduced:
        lines.append(html.escape(f"not measured: {m.deduced}"))
    if m.latency and m.compile_s is not None:
        lines.append(
            f"compile {m.compile_s:.2f} s · latency {m.latency.median_ms:.3f} ms "
            f"(p10 {m.latency.p10_ms:.3f}, p90 {m.latency.p90_ms:.3f})"
        )
    if any(m.starts.get(k) for k in LATER):
        costs = " · ".join(f"{k} {m.start_s(k):.2f} s" for k in LATER
                           if m.start_s(k) is not None)  # fmt: skip
        lines.append(f"later starts: {costs or 'not measured'}")
    if m.ttft and m.tokens_per_s:
        lines.append(f"TTFT {m.ttft.median_ms:.1f} ms · {m.tokens_per_s:.1f} tokens/s in the "
                     "trial's own process (latency: per decoded token)")  # fmt: skip
    if noise := noise_floor(m):  # the eager baseline: eager timed against itself
        lines.append(html.escape(noise))
    elif m.speedup:
        lines.append(f"speedup {m.speedup:.2f}x vs eager in the same process")
    if m.graphs and m.graphs.limit_hit:
        lines.append(
            f"<b>{html.escape(shorten(m.graphs.limit_hit, 160))}</b>: not the compiled latency"
        )
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


def pareto_figure(info: ParetoInfo) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    backends = sorted({p.backend for p in info.points})
    for g in ("none", "full", "regional", "nested"):
        pts = [p for p in info.points if p.granularity == g]
        if pts:
            fig.add_trace(
                go.Scatter(
                    x=[p.compile_s for p in pts],
                    y=[p.latency_ms for p in pts],
                    mode="markers",
                    name=g,
                    hovertext=[hover(p.trial) for p in pts],
                    hovertemplate="%{hovertext}<extra></extra>",
                    marker={
                        "size": 11,
                        "color": COLOURS[g],
                        "line": {"width": 1, "color": "white"},
                        "symbol": [SYMBOLS[backends.index(p.backend) % 8] for p in pts],
                    },
                )
            )
    if info.front:
        xs, ys, keys = zip(*info.front, strict=True)
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
    if info.eager:
        fig.add_trace(
            go.Scatter(
                x=[info.eager[0]],
                y=[info.eager[1]],
                mode="markers",
                name="eager (reference)",
                hoverinfo="name",
                marker={"symbol": "star", "size": 18, "color": "black"},
            )
        )
    if info.chosen:
        fig.add_trace(
            go.Scatter(
                x=[info.chosen[0]],
                y=[info.chosen[1]],
                mode="markers",
                name=f"chosen: {info.chosen[2]}",
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
    if not info.points:
        _empty(fig, "no feasible trial yet")
    return fig


def _breakeven_label(key: str, cross: float | None, start: str) -> str:
    if cross is None:
        return key
    if not math.isfinite(cross):
        return f"{key}{start} (never beats eager)"
    return f"{key}{start} (beats eager after {cross:,.0f} calls)"


def breakeven_figure(info: BreakevenInfo) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    curves = [(k, v, info.crossings.get(k), "", "dash" if k == "none" else "solid")
              for k, v in info.lines.items()]  # fmt: skip
    curves += [(k, v, info.warm_crossings.get(k), ", warm start", "dot")
               for k, v in info.warm.items()]  # fmt: skip
    for key, totals, cross, start, dash in curves:
        fig.add_trace(go.Scatter(
            x=info.calls, y=totals, mode="lines+markers",
            name=_breakeven_label(key, cross, start), line={"dash": dash},
        ))  # fmt: skip
    fig.update_layout(
        title="Break-even: after how many calls does compiling pay off? (cold, and warm start)",
        xaxis_title="calls after start-up",
        yaxis_title="start + calls × latency (s)",
        xaxis_type="log",
        yaxis_type="log",
    )
    return fig if info.lines else _empty(fig, "no feasible trial yet")


def speedup_figure(rows: list[SpeedupRow]) -> Any:
    import plotly.graph_objects as go

    rows, more = _shown(rows, "the best")
    fig = go.Figure(
        go.Bar(
            x=[r.speedup for r in rows][::-1],
            y=[r.key for r in rows][::-1],
            orientation="h",
            marker_color=[
                "#bbbbbb" if not r.shown else "#2ca02c" if r.speedup >= 1 else "#d62728"
                for r in rows
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


def latency_figure(rows: list[LatencyRow]) -> Any:
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


def parallel_figure(info: ParallelInfo) -> Any:
    import plotly.graph_objects as go

    dims = []
    for name, values in info._asdict().items():
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
    latency = info.latency_ms
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


def phases_figure(rows: list[PhaseRow]) -> Any:
    import plotly.graph_objects as go

    rows, more = _shown(sorted(rows, key=lambda r: r.dynamo_s + r.backend_s + r.codegen_s),
                        "the quickest")  # fmt: skip
    keys = [r.key for r in rows]
    fig = go.Figure(
        [
            go.Bar(y=keys, x=[getattr(r, f) for r in rows], name=label, orientation="h")
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
