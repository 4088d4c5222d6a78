"""What a traffic trial's first pass and steady state, its buckets, and a generate trial's
eagers say, in a few lines each (``autotune measure`` and the search's summary)."""

from __future__ import annotations

from autotune.cli.text import seconds
from autotune.strategy import shapes
from autotune.trial.measurement import Measurement


def recordings(t: dict) -> str:
    """The CUDA graphs a first pass recorded, where it recorded any (a stall each)."""
    n = sum(t.get("recorded", []))
    return f", {n} CUDA graphs recorded" if n else ""


def bucket_lines(m: Measurement) -> list[str]:
    """A bucketed strategy's buckets: each one's share of the traffic and its padding; for
    ``auto``, how its edges were chosen and what they were predicted and measured to cost."""
    s, t = m.strategy, m.traffic or {}
    if s.buckets == "none":
        return []
    requests = list(m.workload.traffic) if m.workload else []
    lines = []
    if auto := t.get("auto"):
        cost = f"predicted {auto['predicted']['total_s']:.0f} s"
        if done := auto.get("measured"):
            cost += f", measured {done['total_s']:.0f} s"
        lines.append(f"  buckets  auto edges: batch {', '.join(map(str, auto['edges'][0]))}; seq "
                     f"{', '.join(map(str, auto['edges'][1]))}, chosen by their cost over "
                     f"{auto['lifetime_s'] / 3600:g} h of serving ({cost}; pow2's "
                     f"{auto['pow2']['total_s']:.0f} s), from a pilot's compile price "
                     f"{auto['stall_s']:.2f} s a bucket and latency "
                     f"{auto['model']['base_ms']:.3f} ms + "
                     f"{auto['model']['per_token_ms']:.2e} ms a token")  # fmt: skip
        if auto.get("note"):
            lines.append(f"           {auto['note']}")
    for row in shapes.shares(s.buckets, requests, s.edges):
        b, q = row["bucket"]
        lines.append(f"  bucket   batch {b} seq {q}: {row['share']:.0%} of the requests, "
                     f"{row['padding']:.0%} padding")  # fmt: skip
    return lines


def traffic_lines(m: Measurement) -> list[str]:
    """A traffic's first pass and steady state in a few lines (none at one shape)."""
    t = m.traffic
    if not t:
        return []
    if "continuous" in t:
        return continuous_lines(t["continuous"]) + intervals_lines(t.get("auto"))
    ready, eager = seconds(t["ready_s"]), seconds(t["eager_ready_s"])
    warmed = "" if "prewarmed_s" not in t else f", pre-warmed {seconds(t['prewarmed_s'])}"
    lines = [f"traffic    ready after {ready} (eager {eager}{warmed}); "
             f"{t['stalls']} of {t['requests']} requests stalled, worst stall "
             f"{t['worst_stall_ms'] / 1e3:.2f} s; {sum(t['compiles'])} graphs"
             f"{recordings(t)}"]  # fmt: skip
    if (buckets := t.get("buckets")) and buckets[0] < buckets[1]:
        hit, every = buckets
        lines.append(f"           pre-warmed: all {every} buckets compiled before the first "
                     f"request; the {every - hit} the traffic did not hit priced at the mean "
                     f"stall of the {hit} it did")  # fmt: skip
    if t["ran_eager"]:
        shown = ", ".join(map(str, t["ran_eager"][:8]))
        more = "…" if len(t["ran_eager"]) > 8 else ""
        lines.append(f"           requests {shown}{more} ran eager (a new shape past the "
                     "recompile limit, or under eager_on_recompile)")  # fmt: skip
    if moved := t.get("moved"):
        lines.append(f"           requests {', '.join(map(str, moved[:8]))}"
                     f"{'…' if len(moved) > 8 else ''} ran another graph than their shape's "
                     "first arrival (a later dynamic graph took it over): played again, a "
                     "recording there a stall")  # fmt: skip
    lines += bucket_lines(m)
    if "answers" in t:  # a generate traffic
        answers = t["answers"]
        lens = t.get("cache_lens") or [t["cache_len"]]
        caches = (f"one static KV cache of {lens[0]} positions (eager's: generate's own)"
                  if len(lens) == 1 else
                  f"static KV caches of {', '.join(map(str, lens))} positions (eager static's "
                  f"{t['cache_len']}; eager's: generate's own)")  # fmt: skip
        lines.append(f"           answers {min(answers)}..{max(answers)} new tokens; {caches} "
                     "a batch size; each request's TTFT, time per token and stall in "
                     "--json")  # fmt: skip
        lines += [f"  prompt   batch {r['batch_size']} seq {r['seq_len']}"
                  + (f" cache {r['cache_len']}" if len(lens) > 1 else "")
                  + f" ({r['weight']:.0%}): "
                  f"decode {r['compiled_ms']:.3f} ms a token (eager {r['eager_ms']:.3f}), TTFT "
                  f"{r['ttft_ms']:.3f} ms (eager {r['eager_ttft_ms']:.3f})"
                  for r in t.get("steady", [])]  # fmt: skip
        return lines
    for row in t.get("steady", []):
        lines.append(f"  shape    batch {row['batch_size']} seq {row['seq_len']} "
                     f"({row['weight']:.0%}): {row['compiled_ms']:.3f} ms, eager "
                     f"{row['eager_ms']:.3f} ms")  # fmt: skip
    return lines


def static_line(m: Measurement) -> list[str]:
    """Which eager a generate trial's figures are against, and what a static cache alone
    buys (eager on the compiled side's static cache), where the trial timed it."""
    st = m.eager_static
    if not st or not m.eager_latency or not m.eager_ttft or not m.latency:
        return []
    return [f"eager      model.generate with its default cache; on a static cache (as compiled) "
            f"{st['tpot_ms']:.3f} ms a token, TTFT {st['ttft_ms']:.3f} ms: the static cache "
            f"alone gives {m.eager_latency.median_ms / st['tpot_ms']:.2f}x a token, compiling on "
            f"it {st['tpot_ms'] / m.latency.median_ms:.2f}x more"]  # fmt: skip


def continuous_lines(c: dict) -> list[str]:
    """A continuous trial's warm-up, first pass, steady pass, config and padding."""
    first, steady = c["first"], c["steady"]

    def pair(name: str, side: dict, eager: dict, unit: str = " ms") -> str:
        return f"{_number(side[name])}{unit} (eager {_number(eager[name])})"

    stalls = c["stalls_s"]
    return [
        f"continuous ready after {seconds(c['ready_s'])}; first pass: {len(stalls)} compiles "
        f"after warm-up ({sum(stalls):.2f} s of stalls), TTFT p90 "
        f"{pair('ttft_p90_ms', first['compiled'], first['eager'])}",
        f"           steady: TTFT p50 {pair('ttft_p50_ms', steady['compiled'], steady['eager'])}"
        f", p90 {pair('ttft_p90_ms', steady['compiled'], steady['eager'])}; TPOT p50 "
        f"{pair('tpot_p50_ms', steady['compiled'], steady['eager'])}; "
        f"{pair('tokens_per_s', steady['compiled'], steady['eager'], ' tokens/s')}; goodput "
        f"{pair('goodput', steady['compiled'], steady['eager'], ' requests/s')}",
        "           served with ContinuousBatchingConfig("
        + ", ".join(f"{k}={v!r}" for k, v in c["config"].items())
        + ")",
        *padding_line(c.get("padding") or {}),
        *eager_line(c),
    ]


def eager_line(c: dict) -> list[str]:
    """The first pass's batches that ran eager past the recompile limit, and their requests;
    the functions past it that are no forward of the model."""
    ran, said = c.get("ran_eager") or [], []
    if c.get("eager_batches"):
        shown = ", ".join(map(str, ran[:8])) + ("…" if len(ran) > 8 else "")
        said.append(f"           past the recompile limit, {c['eager_batches']} batch(es) of the "
                    f"first pass ran eager, serving {len(ran)} of {len(c['first_tokens'])} "
                    f"requests in part ({shown})")  # fmt: skip
    if c.get("limit_elsewhere"):
        said.append("           past the recompile limit too, not counted above (no forward "
                    "of the model; what it calls then runs the graphs already compiled for it, "
                    "else eager): " + "; ".join(c["limit_elsewhere"]))  # fmt: skip
    return said


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def padding_line(p: dict) -> list[str]:
    """A continuous strategy's padding over eager's batches, where it has any."""
    if not p:
        return []
    return [
        f"           padding over eager's {p['batches']:.0f} batches: query tokens "
        f"+{p['q_waste']:.0%}, attention reads +{p['kv_waste']:.0%}, {p['shapes']:.0f} "
        "padded shapes (varlen path)"
    ]


def intervals_lines(auto: dict | None) -> list[str]:
    """How ``pad=auto`` chose its intervals, and what they were predicted and measured to
    cost (none for another strategy)."""
    if not auto or "intervals" not in auto:
        return []
    q, kv = auto["intervals"]
    cost = f"predicted {auto['predicted']['total_s']:,.0f} s"
    if done := auto.get("measured"):
        cost += f", measured {done['total_s']:,.0f} s"
    model, pilot = auto["model"], auto["pilot"]
    lines = [f"  padding  auto intervals: q {q}, kv {kv}, chosen by their cost over "
             f"{auto['lifetime_s'] / 3600:g} h of serving ({cost}; the pilot's "
             f"{pilot['batching']} {pilot['cost']['total_s']:,.0f} s), from eager's "
             f"{auto['batches']} batches: a padded shape's compiles {auto['stall_s']:.2f} s, "
             f"a batch "
             f"{model['base'] * 1e3:.3f} ms + {model['per_token'] * 1e3:.2e} ms a token + "
             f"{model['per_pair'] * 1e3:.2e} ms a token pair"]  # fmt: skip
    if auto.get("note"):
        lines.append(f"           {auto['note']}")
    return lines
