"""Reading a YAML file the user wrote: every way it can fail is one line naming the file (and where in it).

``read_yaml(path)`` returns the parsed document or raises ``YAMLFileError`` whose message is one line:
``configs/tiny/rft.yaml:7:12: not valid YAML: mapping values are not allowed here`` (line and column from the
parser's ``problem_mark``, 1-based, as editors count), ``configs/x.yaml: file not found``, ``configs: a directory,
not a YAML file``. ``yaml_error_line`` formats a ``yaml.YAMLError`` the same way for code that reads the text
itself. Every command's config loader goes through here (the training commands' ``--config`` and its ``base:``
chain, the student YAML, A/B experiment files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YAMLFileError(ValueError):
    """A YAML file that cannot be read or parsed; the message is one line naming the file."""


def yaml_error_line(path: str | Path, exc: yaml.YAMLError) -> str:
    """``path:line:column: not valid YAML: <the parser's reason>`` (one line)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        reason = exc.problem or exc.context or "not valid YAML"
        context = f" ({exc.context})" if exc.context and exc.problem else ""
        start = exc.context_mark
        if context and start is not None and mark is not None and start.line != mark.line:  # an unclosed quote
            context = f" ({exc.context} at line {start.line + 1}, column {start.column + 1})"
        return f"{where}: not valid YAML: {reason}{context}"
    return f"{path}: not valid YAML: {' '.join(str(exc).split())}"


def read_yaml(path: str | Path, shown: str | Path | None = None) -> Any:
    """The document of the YAML file ``path`` (None for an empty file); ``shown``: how messages name it (default:
    ``path`` as given). Raises ``YAMLFileError`` (one line)."""
    name = shown if shown is not None else path
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YAMLFileError(f"{name}: file not found") from None
    except IsADirectoryError:
        raise YAMLFileError(f"{name}: a directory, not a YAML file") from None
    except UnicodeDecodeError as exc:
        raise YAMLFileError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise YAMLFileError(f"{name}: cannot be read ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a safe loader: libyaml's when installed)
    except yaml.YAMLError as exc:
        raise YAMLFileError(yaml_error_line(name, exc)) from None


__all__ = ["YAMLFileError", "read_yaml", "yaml_error_line"]
