"""Plain text for people: seconds, a search's time split, and left-aligned tables."""

from __future__ import annotations

from collections.abc import Sequence


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.1f} s"


def time_split(split: dict[str, float]) -> str:
    """One line of where a search's seconds went (:meth:`autotune.search.plan.Plan.split`),
    with the whole against the compiles it measured: what the harness adds to them."""
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in split.items() if k != "total")
    total, compiles = split["total"], split.get("compile", 0.0)
    times = f"{total / compiles:.1f}x the compiles measured" if compiles > 0 else "no compile"
    return f"time: {total:.0f} s in all ({times}): {parts}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned plain-text table."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)
