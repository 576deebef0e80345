"""Argument parsing shared by livethink's argparse commands (serve, replicas, ab, eval, data, demo, doctor).

``FlagParser`` is ``argparse.ArgumentParser`` that also accepts each dashed long flag spelled with underscores
(``--dry_run`` for ``--dry-run``), as the training commands spell theirs; ``--help`` shows the dashed form only. A
command-line mistake is one line on stderr (``livethink eval: argument --batch-size: must be >= 1, got 0``), exit 2,
without argparse's usage dump.
``key_value`` is the ``type=`` of ``--set KEY=VALUE`` config overrides (the value is parsed as YAML).
"""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from typing import Any

import yaml


class FlagParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose dashed long flags also answer to their underscore spelling (sub-commands too)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        args = self._dashed(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> typing.NoReturn:
        """One line naming the option and the reason (argparse would print the usage first), exit 2."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def _dashed(self, args: list[str]) -> list[str]:
        known = self._option_string_actions
        out = []
        for i, token in enumerate(args):
            if token == "--":
                return out + args[i:]
            head, eq, value = token.partition("=")
            if head.startswith("--") and "_" in head and head not in known:
                dashed = "--" + head[2:].replace("_", "-")
                if dashed in known:
                    token = dashed + eq + value
            out.append(token)
        return out


def key_value(item: str) -> tuple[str, Any]:
    """``"engine.kind=vllm"`` → ``("engine.kind", "vllm")``; the value is YAML (``{path: x}``, ``800``, ``null``)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {item!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{key.strip()}: the value is not valid YAML ({exc})") from None
