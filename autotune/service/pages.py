"""The service's pages: the index of studies, which follows the storage live (it polls
``/api/studies`` every few seconds), and a study's dashboard, rendered from the store on
request (:mod:`autotune.dashboard`), with plotly.js sent once for every page."""

from __future__ import annotations

import html
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response

from autotune.service import views
from autotune.service.api import Name, study_name
from autotune.service.context import Service
from autotune.service.problems import Refused

POLL_MS = 2000
FOREVER = {"Cache-Control": "public, max-age=31536000, immutable"}  # the URL names the version
COLUMNS = ("study", "model", "workload", "device", "torch", "progress", "live workers", "pick",
           "speedup", "compile", "last activity")  # fmt: skip
_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
tr.done td{color:#555} .live{color:#0a7a0a;font-weight:bold}
"""
# Rows are built with textContent only: a model name or a verdict is never markup.
_SCRIPT = """
const COLUMNS = %s;
function cells(s) {
  const p = s.pick || {};
  const progress = `${s.measured}/${s.budget ?? "?"} measured` +
    (s.deduced ? `, ${s.deduced} deduced` : "") + (s.done ? " (done)" : "");
  const model = s.layers ? `${s.model} (${s.layers} layers)` : s.model;
  return [[s.study, "/studies/" + encodeURIComponent(s.study)], model, s.workload,
    [s.device, s.device_name].filter(Boolean).join(" · "), s.torch || "—", progress,
    String(s.live_workers), p.key || "—", p.speedup == null ? "—" : p.speedup.toFixed(2) + "x",
    p.compile_s == null ? "—" : p.compile_s.toFixed(1) + " s", s.last || "—"];
}
function draw(data) {
  const body = document.getElementById("studies");
  body.replaceChildren(...data.studies.map(s => {
    const tr = document.createElement("tr");
    tr.dataset.study = s.study;
    if (s.done) tr.className = "done";
    cells(s).forEach((value, i) => {
      const td = document.createElement("td");
      if (Array.isArray(value)) {
        const a = document.createElement("a");
        a.href = value[1]; a.textContent = value[0]; td.appendChild(a);
      } else { td.textContent = value ?? "—"; }
      if (COLUMNS[i] === "live workers" && s.live_workers > 0) td.className = "live";
      tr.appendChild(td);
    });
    return tr;
  }));
  const when = new Date().toLocaleTimeString();
  document.getElementById("updated").textContent = `${data.studies.length} studies, ` +
    `updated ${when}`;
  document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
}
async function poll() {
  try {
    const r = await fetch("/api/studies", {cache: "no-store"});
    if (r.ok) draw(await r.json());
    else document.getElementById("updated").textContent = `the service answered ${r.status}`;
  } catch (e) {
    document.getElementById("updated").textContent = "the service cannot be reached";
  }
}
poll();
setInterval(poll, %d);
"""


def _row(s: dict[str, Any]) -> str:
    p = s.get("pick") or {}
    progress = f"{s['measured']}/{s['budget'] if s['budget'] is not None else '?'} measured"
    model = f"{s['model']} ({s['layers']} layers)" if s.get("layers") else s["model"]
    speedup = f"{p['speedup']:.2f}x" if p.get("speedup") is not None else "—"
    compile_s = f"{p['compile_s']:.1f} s" if p.get("compile_s") is not None else "—"
    device = " · ".join(x for x in (s["device"], s.get("device_name")) if x)
    values = [model, s["workload"], device, s.get("torch") or "—", progress,
              str(s["live_workers"]), p.get("key") or "—", speedup, compile_s,
              s.get("last") or "—"]  # fmt: skip
    link = f'<a href="/studies/{html.escape(s["study"])}">{html.escape(s["study"])}</a>'
    cells = "".join(f"<td>{html.escape(str(v))}</td>" for v in values)
    return f'<tr data-study="{html.escape(s["study"])}"><td>{link}</td>{cells}</tr>'


def index_page(service: Service) -> str:
    """The index: the studies as they are now, then kept up to date by the script."""
    rows = views.with_live(service.cache.get("index", lambda: views.summaries(service.store)),
                           service.store)  # fmt: skip
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    script = _SCRIPT % (json.dumps(COLUMNS), POLL_MS)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>autotune · studies</title><style>{_CSS}</style></head>
<body><h1>autotune · studies</h1>
<div class="sub">storage {html.escape(service.shown)} ·
<span id="updated">{len(rows)} studies</span></div>
<table><thead><tr>{head}</tr></thead><tbody id="studies">{"".join(map(_row, rows))}</tbody>
</table><script>{script}</script></body></html>
"""


def study_page(service: Service, name: str, policy: str | None) -> str:
    """A study's dashboard, rendered from the store (again only when the store changed)."""
    from autotune import dashboard
    from autotune.choice.objectives import parse_policy
    from autotune.dashboard.data import importance_info

    if policy is not None:
        parse_policy(policy)

    def render() -> str:
        if service.store.study(name) is None:
            raise Refused(404, f"no study named {name!r}")
        d = dashboard.load(service.store, name, policy)
        shown = importance_info(service.store, name, d.objectives, service.optuna)
        return dashboard.render(d, shown, plotly_src=PLOTLY_PATH)

    return service.cache.get(("page", name, policy), render)


def _plotly_path() -> str:
    from importlib.metadata import version

    return f"/static/plotly-{version('plotly')}.min.js"


PLOTLY_PATH = _plotly_path()


def router(service: Service) -> APIRouter:
    """The HTML routes (kept out of the API's schema)."""
    pages = APIRouter(include_in_schema=False)
    script: list[bytes] = []

    @pages.get("/", response_class=HTMLResponse)
    def index() -> str:
        return index_page(service)

    @pages.get("/studies/{name}", response_class=HTMLResponse)
    def study(name: Name, policy: Annotated[str | None, Query(max_length=64)] = None) -> str:
        return study_page(service, study_name(name), policy)

    @pages.get(PLOTLY_PATH)
    def plotly() -> Response:
        if not script:
            from plotly.offline import get_plotlyjs

            script.append(get_plotlyjs().encode())
        return Response(script[0], media_type="text/javascript", headers=FOREVER)

    return pages
