"""``autotune serve`` (the HTTP API and live pages over a storage) and ``autotune
queue-worker`` (a worker that serves the storage's queue of studies)."""

from __future__ import annotations

import argparse
import contextlib
import socket
from typing import Any

from autotune.cli.parser import allowed_code
from autotune.errors import ConfigError


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from autotune.service import ServiceSettings, check_bind, create_app

    settings = ServiceSettings.from_environment(args.storage, args.token, args.model_root,
                                                args.max_body)  # fmt: skip
    check_bind(args.host, settings.token)
    app: Any = create_app(settings)  # reaches the storage: one line if it cannot
    service = app.state.service
    sock = _listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    writes = "writes need the token" if settings.token else "read-only: no token, no writes"
    print(f"serving {service.shown} on http://{shown}:{port}/ ({writes})", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=args.access_log,
                            server_header=False, timeout_graceful_shutdown=5)  # fmt: skip
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C or SIGTERM: a clean stop
        uvicorn.Server(config).run(sockets=[sock])
    print("stopped", flush=True)
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one, printed at start)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so; without it a
    # response's headers and body wait for a delayed ACK (40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def cmd_queue_worker(args: argparse.Namespace) -> int:
    from autotune.job.worker import serve
    from autotune.search import Lines
    from autotune.search.spec import parse_duration

    class Log(Lines):  # each strategy measured on stdout; notes on stderr
        def measured(self, key: str, done: int) -> None:
            print(f"measured {key} ({done} in the study)", flush=True)

    idle = parse_duration(args.idle_timeout, "--idle-timeout")

    print("worker serving the queue"
          + (f" (idle timeout {args.idle_timeout})" if idle else ""), flush=True)  # fmt: skip
    try:
        shift = serve(args.storage, device=args.device, allow=allowed_code(args),
                      idle_timeout_s=idle, listener=Log(),
                      confirm=not args.no_confirm)  # fmt: skip
    except KeyboardInterrupt:  # asked before the queue was open
        print("worker: stopped: asked", flush=True)
        return 0
    done = ", ".join(shift.finished) or "none"
    print(f"worker: {len(shift.studies)} studies, measured {shift.measured}, finished {done}; "
          f"stopped: {shift.stopped}", flush=True)  # fmt: skip
    return 0  # asked to stop (Ctrl-C, SIGTERM) or idle: either is how a queue worker ends
