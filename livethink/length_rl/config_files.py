"""Training YAML configs with a shared base: ``base: grpo_base.yaml`` (resolved relative to the file) is loaded first
and the file's own keys override it; a base may have a base of its own. Command-line flags override both.

A file that cannot be read or parsed is one line naming it (``livethink.yaml_files``: file, line, column, reason)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from livethink.yaml_files import read_yaml

BASE_KEY = "base"


def load_config_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The mapping of ``path`` merged over its ``base`` chain (top-level keys; ``env`` mappings are merged too)."""
    shown = path if not _seen else _relative(Path(path).resolve())
    path = Path(path).resolve()
    if path in _seen:
        raise ValueError(f"base: {path} includes itself (chain: {' -> '.join(str(p) for p in (*_seen, path))})")
    if not path.exists():
        where = f" (the base of {_relative(_seen[-1])})" if _seen else ""
        raise ValueError(f"config file {shown} not found{where}")
    loaded = read_yaml(path, shown=shown)
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ValueError(f"config file {shown} must contain a YAML mapping, got {type(loaded).__name__}")
    base = loaded.pop(BASE_KEY, None)
    if base is None:
        return loaded
    if not isinstance(base, str) or not base:
        raise ValueError(f"{path}: base must be a file name (relative to {path.parent}), got {base!r}")
    merged = load_config_file(path.parent / base, (*_seen, path))
    env = {**(merged.get("env") or {}), **(loaded.get("env") or {})}
    merged.update(loaded)
    if env:
        merged["env"] = env
    return merged


def _relative(path: Path) -> Path:
    """``path`` relative to the working directory when it is under it (messages name files as a user would)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
