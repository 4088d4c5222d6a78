"""A real ``autotune serve`` in a subprocess on loopback (a free port, which it prints), and
``autotune`` commands run as a user runs them, for the service's tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = str(Path(__file__).resolve().parents[2])
TOKEN = "test-token-0123456789abcdef"
WAIT_S = 120  # generous: the machine is shared, and a first start imports torch


def env(**extra: str) -> dict[str, str]:
    """The environment of a command under test: this checkout first on the path."""
    base = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_STORAGE", "AUTOTUNE_TOKEN")}
    return {**base, "PYTHONPATH": ROOT, **extra}


@dataclass
class Server:
    """A running ``autotune serve``: its URL, and its output so far."""

    proc: subprocess.Popen
    folder: Path
    url: str = ""
    lines: list[str] = field(default_factory=list)

    def output(self) -> str:
        """Everything the server has written (stdout and stderr)."""
        return "".join(p.read_text() for p in (self.folder / "out", self.folder / "err"))

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> str:
        """Stop it as a process manager does (SIGTERM), kill it if it hangs; its output."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.output()


def serve(folder: Path, *args: str, extra_env: dict[str, str] | None = None,
          wait: bool = True) -> Server:  # fmt: skip
    """Start ``autotune serve --port 0 ARGS`` in ``folder``; wait until it answers
    ``/api/health`` (or, with ``wait=False``, only until it says where it listens)."""
    folder.mkdir(parents=True, exist_ok=True)
    out, err = open(folder / "out", "w"), open(folder / "err", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "serve", "--port", "0", *args], cwd=folder,
        stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env(**(extra_env or {})),
    )  # fmt: skip
    out.close()
    err.close()
    server = Server(proc, folder)
    deadline = time.monotonic() + WAIT_S
    try:
        while not server.url:
            found = re.search(r"on (http://[^/ ]+)/", (folder / "out").read_text())
            if found:
                server.url = found.group(1)
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server did not start: {server.output()[-2000:]}")
            else:
                time.sleep(0.1)
        while wait:
            try:
                if httpx.get(server.url + "/api/health", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server never answered: {server.output()[-2000:]}")
            time.sleep(0.2)
    except BaseException:
        server.stop()
        raise
    return server


def autotune(folder: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """Run one ``autotune`` command to its end, as a user would."""
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=folder,
                          capture_output=True, text=True, env=env(**extra),
                          timeout=600)  # fmt: skip


def start(folder: Path, *args: str, **extra: str) -> subprocess.Popen:
    """Start a long-running ``autotune`` command (a worker), its output piped."""
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", *args], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env=env(**extra))  # fmt: skip


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    """Wait for a command to end (killed if it outlives ``timeout``); its stdout and stderr."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"{proc.args} did not end: {err[-2000:]}") from None
