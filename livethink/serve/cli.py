"""`livethink serve --config configs/tiny/serve.yaml [--host 127.0.0.1 --port 8000] [--dry-run]`.

``--set key=value`` overrides a config field (dotted, YAML-parsed value), e.g. ``--set engine.kind=transformers
--set models.rft.path=runs/tiny/rft/final``. ``--set budget.deadline_ms=800`` sets the deadline of each endpoint
without its own ``endpoints.*.deadline_ms`` (the shipped configs: livestream; chat keeps its 30 s); where every
endpoint sets its own, it is refused. ``--dry-run`` checks the config as start-up would (models, engine,
experiments, store, spool, thinking floors) without loading weights or needing a GPU, prints a JSON report
(``problems``: the config is wrong; ``missing_here``: what this machine lacks to start it, e.g. a checkpoint;
each model's thinking floor and ``below_min_thinking``) and exits 0 (ok) or 2 (problems).
``--openapi docs/openapi.json`` writes the server's OpenAPI document (no config needed; ``-`` for stdout).
vLLM spawns its engine process, so this module is the ``__main__`` of the server process. Exit codes: 0 stopped,
2 invalid config, 3 the engine failed to start, 4 an engine died more often than ``engine.restart_max`` allows.

SIGTERM drains (``livethink.serve.api.drain``): ``/health`` turns 503 ``draining`` at once, new requests get 503 +
``Retry-After``, the requests in flight (streams included) finish, then the process exits 0; ``server.drain_s``
caps the wait. A second SIGTERM, or Ctrl-C (SIGINT), stops at once. ``/health/live`` answers only once the server
listens (after the engines have started): it is the startup probe too.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from argparse import RawDescriptionHelpFormatter
from types import FrameType
from typing import Any

import uvicorn

from livethink.cli_args import FlagParser, key_value
from livethink.serve.api.drain import Drain

log = logging.getLogger("livethink.serve.drain")


def main(argv: list[str] | None = None) -> int:
    parser = FlagParser(prog="livethink serve", description=__doc__, formatter_class=RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="serve YAML (configs/tiny/serve.yaml); required unless --openapi")
    parser.add_argument("--host", help="bind address (default: server.host of the config, 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port (default: server.port of the config; 0 = any free port)"
    )
    parser.add_argument("--engine", choices=["auto", "vllm", "transformers"], help="override engine.kind")
    parser.add_argument(
        "--set", action="append", default=[], type=key_value, metavar="KEY=VALUE",
        help="override a config field (dotted key, YAML value; repeatable)",
    )
    parser.add_argument("--log-format", choices=["text", "json"], default="text",
                        help="text: a line per record; json: one JSON object per line (access lines included)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        help="override server.log_level")
    parser.add_argument("--dry-run", action="store_true", help="check the config as start-up would, print a JSON report and exit")
    parser.add_argument("--openapi", metavar="FILE", help="write the OpenAPI document to FILE ('-': stdout) and exit")
    args = parser.parse_args(argv)
    if args.openapi:
        from livethink.serve.api.openapi import main as write_openapi

        return write_openapi([] if args.openapi == "-" else ["--out", args.openapi])
    if not args.config:
        parser.error("--config is required (unless --openapi)")

    from livethink.serve.config import ConfigError, load_config

    try:
        overrides = dict(args.set)
        if args.engine:
            overrides["engine.kind"] = args.engine
        if args.host:
            overrides["server.host"] = args.host
        if args.port is not None:
            overrides["server.port"] = args.port
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"livethink serve: invalid config: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        from livethink.serve.dry_run import dry_run, print_report

        return print_report(dry_run(config), "livethink serve")

    from livethink.serve.api.app import create_app
    from livethink.serve.api.clock import uvicorn_http
    from livethink.serve.telemetry.access_log import configure_logging

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    level = args.log_level or config.server.log_level
    configure_logging(level, args.log_format)
    app = create_app(config)
    app.state.exit_on_engine_error = True
    server = DrainingServer(
        uvicorn.Config(
            app,
            host=config.server.host,
            port=config.server.port,
            log_level=level,
            access_log=False,
            timeout_graceful_shutdown=5,
            http=uvicorn_http(),  # stamps each request at its first byte (the deadline counts from there)
        ),
        app.state.drain,
        config.server.drain_s,
    )
    # an engine whose restart budget is spent stops the server; the exit code (4) tells its supervisor
    app.state.request_exit = lambda: setattr(server, "should_exit", True)
    try:  # the port is held before the engines start: their own sockets cannot take it meanwhile
        sock = listening_socket(config.server.host, config.server.port)
    except OSError as exc:
        print(f"livethink serve: cannot listen on {config.server.host}:{config.server.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 3
    from livethink.serve.dry_run import preflight

    stop = preflight(config)  # a missing model path, a broken experiments file: one line, before any engine starts
    if stop is not None:
        sock.close()
        print(f"livethink serve: {stop[1]}", file=sys.stderr)
        return stop[0]
    server.run(sockets=[sock])
    if not server.started:
        return 3
    return app.state.exit_code


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose first SIGTERM drains (``Drain``) instead of stopping; it stops once the drain
    is done (no request in flight, or ``drain_s`` passed). The SIGTERM is not re-raised after the shutdown
    (uvicorn re-raises the signals it caught), so the process exits 0."""

    def __init__(self, config: Any, drain: Drain, drain_s: float) -> None:
        super().__init__(config)
        self.drain, self.drain_s = drain, drain_s
        self._announced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM:
            if not self.drain.begin("SIGTERM"):
                self.should_exit = True  # a second SIGTERM: stop now
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self.drain.draining and not self.should_exit:
            if not self._announced:
                self._announced = True
                log.info("draining (%s): /health is 503, new requests are refused; %d in flight, at most "
                         "%.0f s (server.drain_s)", self.drain.reason, self.drain.in_flight, self.drain_s)
            if self.drain.done(self.drain_s):
                if self.drain.in_flight:
                    log.warning("drain: %d requests still in flight after %.0f s (server.drain_s); stopping",
                                self.drain.in_flight, self.drain_s)
                else:
                    log.info("drained: no request in flight; stopping")
                self.should_exit = True
        return await super().on_tick(counter)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (as uvicorn binds it: SO_REUSEADDR), for ``uvicorn.Server.run``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


if __name__ == "__main__":
    raise SystemExit(main())
