"""``python -m livethink.serve.api.openapi --out docs/openapi.json [--check]``: write (or check) the server's OpenAPI
document, as ``/openapi.json`` of a running server serves it. How routes document themselves: ``api_docs.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from livethink.serve.api.app import create_app
from livethink.serve.config import ServeConfig


def document() -> dict[str, Any]:
    """The document of the server as built by ``create_app`` (no engines are started)."""
    config = ServeConfig(models={"model": {"path": "model"}}, default_model="model")
    return create_app(config).openapi()


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m livethink.serve.api.openapi", description="Write the server's OpenAPI document."
    )
    parser.add_argument("--out", help="file to write (default: stdout), e.g. docs/openapi.json")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out differs from the generated one")
    args = parser.parse_args(argv)
    text = render(document())
    if args.out is None:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    if args.check:
        if not out.is_file() or out.read_text() != text:
            print(f"{out} is out of date: run python -m livethink.serve.api.openapi --out {out}", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
