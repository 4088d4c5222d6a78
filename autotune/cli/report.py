"""Readable text for people: a measurement's summary, and plain tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.choice.verdict import noise_floor
from autotune.cli.text import seconds, table
from autotune.cli.traffic_lines import static_line, traffic_lines
from autotune.errors import shorten
from autotune.start_kinds import BY_NAME, CACHED, LATER
from autotune.trial.measurement import Measurement
from autotune.trial.metrics import LOADED


def load_note(payloads: list[dict[str, Any]]) -> str:
    """A line where trials timed their rounds while other processes took more than
    :data:`autotune.trial.metrics.LOADED` of the CPU: their latency figures were taken under
    load ("" where none was)."""
    timings = [p.get("timings") or {} for p in payloads if not p.get("deduced")]  # measured
    loads = [t.get("others_cpu", 0.0) for t in timings]
    loaded = [x for x in loads if x > LOADED]
    contended = sum(1 for t in timings if t.get("contended"))
    said = (
        [
            f"{len(loaded)} of {len(loads)} trials timed their rounds while other processes "
            f"took {min(loaded):.0%}-{max(loaded):.0%} of the CPU"
        ]
        if loaded
        else []
    )
    if contended:
        said.append(f"{contended} read eager's rounds more than twice its first call "
                    "(contention)")  # fmt: skip
    return f"note: {'; '.join(said)}: their latency figures were taken under load" if said else ""


def summary(m: Measurement) -> str:
    """A few lines a person reads at a glance."""
    s, w = m.strategy, m.workload
    env = m.environment
    name = m.model.name if m.model else "?"
    head = name if w is None else (f"{name} · {w.kind} batch {w.batch_size} seq {w.seq_len} "
                                   f"{w.dtype} on {w.device}")  # fmt: skip
    if w is not None and w.traffic:
        from autotune.traffic import describe

        head = f"{name} · {w.kind} over a traffic of {describe(w.traffic)} {w.dtype} on {w.device}"
        if w.kind == "continuous":
            from autotune.arrivals import describe as arriving

            head += " · " + arriving(w.arrivals, w.rate, w.concurrency, w.slo)
    if env:
        head += f" · torch {env.get('torch')} · {env.get('device_name')}"
    regions = f"   ({m.regions} compiled regions)" if m.regions else ""
    lines = [head, f"strategy   {s.key}{regions}", f"status     {m.status}"]
    if not m.ok:
        lines.append(f"reason     {m.reason}")
        return "\n".join(lines)
    phases = ", ".join(
        f"{k.removesuffix('_s')} {seconds(v)}"
        for k, v in m.phases.items()
        if k in ("dynamo_s", "inductor_s", "codegen_s", "backward_s")
    )
    first = "eager's first pass" if w is not None and w.kind == "continuous" else (
        "eager first call")  # fmt: skip
    lines.append(f"compile    {seconds(m.compile_s)} cold ({first} {seconds(m.eager_first_s)})"
                 + (f"; {phases}" if phases else ""))  # fmt: skip
    lines += starts_lines(m)
    lines += traffic_lines(m)
    continuous = w is not None and w.kind == "continuous"
    if continuous and m.latency and m.eager_latency and m.ttft:
        lat, eag, ttft = m.latency, m.eager_latency, m.ttft
        lines.append(f"served     {lat.median_ms:.3f} ms a request in the server (the median "
                     f"of {len(lat.samples_ms)} passes' means; eager {eag.median_ms:.3f} -> "
                     f"{m.speedup:.2f}x); TTFT p90 {ttft.median_ms:.3f} ms (eager "
                     f"{m.eager_ttft.median_ms if m.eager_ttft else 0:.3f})")  # fmt: skip
    elif m.ttft and m.eager_ttft:
        lines.append(
            f"TTFT       {m.ttft.median_ms:.3f} ms median prefill (eager "
            f"{m.eager_ttft.median_ms:.3f} ms -> {m.eager_ttft.median_ms / m.ttft.median_ms:.2f}x)"
        )
    if continuous:
        pass
    elif m.latency and m.eager_latency and m.ttft:
        lat, eag = m.latency, m.eager_latency
        lines.append(
            f"decode     {lat.median_ms:.3f} ms per token median (p10 {lat.p10_ms:.3f}, p90 "
            f"{lat.p90_ms:.3f}, IQR {lat.iqr_ms:.3f}) over {len(lat.samples_ms)} steps; "
            f"eager {eag.median_ms:.3f} ms -> speedup {m.speedup:.2f}x"
        )
        lines.append(
            f"tokens/s   {m.tokens_per_s:.1f} for the whole generation (eager "
            f"{m.eager_tokens_per_s:.1f})"
        )
        lines += static_line(m)
    elif m.latency and m.eager_latency:
        lat, eag = m.latency, m.eager_latency
        against = (f"eager again {eag.median_ms:.3f} ms -> {noise}" if (noise := noise_floor(m))
                   else f"eager {eag.median_ms:.3f} ms -> speedup {m.speedup:.2f}x")  # fmt: skip
        lines.append(
            f"latency    {lat.median_ms:.3f} ms median (p10 {lat.p10_ms:.3f}, p90 "
            f"{lat.p90_ms:.3f}, IQR {lat.iqr_ms:.3f}) over {len(lat.samples_ms)} calls; " + against
        )
        if (load := m.timings.get("others_cpu", 0.0)) > LOADED:
            lines.append(f"           timed while other processes took {load:.0%} of the CPU: "
                         "these figures were taken under load")  # fmt: skip
    if ratio := m.timings.get("contended"):
        threads = m.timings.get("threads", 0)
        lines.append(f"contended  eager's rounds read {ratio:.1f}x its first call: these figures "
                     f"were taken under contention ({threads:.0f} threads)")  # fmt: skip
    if m.memory:
        lines.append(
            f"memory     peak {m.memory.compiled_peak_mb:.0f} MiB compiled vs "
            f"{m.memory.eager_peak_mb:.0f} MiB eager ({m.memory.kind})"
        )
    if m.graphs:
        g = m.graphs
        lines.append(f"graphs     {g.count} graphs, {g.breaks} breaks, {g.recompiles} recompiles")
        lines += [f"  break    {r}" for r in g.break_reasons[:5]]
        lines += [f"  recompile {r}" for r in g.recompile_reasons[:5]]
        if g.limit_hit:
            lines.append(f"  LIMIT    {g.limit_hit}: the latency is not the compiled latency")
            lines.append(f"  fix      {g.limit_hint}")
        if where := m.without_cuda_graphs:
            lines.append("  NO GRAPHS Inductor ran every graph without CUDA graphs, so it ran as "
                         "plain Inductor:" if where == "all" else
                         f"  NO GRAPHS Inductor ran {where} without CUDA graphs:")  # fmt: skip
            lines += [f"    {r}" for r in g.cudagraph_skipped[:5]]
    if m.accuracy:
        a = m.accuracy
        verdict = "pass" if a.passed else "FAIL: WRONG ANSWERS"
        if m.tokens:
            detail = f" ({m.tokens.detail})" if m.tokens.detail else ""
            t = m.tokens
            lines.append(f"tokens     {t.matched} of {t.tokens} greedy tokens as eager's{detail}")
        if a.reference and a.compiled_rmse is not None:
            lines.append(
                f"accuracy   {verdict} against the {a.reference} reference: RMSE "
                f"{a.compiled_rmse:.3g} (eager {a.eager_rmse:.3g}), largest error "
                f"{a.compiled_max:.3g} (eager {a.eager_max:.3g}); vs eager max abs "
                f"{a.max_abs:.2g}"
            )
        else:
            lines.append(f"accuracy   {verdict} (max abs {a.max_abs:.2g} vs eager, rel "
                         f"{a.max_rel:.2g}; atol {a.atol:g}, rtol {a.rtol:g})")  # fmt: skip
        if a.rule:
            lines.append(f"  gate     {a.rule}")
        if a.detail:
            lines.append(f"  detail   {a.detail}")
    return "\n".join(lines)


def _hit(cache: dict[str, int]) -> str:
    hit, miss = cache.get("fxgraph_cache_hit", 0), cache.get("fxgraph_cache_miss", 0)
    return f"FX graph cache {hit} hit{'s' * (hit != 1)}, {miss} miss{'es' * (miss != 1)}"


def starts_lines(m: Measurement) -> list[str]:
    """Every later start beside the cold compile, with its notes (a kind that does not apply
    says why)."""
    later = [m.starts[k] for k in LATER if k in m.starts]
    if not later:
        return []
    measured = [s for s in later  # and a build that failed: its start did not happen
                if s.measured or s.status not in ("ok", "not-applicable", "skipped")]  # fmt: skip
    if not measured:
        names = " = ".join(s.kind for s in later)
        return [f"starts     {names} = cold: {later[0].note}"]
    cold = m.compile_s or 0.0
    parts = []
    for s in measured:
        if s.status != "ok" or s.compile_s is None:
            parts.append(f"{s.kind} {s.status}")
            continue
        ratio = f"{s.compile_s / cold:.2f}x cold, " if cold else ""
        load = f"load {seconds(s.load_s)}, " if s.kind != "warm" else ""
        hits = _hit(s.cache) if s.kind in CACHED else "no compile"
        parts.append(f"{s.kind} {seconds(s.compile_s)} ({ratio}{load}{hits})")
    size = (m.artifact or {}).get("bytes")
    artefact = f"; artefact {size / 2**20:.2f} MiB" if size else ""
    lines = ["starts     " + "; ".join(parts) + artefact]
    return lines + [f"  {s.kind:<8} {s.note}" for s in later if s.note]


def front_table(front: Sequence[Any], chosen: str, starts: Sequence[str] = ()) -> str:
    """The Pareto front as a table, the chosen strategy marked; a generate study shows TTFT
    and tokens/s, and its latency is per decoded token; a continuous one with an SLO its
    goodput; each later start of ``starts`` gets a column."""
    generate = any(p.ttft_ms is not None for p in front)
    good = any(p.goodput is not None for p in front)
    later = [k for k in LATER if k in starts]
    rows = []
    for p in front:
        speedup = f"{p.speedup:.2f}x" + ("" if p.significant or p.key == "none" else " (n.s.)")
        row = [("* " if p.key == chosen else "  ") + p.key, f"{p.compile_s:.2f} s"]
        row += [f"{p.start_s(k):.2f} s" for k in later] + [f"{p.latency_ms:.3f} ms"]
        if generate:
            row += ["—" if p.ttft_ms is None else f"{p.ttft_ms:.1f} ms",
                    "—" if p.tokens_per_s is None else f"{p.tokens_per_s:.1f}"]  # fmt: skip
        if good:
            row.append("—" if p.goodput is None else f"{p.goodput:.2f} req/s")
        flags = (" LIMIT" if p.limit_hit else "") + (
            "" if not p.no_graphs else " NO GRAPHS" if p.no_graphs == "all" else " SOME GRAPHS"
        )
        row += [speedup + flags,
                "—" if p.memory_mb is None else f"{p.memory_mb:.0f} MiB"]  # fmt: skip
        rows.append(tuple(row))
    served = any(p.per == "request" for p in front)  # a continuous study's
    speed = ["latency"]
    if generate:
        speed = (["in server / request", "TTFT p90", "tokens/s"] if served
                 else ["decode / token", "TTFT", "tokens/s"])  # fmt: skip
    speed += ["goodput"] * good
    labels = [BY_NAME[k].label for k in ("cold", *later)]
    header = ("  strategy", *labels, *speed, "speedup", "peak memory")
    note = (
        "latency: the eager baseline over each trial's speedup, measured interleaved with eager "
        "in the trial's own process;\n(n.s.): the rounds did not show that speedup (sign test), "
        "so it counts as none"
    )
    if generate:
        note += (";\nTTFT and tokens/s: the eager baseline's, over each trial's own ratio to its "
                 "interleaved eager, on the same scale")  # fmt: skip
    if good:
        note += (";\ngoodput: requests a second that met the SLO, as measured in the trial's "
                 "median pass (eager's own pass for eager)")  # fmt: skip
    if any(p.no_graphs == "all" for p in front):
        note += ";\nNO GRAPHS: Inductor fell back from CUDA graphs, so it ran as plain Inductor"
    if any(p.no_graphs not in ("", "all") for p in front):
        note += (";\nSOME GRAPHS: Inductor fell back from CUDA graphs in some regions (autotune "
                 "show says which and why)")  # fmt: skip
    if any(p.limit_hit for p in front):
        note += ";\nLIMIT: dynamo hit its recompile limit and ran part of the model eager, so "
        note += "that latency is not the compiled one (autotune measure says which blocks)"
    return table(header, rows) + "\n" + note


def trials_table(rows: Sequence[Any], excluded: Sequence[Any]) -> str:
    """Every stored strategy of a study: its verdict, cold compile, speedup, and why it was
    left out (``autotune show``). The eager baseline's "speedup" is eager timed against itself:
    it shows as the noise floor, not as a result."""
    why = {e.key: (e.why, e.detail) for e in excluded}
    lines = []
    for row in rows:
        m = Measurement.from_dict(row.payload)
        reason, detail = why.get(row.key, ("", ""))
        if reason.startswith("failed: ") and detail.startswith(
            reason.removeprefix("failed: ").split("…")[0]
        ):  # a failure no label names: its message and place are in the why column
            reason = "failed"
        state = reason or ("eager baseline" if row.key == "none" else "candidate")
        if m.deduced:
            state += f" ({m.deduced})"
        if (where := m.without_cuda_graphs) and m.graphs:  # which graphs, and the first why
            state += f" (without CUDA graphs: {where})"
            detail = detail or next(iter(m.graphs.cudagraph_skipped), "")
        speedup = f"{m.speedup:.2f}x" if m.speedup else "—"
        if row.key == "none" and m.speedup and not detail:
            speedup = f"noise ±{abs(m.speedup - 1):.1%}"
            detail = f"{noise_floor(m)}: the noise of every speedup here, not a result"
        lines.append((row.key, state, seconds(m.compile_s), speedup, shorten(detail, 160)))
    return table(("strategy", "verdict", "cold compile", "speedup", "why"), lines)
