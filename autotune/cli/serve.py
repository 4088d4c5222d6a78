"""``autotune serve``: the HTTP API and live pages over a storage."""

from __future__ import annotations

import argparse
import contextlib
import socket
from typing import Any

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
