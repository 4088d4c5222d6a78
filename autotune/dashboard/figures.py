"""The dashboard's figures: thin Plotly builders over what :mod:`.data` computed."""

from __future__ import annotations

import math
from typing import Any

from autotune.dashboard.data import MIN_TRIALS_FOR_IMPORTANCE

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
