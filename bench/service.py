"""The search service under load: p50 and p99 latency, and errors, of the index, the lookup and a
study page, at 1, 16 and 64 concurrent clients, on loopback, while a worker writes trials.

    python bench/service.py [--pin] [--storage sqlite,postgres] [--clients 1,16,64]
                            [--requests 20000] [--max-s 20] [--raw FILE]

Per storage: a finished study (``toy-64``, eager and aot_eager, exported) answers the lookup
and is the study page; a second study is searched by ``autotune search`` for the whole run,
so that trials are written while the clients ask (its writes change what the service keeps).
``autotune serve`` runs in its own process; the clients run in this one (see :func:`cell`).
Each cell (storage, clients, endpoint) stops after ``--requests`` answers or ``--max-s``
seconds, whichever is first. An
error is a status other than 200, or no answer. PostgreSQL is a throwaway server started here
(``tests/postgres.py``; needs the server binaries).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ENDPOINTS = {
    "index": "/",
    "lookup": "/api/lookup?model=toy-64&layers=2&device=cpu",
    "study page": "/studies/done",
}
SPACE = ["--backend", "eager,aot_eager", "--dynamic", "none", "--fullgraph", "false"]


PIN: dict[str, set[int]] = {}  # with --pin: the CPUs of the server and of everything else


def autotune(folder: Path, url: str, *args: str, wait: bool = True) -> subprocess.Popen:
    """An ``autotune`` command on the storage ``url``, run in ``folder`` (``serve`` on the
    server's CPU when pinned)."""
    cpus = PIN.get("server") if args[0] == "serve" else None
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    env = {**os.environ, "AUTOTUNE_STORAGE": url, "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_TOKEN", None)
    log = subprocess.PIPE if wait or args[0] == "serve" else open(folder / f"{args[0]}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", *args], cwd=folder, env=env,
                            stdout=log, stderr=subprocess.STDOUT if log != subprocess.PIPE
                            else subprocess.PIPE, text=True, preexec_fn=pin)  # fmt: skip
    if wait:
        _, err = proc.communicate(timeout=1800)
        if proc.returncode:
            raise SystemExit(f"autotune {' '.join(args)} failed: {err.strip()[-500:]}")
    return proc


def writing(folder: Path, url: str) -> subprocess.Popen:
    """A worker that writes trials for the whole run: one small search after another, each a
    new study (so that every few seconds the storage changes), at ``nice 10`` beside the
    server on this 2-core machine (on a deployment it runs on a machine of its own)."""
    search = " ".join(
        [
            sys.executable,
            "-m",
            "autotune.cli",
            "search",
            "--model",
            "toy-64",
            "--layers",
            "2",
            *SPACE,
            "--granularity",
            "none,full,regional",
            "--trials",
            "5",
            "--iters",
            "20",
            "--no-progress",
            "--no-confirm",
        ]
    )  # the writer inherits this process's CPUs (with --pin, not the server's)
    loop = f"i=0; while true; do {search} --study live-$i >> writer.log 2>&1; i=$((i+1)); done"
    env = {**os.environ, "AUTOTUNE_STORAGE": url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(["nice", "-n", "10", "bash", "-c", loop], cwd=folder, env=env,
                            start_new_session=True)  # fmt: skip


def serve(folder: Path, url: str) -> tuple[subprocess.Popen, str]:
    """``autotune serve --port 0`` and the address it prints."""
    proc = autotune(folder, url, "serve", "--port", "0", wait=False)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"on (http://[^/ ]+)/", line)
    if not found:
        proc.kill()
        raise SystemExit(f"the server did not start: {line}{proc.stderr.read()[-500:]}")  # type: ignore[union-attr]
    return proc, found.group(1)


async def cell(base: str, path: str, clients: int, requests: int, max_s: float) -> dict:
    """``clients`` concurrent clients asking ``path`` until ``requests`` answers or ``max_s``.
    Each client is one keep-alive HTTP/1.1 connection, opened before the clock starts, asking
    one request after another. The client is asyncio's own streams, not an HTTP library: at
    64 clients httpx alone took most of a core here, and the clients share the machine."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    latencies: list[float] = []
    errors = 0
    left = requests
    pool = [await asyncio.open_connection(host, int(port)) for _ in range(clients)]
    deadline = time.perf_counter() + max_s

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal left, errors
        while left > 0 and time.perf_counter() < deadline:
            left -= 1
            t = time.perf_counter()
            try:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                ok = head.split(b" ", 2)[1] == b"200"
                size = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:"))  # fmt: skip
                await reader.readexactly(size)
            except (OSError, asyncio.IncompleteReadError, StopIteration, ValueError):
                ok = False
            latencies.append((time.perf_counter() - t) * 1e3)
            errors += not ok

    t0 = time.perf_counter()
    await asyncio.gather(*(client(r, w) for r, w in pool))
    wall = time.perf_counter() - t0
    for _, w in pool:
        w.close()
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else []
    return {"requests": len(latencies), "errors": errors, "wall_s": round(wall, 2),
            "p50_ms": round(q[49], 1) if q else None, "p99_ms": round(q[98], 1) if q else None,
            "rps": round(len(latencies) / wall, 1)}  # fmt: skip


def one_storage(kind: str, url: str, folder: Path, args: argparse.Namespace) -> list[dict]:
    print(f"[{kind}] a finished study, searched and exported…", flush=True)
    autotune(folder, url, "search", "--model", "toy-64", "--layers", "2", *SPACE,
             "--trials", "4", "--iters", "3", "--warmup", "1", "--study", "done",
             "--no-progress")  # fmt: skip
    writer = writing(folder, url)
    server, base = serve(folder, url)
    rows = []
    before = trials(url)
    try:
        with httpx.Client(base_url=base, timeout=60) as http:  # each endpoint answers once
            for name, path in ENDPOINTS.items():
                status = http.get(path).status_code
                if status != 200:
                    raise SystemExit(f"[{kind}] {name} ({path}) answered {status}")
        for clients in args.clients:
            for name, path in ENDPOINTS.items():
                row = asyncio.run(cell(base, path, clients, args.requests, args.max_s))
                row.update(storage=kind, clients=clients, endpoint=name,
                           written=trials(url) - before)  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        os.killpg(writer.pid, signal.SIGTERM)
        for proc in (server, writer):
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    return rows


def trials(url: str) -> int:
    """Trials stored so far, every study."""
    from autotune.storage import Store

    store = Store(url)
    try:
        return sum(len(store.measurements(s.name)) for s in store.studies())
    finally:
        store.engine.dispose()


def table(rows: list[dict]) -> str:
    lines = [
        "| storage | clients | endpoint | requests | errors | p50 ms | p99 ms | req/s | "
        "trials written so far |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['storage']} | {r['clients']} | {r['endpoint']} | {r['requests']} | "
                     f"{r['errors']} | {r['p50_ms']} | {r['p99_ms']} | {r['rps']} | "
                     f"{r['written']} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storage", default="sqlite,postgres")
    ap.add_argument("--clients", default="1,16,64", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--requests", type=int, default=20000, help="answers per cell, at most")
    ap.add_argument("--max-s", type=float, default=20.0, help="seconds per cell, at most")
    ap.add_argument("--raw", type=Path, help="append each cell as a JSON line")
    ap.add_argument("--pin", action="store_true", help="the server on CPU 0, everything else "
                    "(clients, writing worker, PostgreSQL) on the other CPUs, as on a deployment "
                    "where the service has a core of its own")  # fmt: skip
    args = ap.parse_args()
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--pin needs two CPUs or more")
        PIN.update(server={cpus[0]}, rest=set(cpus[1:]))
        os.sched_setaffinity(0, PIN["rest"])  # what this process starts inherits it
    rows: list[dict] = []
    for kind in args.storage.split(","):
        folder = Path(tempfile.mkdtemp(prefix=f"bench-service-{kind}-"))
        if kind == "sqlite":
            rows += one_storage(kind, f"sqlite:///{folder}/s.db", folder, args)
            continue
        from tests import postgres

        server = postgres.start()
        try:
            rows += one_storage(kind, server.url, folder, args)
        finally:
            postgres.stop(server)
    if args.raw:
        with args.raw.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print(table(rows))


if __name__ == "__main__":
    main()
