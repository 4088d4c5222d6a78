"""A real PostgreSQL server for tests: initdb in a temporary folder, loopback only, a free port.

Run as root (CI and the development machines), the server runs as the ``postgres`` user.
Tests that need it skip cleanly where no PostgreSQL server binaries are installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PASSWORD = "s3cret-pw"


def bindir() -> Path | None:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running server and how to reach and restart it."""

    bin: Path
    data: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://autotune:{PASSWORD}@127.0.0.1:{self.port}/autotune"

    def _run(self, *argv: str) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, check=True)

    def pg_ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data / "db"), "-o", options,
                  "-l", str(self.data / "log"), "-w", action, *extra)  # fmt: skip

    def psql(self, sql: str) -> str:
        return self._run(str(self.bin / "psql"), "-h", str(self.data), "-p", str(self.port),
                         "-U", "postgres", "-d", "postgres", "-tAc", sql).stdout  # fmt: skip


def start() -> Server:
    found = bindir()
    assert found is not None
    data = Path(tempfile.mkdtemp(prefix="autotune-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    server = Server(found, data, free_port())
    server._run(str(found / "initdb"), "-D", str(data / "db"), "--auth-local=trust",
                "--auth-host=scram-sha-256", "-U", "postgres")  # fmt: skip
    server.pg_ctl("start")
    server.psql(f"CREATE ROLE autotune LOGIN PASSWORD '{PASSWORD}'")
    server.psql("CREATE DATABASE autotune OWNER autotune")
    return server


def stop(server: Server) -> None:
    server.pg_ctl("stop", "-m", "immediate")
    shutil.rmtree(server.data, ignore_errors=True)
