"""The GPU acceptance run's plan (bench/gpu.py), on a CPU: its dry run parses the very command
lines its checks run, and a bad one fails it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from tests.bench.test_gpu_portable import bench


def test_the_dry_run_parses_the_command_lines_the_checks_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The dry run parsed other lines than checks 8 and 9 ran (``search --workers 2 --json``
    without its space): a line that did not parse passed it."""
    gpu = bench()
    checks = dict(gpu.plan())
    ran: list[list[str]] = []

    def cli(*argv: str, cwd: str) -> subprocess.CompletedProcess:
        ran.append(list(argv))
        return subprocess.CompletedProcess(list(argv), 1, "", "stopped here by the test")

    monkeypatch.setattr(gpu, "_cli", cli)
    for number in (8, 9):
        found = checks[number].run("cuda:0")
        assert not found.passed  # a failed command is the check's FAIL
        assert ran[-1] in checks[number].commands  # what ran is what the dry run parses
    assert checks[8].commands[1][2:4] == ["--load-portable", "FOLDER"]
    assert gpu.dry_run([(8, checks[8]), (9, checks[9])]) == 0
    bad = gpu.Check("a bad line", [], checks[9].run, commands=[[*gpu.WORKERS, "--mode", "fast"]])
    with pytest.raises(ConfigError, match="fast"):
        gpu.dry_run([(9, bad)])


def test_the_table_reads_one_or_more_reports() -> None:
    gpu = bench()
    first = {"checks": [{"number": 2, "name": "toy-64", "passed": False,
                         "lines": ["FAIL full: 1.0x"]},
                        {"number": 8, "name": "portable", "passed": None,
                         "skipped": "needs 2 GPUs, 1 visible"}]}  # fmt: skip
    again = {"checks": [{"number": 2, "name": "toy-64", "passed": True,
                         "lines": ["PASS full: 8.4x", "PASS regional: 1.2x"]}]}  # fmt: skip
    rows = gpu.table([first, again]).splitlines()  # a later report's check replaces the first's
    assert rows[2] == "| 2. toy-64 | PASS: full: 8.4x; regional: 1.2x |"
    assert rows[3] == "| 8. portable | not run: needs 2 GPUs, 1 visible |"
