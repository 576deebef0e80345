"""``ConfigError``: a config mistake, with the field named (one line, no traceback, exit 2 in every command).

Its own module so that the modules that check configs (``config_sections``, ``option_ranges``) import it
without importing each other; ``livethink.config_sections`` re-exports it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config mistake, with the field named."""


__all__ = ["ConfigError"]
