"""The docs: the site builds strictly, the generated CLI page is current, every autotune command
they show is one the parser takes, and the Python API page's example runs as written."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import CLI_PAGE, cli_reference

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                         env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").read_text().count("autotune.tune") > 0


def test_the_cli_page_is_generated_from_the_parser() -> None:
    assert CLI_PAGE.read_text() == cli_reference(), "run: python -m tests.docs"


def commands() -> list[tuple[str, str]]:
    """Every ``autotune ...`` line of a bash block in the README and the docs."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                line = line.split("#", 1)[0].strip().rstrip("&").strip()
                for part in line.split("&&"):
                    if part.strip().startswith("autotune "):
                        found.append((page.name, part.strip()))
    return found


def test_every_command_the_docs_show_is_one_the_parser_takes() -> None:
    from autotune.cli import build_parser

    shown = commands()
    assert len(shown) > 15
    parser = build_parser()
    for page, line in shown:
        try:
            parser.parse_args(shlex.split(line)[1:])
        except SystemExit:
            pytest.fail(f"{page}: {line!r} is not a command autotune takes")
    with pytest.raises(SystemExit):  # the check bites
        parser.parse_args(["worker", "--all"])


@pytest.mark.slow
def test_the_api_page_example_runs_as_written(in_tmp: Path) -> None:
    page = (ROOT / "docs" / "api.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", page, re.S)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=in_tmp, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pick.json" in out.stdout and "torch.Size([10, 10])" in out.stdout
