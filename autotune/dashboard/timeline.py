"""A traffic study's own figures: the first pass as a timeline (each request's latency, stalls
as spikes, the recompile reasons on hover) and the steady latency per shape, for the chosen
strategy, its nearest rivals on the front, and eager. Data first (:func:`timeline_info`), then
figures that only draw it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from autotune.dashboard.data import StudyData
from autotune.errors import shorten
from autotune.strategy import shapes

SHOWN = 4  # strategies drawn: eager, the pick, and the front's next ones


class Pass(NamedTuple):
    """One strategy's first pass and steady state over the traffic."""

    key: str
    ms: list[float]
    compiles: list[int]
    notes: list[str]  # per request: its recompile reasons, or that it ran eager
    shapes: list[str]  # the steady shapes, "batch x seq (share)"
    steady_ms: list[float]
    buckets: list[dict[str, Any]]  # a bucketed strategy's buckets (autotune.strategy.shapes)


def timeline_info(d: StudyData) -> list[Pass]:
    """Eager, the pick and the front's other points, each with a traffic record."""
    wanted = ["none", *([d.chosen.key] if d.chosen else []), *(p.key for p in d.points)]
    rows = []
    for key in dict.fromkeys(wanted):
        t = d.trial(key)
        record = t.measurement.traffic if t else None
        if not record or len(rows) == SHOWN:
            continue
        notes = [""] * len(record["first_ms"])
        for n, reason in record.get("reasons", []):
            notes[n - 1] += f"recompiled: {shorten(reason, 120)}<br>"
        for n in record.get("ran_eager", []):
            notes[n - 1] += "ran eager<br>"
        steady, s = record.get("steady", []), t.strategy
        rows.append(Pass(
            key, record["first_ms"], record["compiles"], notes,
            [f"{r['batch_size']}x{r['seq_len']} ({r['weight']:.0%})" for r in steady],
            [r["compiled_ms"] for r in steady],
            shapes.shares(s.buckets, list(d.spec.workload.traffic), s.edges),
        ))  # fmt: skip
    return rows


def timeline_figure(rows: list[Pass]) -> Any:
    """Each request's latency in arrival order, log scale: a compile is a spike."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in rows:
        x = list(range(1, len(r.ms) + 1))
        text = [f"request {n}: {ms:.1f} ms, {c} graphs compiled<br>{note}"
                for n, ms, c, note in zip(x, r.ms, r.compiles, r.notes, strict=True)]  # fmt: skip
        hover = "%{text}<extra>%{fullData.name}</extra>"
        fig.add_trace(go.Scatter(x=x, y=r.ms, mode="lines+markers", name=r.key, text=text,
                                 hovertemplate=hover))  # fmt: skip
    fig.update_layout(title="First pass over the traffic: each request's latency (stalls are "
                      "compiles and recompiles)", xaxis_title="request, in arrival order",
                      yaxis_title="ms (log)", yaxis_type="log", height=420)  # fmt: skip
    return fig


def steady_figure(rows: list[Pass]) -> Any:
    """The steady latency of each traffic shape, per strategy."""
    import plotly.graph_objects as go

    fig = go.Figure([go.Bar(x=r.shapes, y=r.steady_ms, name=r.key) for r in rows])
    fig.update_layout(title="Steady latency per shape (batch x seq, its share of the traffic)",
                      barmode="group", yaxis_title="ms per call", height=380)  # fmt: skip
    return fig


def buckets_figure(rows: list[Pass]) -> Any:
    """Each bucketed strategy's buckets (an auto one's edges too): the share of the traffic
    that falls in each, its padding on hover."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in rows:
        if not r.buckets:
            continue
        x = [f"{b['bucket'][0]}x{b['bucket'][1]}" for b in r.buckets]
        text = [f"bucket {name}: {b['share']:.0%} of the requests, {b['padding']:.0%} padding"
                for name, b in zip(x, r.buckets, strict=True)]  # fmt: skip
        fig.add_trace(go.Bar(x=x, y=[b["share"] for b in r.buckets], name=r.key, text=text,
                             hovertemplate="%{text}<extra>%{fullData.name}</extra>"))  # fmt: skip
    fig.update_layout(title="Buckets (batch x seq edge): the share of the traffic in each, its "
                      "padding on hover", barmode="group", yaxis_title="share of requests",
                      yaxis_tickformat=".0%", height=380)  # fmt: skip
    return fig
