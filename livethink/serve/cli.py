"""`livethink serve --config configs/tiny/serve.yaml [--host 127.0.0.1 --port 8000] [--dry-run]`.

``--set key=value`` overrides a config field (dotted, YAML-parsed value), e.g. ``--set engine.kind=transformers
--set models.rft.path=runs/tiny/rft/final``. ``--dry-run`` validates the config (models, experiments, store
URL) without loading weights or needing a GPU, prints a JSON report (with each model's thinking floor:
configured, calibrated or none, and ``below_min_thinking``: what a request below it gets per endpoint, and why)
and exits 0 (ok) or 1 (problems).
``--openapi docs/openapi.json`` writes the server's OpenAPI document (no config needed; ``-`` for stdout).
vLLM spawns its engine process, so this module is the ``__main__`` of the server process. Exit codes: 0 stopped,
2 invalid config, 3 the engine failed to start, 4 an engine died more often than ``engine.restart_max`` allows.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from livethink.serve.config import ServeConfig


def _parse_sets(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _add_thinking_floors(config: ServeConfig, report: dict) -> None:
    """Each model's thinking floor as the server will use it (configured, calibrated or none), and what a
    request below it gets per endpoint (``below_min_thinking``, the shape of ``/health``'s)."""
    from livethink.serve.quality import below_floor_report, floor_for

    floors = {}
    for name, entry in report["models"].items():
        try:
            floors[name] = floor_for(config, name)
            entry["thinking_floor"] = floors[name].card()
        except ValueError as exc:  # a calibration file that does not parse
            report["problems"].append(f"models.{name}: {exc}")
            report["ok"] = False
    report["below_min_thinking"] = below_floor_report(config, floors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="livethink serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="serve YAML (configs/tiny/serve.yaml); required unless --openapi")
    parser.add_argument("--host", help="bind address (default: server.host of the config, 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port (default: server.port of the config; 0 = any free port)"
    )
    parser.add_argument("--engine", choices=["auto", "vllm", "transformers"], help="override engine.kind")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field"
    )
    parser.add_argument("--dry-run", action="store_true", help="validate the config and exit")
    parser.add_argument("--openapi", metavar="FILE", help="write the OpenAPI document to FILE ('-': stdout) and exit")
    args = parser.parse_args(argv)
    if args.openapi:
        from livethink.serve.openapi import main as write_openapi

        return write_openapi([] if args.openapi == "-" else ["--out", args.openapi])
    if not args.config:
        parser.error("--config is required (unless --openapi)")

    from livethink.serve.config import ConfigError, dry_run, load_config

    try:
        overrides = _parse_sets(args.set)
        if args.engine:
            overrides["engine.kind"] = args.engine
        if args.host:
            overrides["server.host"] = args.host
        if args.port is not None:
            overrides["server.port"] = args.port
        config = load_config(args.config, overrides)
    except (ConfigError, ValueError, yaml.YAMLError) as exc:
        print(f"livethink serve: invalid config: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        report = dry_run(config)
        _add_thinking_floors(config, report)
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["ok"] else 1

    import uvicorn

    from livethink.serve.app import create_app
    from livethink.serve.clock import uvicorn_http

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    level = config.server.log_level
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(config)
    app.state.exit_on_engine_error = True
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.server.host,
            port=config.server.port,
            log_level=level,
            access_log=False,
            timeout_graceful_shutdown=5,
            http=uvicorn_http(),  # stamps each request at its first byte (the deadline counts from there)
        )
    )
    # an engine whose restart budget is spent stops the server; the exit code (4) tells its supervisor
    app.state.request_exit = lambda: setattr(server, "should_exit", True)
    server.run()
    if not server.started:
        return 3
    return app.state.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
