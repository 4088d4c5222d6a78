"""The README's commands and code run exactly as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
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


def _service_block() -> str:
    text = (README.parent / "docs" / "service.md").read_text()
    return re.findall(r"```bash\n(.*?)```", text, re.S)[0]


@pytest.mark.slow
def test_readme_service_commands_run_as_written(tmp_path: Path) -> None:
    """The Service section's commands, run as one shell script exactly as written, on a free
    port instead of 8321 (so that tests never collide): serve, a queue worker, the submit and
    the lookup that waits for the exported answer; then both are stopped as asked."""
    import json
    import os
    import signal
    import time

    from autotune.storage import Store
    from tests.postgres import free_port

    block = _service_block()
    assert block.count("8321") >= 4 and "autotune queue-worker" in block
    script = block.replace("8321", str(free_port()))
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_STORAGE", "AUTOTUNE_TOKEN")}
    env["PYTHONPATH"] = str(README.parent)
    # Files, not pipes: the server and the worker run on after the script ends, holding them.
    with open(tmp_path / "out", "w") as out_f, open(tmp_path / "err", "w") as err_f:
        shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                                 env=env, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL,
                                 start_new_session=True)  # fmt: skip
    try:
        shell.wait(timeout=600)
    finally:
        try:  # the server and the worker it left running, asked to stop
            os.killpg(shell.pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                os.killpg(shell.pid, 0)
                time.sleep(0.5)
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # every process of the script has ended
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert shell.returncode == 0, err[-3000:]
    answers, decoder, at = [], json.JSONDecoder(), out.find("{")
    while at >= 0:  # curl prints each answer without a newline, among the server's lines
        try:
            value, end = decoder.raw_decode(out, at)
            answers.append(value)
        except json.JSONDecodeError:
            end = at + 1
        at = out.find("{", end)
    health, submitted, found = answers[0], answers[1], answers[-1]
    assert health["status"] == "ok" and submitted["study"] == "toy-ci"
    assert found["study"] == "toy-ci" and found["exported"] is True
    latest = Store(f"sqlite:///{tmp_path}/studies/autotune.db").latest_export("toy-ci")
    assert latest is not None and found["config"] == json.loads(latest.content)
    assert (tmp_path / "studies" / "toy-ci" / "best.json").is_file()  # the worker's export
