"""Stage-2 YAML configs with a shared base: ``base: grpo_base.yaml`` (resolved relative to the file) is loaded first
and the file's own keys override it; a base may have a base of its own. Command-line flags override both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

BASE_KEY = "base"


def load_config_file(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The mapping of ``path`` merged over its ``base`` chain (top-level keys; ``env`` mappings are merged too)."""
    path = Path(path).resolve()
    if path in _seen:
        raise ValueError(f"base: {path} includes itself (chain: {' -> '.join(str(p) for p in (*_seen, path))})")
    if not path.is_file():
        where = f" (the base of {_seen[-1]})" if _seen else ""
        raise ValueError(f"config file {path} not found{where}")
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ValueError(f"config file {path} must contain a YAML mapping, got {type(loaded).__name__}")
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
