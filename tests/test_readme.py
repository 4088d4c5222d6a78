"""The README's commands and code run exactly as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_setup_commands_install_torch_first_and_test_command_matches_ci() -> None:
    text = README.read_text()
    commands = [c for c in re.findall(r"```bash\n(.*?)```", text, re.S) if "pip install" in c]
    assert len(commands) == 2
    assert all(c.startswith("pip install torch==2.13.0 && ") for c in commands)
    test = next(c for c in commands if "pytest" in c).strip()
    pytest_args = test.split("python -m pytest", 1)[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert f'pip install --quiet -e ".[test]" && python3 -m pytest{pytest_args}\n' in ci


def test_readme_python_example_runs(in_tmp: Path) -> None:
    text = README.read_text()
    search = re.search(r"after `(autotune search [^`]*)`", text)
    assert search is not None
    argv = search.group(1).split()[1:]
    subprocess.run(
        [sys.executable, "-m", "autotune.cli", *argv, "--layers", "2", "--iters", "2",
         "--no-progress", "--trials", "3"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert (in_tmp / "best.json").is_file()
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch.Size([10, 10])" in out.stdout and "ok compile" in out.stdout
