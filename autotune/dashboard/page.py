"""The dashboard's page: one self-contained HTML file (plotly.js inlined, works offline)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from autotune.dashboard import figures
from autotune.dashboard.data import (
    StudyData,
    breakeven_info,
    header_info,
    importance_info,
    issues_info,
    latency_info,
    load,
    parallel_info,
    pareto_info,
    phases_info,
    speedup_info,
)
from autotune.dashboard.timeline import (
    buckets_figure,
    steady_figure,
    timeline_figure,
    timeline_info,
)
from autotune.errors import ConfigError, shorten
from autotune.storage import Store

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:16px}
.card{background:#fff;border:1px solid #ddd;border-radius:8px;padding:10px 14px;min-width:160px}
.card b{display:block;font-size:12px;color:#666;font-weight:normal}
.choice{border-color:#ff7f0e;border-width:2px}
.answer{background:#fff;border:1px solid #ddd;border-radius:8px;padding:8px 14px;
margin-bottom:16px;font-size:14px;line-height:1.5}
.plot{background:#fff;border:1px solid #ddd;border-radius:8px;margin-bottom:16px;padding:4px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
summary{cursor:pointer} pre{white-space:pre-wrap;max-height:320px;overflow:auto;font-size:12px}
"""


def folded(reason: str) -> str:
    """A reason's first line; the whole text (a raw Inductor error fills a screen) folded in a
    ``<details>`` below it."""
    text = reason.strip()
    first = text.splitlines()[0] if text else ""
    short = shorten(first, 200)
    if text == short:
        return f"<div>{html.escape(short)}</div>"
    return (f"<details><summary>{html.escape(short)}</summary>"
            f"<pre>{html.escape(text)}</pre></details>")  # fmt: skip


def _card(label: str, value: Any, extra: str = "") -> str:
    return f'<div class="card {extra}"><b>{html.escape(label)}</b>{html.escape(str(value))}</div>'


def render(d: StudyData, importances: dict[str, float], plotly_src: str | None = None) -> str:
    """The whole page as one HTML string: plotly.js inlined, or loaded from ``plotly_src`` (a
    server that sends it once, for every page)."""
    from plotly.offline import get_plotlyjs

    h = header_info(d)
    counts = ", ".join(f"{n} {s}" for s, n in h.counts.items()) or "none yet"
    eager = "—" if h.eager_ms is None else f"{h.eager_ms:.3f} ms"
    cards = "".join(
        [
            _card("model", h.model),
            _card("workload", h.workload),
            _card("device", h.device),
            _card("torch", h.torch),
            _card("trials", counts),
            _card("eager baseline", eager),
            _card(f"chosen ({h.policy})", h.chosen or "nothing feasible yet", "choice"),
        ]
    )
    drawn = [
        figures.pareto_figure(pareto_info(d)),
        figures.breakeven_figure(breakeven_info(d)),
        figures.speedup_figure(speedup_info(d)),
        figures.latency_figure(latency_info(d)),
        figures.parallel_figure(parallel_info(d)),
        figures.importance_figure(importances),
        figures.phases_figure(phases_info(d)),
    ]
    if d.spec.workload.traffic and (passes := timeline_info(d)):
        drawn[1:1] = [timeline_figure(passes), steady_figure(passes)]
        if any(p.buckets for p in passes):
            drawn.insert(3, buckets_figure(passes))
    plots = "".join(
        '<div class="plot">'
        + f.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"plot-{i}",
            config={"displaylogo": False},
        )
        + "</div>"
        for i, f in enumerate(drawn)
    )
    rows = "".join(
        f"<tr><td>{html.escape(r.key)}</td><td>{html.escape(r.status)}</td>"
        f"<td>{r.breaks}</td><td>{r.recompiles}</td><td>"
        + "".join(folded(x) for x in r.reasons[:6])
        + "</td></tr>"
        for r in issues_info(d)
    )
    table = (
        "<table><tr><th>strategy</th><th>status</th><th>graph breaks</th><th>recompiles</th>"
        f"<th>reasons</th></tr>{rows or '<tr><td colspan=5>none</td></tr>'}</table>"
    )
    script = (f'<script src="{html.escape(plotly_src)}"></script>' if plotly_src
              else f"<script>{get_plotlyjs()}</script>")  # fmt: skip
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>autotune · {html.escape(d.name)}</title>
<style>{_CSS}</style>
<script>window.autotuneErrors=[];window.addEventListener("error",e=>{{
window.autotuneErrors.push(String(e.message));document.documentElement.dataset.errors=
window.autotuneErrors.length;}});</script>
{script}</head>
<body><h1>autotune · {html.escape(d.name)}</h1>
<div class="sub">storage {html.escape(d.storage)}</div>
<div class="cards">{cards}</div>
<div class="answer">{"".join(f"<div>{html.escape(line)}</div>" for line in h.lines)}</div>
{plots}
<h2>Graph breaks, recompiles and failures</h2>{table}
</body></html>
"""


def write(store: Store, study: str, out: str | None = None, policy: str | None = None) -> Path:
    """Render the study's dashboard to ``out`` (default ``dashboards/<study>.html``)."""
    d = load(store, study, policy)
    page = render(d, importance_info(store, study, d.objectives))
    path = Path(out) if out else Path("dashboards") / f"{study}.html"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
    return path
