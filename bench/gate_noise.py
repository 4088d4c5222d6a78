"""The CI gate's false alarms: one search, then ``autotune check best.json --measure`` N times
on the same code and machine. Every run should pass; the compile times' spread against the
record is what the default tolerance (0.5 of the record, and 1 s) must cover.

    python bench/gate_noise.py [N] [MODEL] [BACKEND]   # default 10, gpt2, aot_eager (--strict:
                                                        # an eager pick gated on its runner-up)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def autotune(folder: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_STUDIES", None)
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    model = sys.argv[2] if len(sys.argv) > 2 else "gpt2"
    backend = sys.argv[3] if len(sys.argv) > 3 else "aot_eager"
    folder = tempfile.mkdtemp(prefix="gate-noise-")
    done = autotune(folder, "search", "--model", model, "--layers", "2", "--granularity",
                    "none,full", "--backend", backend, "--trials", "3", "--iters", "12",
                    "--starts", "cold", "--policy", "fastest", "--no-progress", "--out",
                    "best.json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    gate = json.loads(Path(folder, "best.json").read_text())["autotune"]["gate"]
    print(f"{model} {backend}: pick {gate['strategy']}, recorded {gate['figures']}")
    passed, ratios, loads = 0, [], []
    for _ in range(n):
        done = autotune(folder, "check", "best.json", "--measure", "--json", "--strict")
        report = json.loads(done.stdout)
        passed += done.returncode == 0
        for v in report["verdicts"]:
            if v["name"] == "compile_s":
                ratios.append(v["now"] / v["was"])
            if v["name"] == "speedup" and "not judged" in v["why"]:
                loads.append(v["why"])
            if not v["passed"]:
                print(f"  regressed: {v['name']} {v['was']} -> {v['now']} ({v['why']})")
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}x" if ratios else "not recorded"
    print(f"{passed} of {n} gate runs passed; compile now/recorded {spread}; latency not "
          f"judged under load in {len(loads)}")  # fmt: skip


if __name__ == "__main__":
    main()
