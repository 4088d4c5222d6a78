"""``--dtype auto`` under load: how often each way of timing bfloat16 against float32 would flip
the decision, beside two busy processes (one busy all the time, one 30 ms of every 50).

Each decision is made in a fresh process, as a search makes it. ``old`` is the timing this
replaced (the median of 3 calls of each side, one side after the other); ``new`` is
:func:`autotune.environment.matmul_ratio` (15 interleaved pairs, the quickest of each side),
and ``decided`` what :func:`autotune.environment.auto_dtype` answered (the flags first, the
timing to confirm). A ratio of 4 or more says float32.

    python bench/dtype_decision.py [N]      # N decisions under load (default 10), then N quiet
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUSY = "while True: pass"
BURSTS = ("import time\nwhile True:\n t = time.time()\n while time.time() - t < 0.03: pass\n"
          " time.sleep(0.02)")  # fmt: skip
ONE = """
import json, statistics, time, torch
from autotune import environment
def old():
    def median_s(kind):
        a, b = torch.randn(64, 1024).to(kind), torch.randn(1024, 1024).to(kind)
        a @ b
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            a @ b
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)
    return median_s(torch.bfloat16) / median_s(torch.float32)
o = old()
d = environment.auto_dtype("cpu")
print(json.dumps({"old": o, "new": d.timed[0], "timed": len(d.timed), "decided": d.dtype}))
"""


def decisions(n: int) -> list[dict[str, object]]:
    found = []
    for _ in range(n):
        done = subprocess.run([sys.executable, "-c", ONE], capture_output=True, text=True,
                              cwd=ROOT, timeout=300)  # fmt: skip
        found.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return found


def show(label: str, rows: list[dict[str, object]]) -> None:
    old = [float(r["old"]) for r in rows]  # type: ignore[arg-type]
    new = [float(r["new"]) for r in rows]  # type: ignore[arg-type]
    print(f"{label}: old ratio {min(old):.2f}-{max(old):.2f}, {sum(r >= 4 for r in old)} of "
          f"{len(rows)} would say float32; new ratio {min(new):.2f}-{max(new):.2f}, "
          f"{sum(r >= 4 for r in new)} of {len(rows)} disagree with the flags' "
          f"{rows[0]['decided']}; decided: "
          f"{', '.join(sorted({str(r['decided']) for r in rows}))}; timed twice: "
          f"{sum(int(r['timed']) > 1 for r in rows)}")  # type: ignore[call-overload]  # fmt: skip


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    from autotune import environment

    print(f"{environment.cpu_model()}, flags say: {environment.native_bf16()}")
    load = [subprocess.Popen([sys.executable, "-c", code]) for code in (BUSY, BURSTS)]
    try:
        time.sleep(0.5)
        show("under two busy processes", decisions(n))
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
    show("quiet", decisions(n))


if __name__ == "__main__":
    main()
