"""Real Chromium, headless: load a page (a file or a live server's URL), return its DOM and its
log, and take a screenshot on request. Tests that need it skip where Debian's chromium is not
installed (.ci/run installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


def chromium(target: str, screenshot: Path | None = None, height: int = 5400) -> tuple[str, str]:
    """Load ``target`` (a URL) in headless Chromium; return its DOM and its log."""
    assert CHROMIUM
    with tempfile.TemporaryDirectory() as profile:
        flags = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            f"--window-size=1400,{height}", "--virtual-time-budget=10000",
        ]  # fmt: skip
        shot = [f"--screenshot={screenshot}"] if screenshot else []  # in the same run
        run = subprocess.run([*flags, *shot, "--dump-dom", target],
                             capture_output=True, text=True, timeout=180)  # fmt: skip
        assert screenshot is None or screenshot.is_file(), run.stderr[-2000:]
    return run.stdout, run.stderr


def rendered_plots(dom: str) -> int:
    """How many Plotly charts drew their SVG."""
    parts = dom.split('class="plotly-graph-div')[1:]
    return sum('class="main-svg"' in part.split("plotly-graph-div")[0] for part in parts)


def console_errors(log: str) -> list[str]:
    lines = [line for line in log.splitlines() if "CONSOLE" in line]
    return [line for line in lines if re.search(r"error|uncaught", line, re.I)]
